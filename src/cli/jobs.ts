/**
 * The `jobs` commands: `create`, `show`, `history`, `list`, `retry` and `export`, registered with
 * their options; what they do is in `./jobsActions.ts`, imported when one runs. Output is JSON
 * lines with `--json` or when stdout is not a terminal, an aligned table otherwise; messages and
 * the progress bar go to stderr, so stdout stays parseable.
 */
import type { Command } from 'commander';
import { noteOption } from './audit.js';
import { InvalidArgumentError, Option } from './commander.js';
import {
  FAILED_JOB_STATUSES,
  FINAL_JOB_STATUSES,
  JOB_STATUSES,
  type FailedJobStatus,
  type FinalJobStatus,
  type JobStatus,
} from '../../machines/statuses.js';
import type { Since } from '../db/jobs.js';
import { UsageError } from '../errors.js';
import { inspectOptions, oneOrMoreOf, sinceTime, wholeNumber, type InspectOptions } from './plumbing.js';
import { outputOptions, type OutputOptions } from './rows.js';

/** Jobs `jobs list` prints unless told otherwise. */
const DEFAULT_LIST_LIMIT = 100;
/** Jobs a bulk `jobs retry` retries at most unless told otherwise: a typo in a filter cannot requeue everything. */
const DEFAULT_RETRY_LIMIT = 1_000;

const SERVICE = /^[A-Za-z0-9_-]{1,100}$/;
function serviceName(value: string): string {
  if (!SERVICE.test(value)) throw new InvalidArgumentError("must be 1-100 letters, digits, '-' or '_'");
  return value;
}

/** The forms a `--…-since` option takes. */
const SINCE_FORMS = '(30m, 1h, 2d, or an ISO 8601 time)';

/** Options of `jobs create`. */
export interface CreateOptions {
  file: string;
  service: string;
  traceparent?: string;
  tracestate?: string;
}

/** Options of `jobs list`. */
export interface ListOptions extends OutputOptions {
  status?: JobStatus[];
  service?: string;
  file?: string;
  createdSince?: Since;
  finishedSince?: Since;
  limit: number;
}

/** Options of `jobs retry`. */
export interface RetryOptions extends OutputOptions {
  status?: FailedJobStatus[];
  service?: string;
  since?: Since;
  limit: number;
  toService?: string;
  dryRun?: boolean;
  note?: string;
}

/** Options of `jobs export`. */
export interface ExportOptions {
  finishedBefore: Since;
  finishedSince?: Since | undefined;
  status?: FinalJobStatus[] | undefined;
}

/** Register `jobs create|show|list|retry|history|export`. */
export function registerJobsCommands(program: Command): void {
  const jobs = program.command('jobs').description('recognition jobs');
  jobs
    .command('create')
    .description('create a pending job for a file (the file becomes QUEUED and points at it); prints the job')
    .requiredOption('--file <id>', 'stored_file id')
    .requiredOption('--service <name>', 'target recognition service, e.g. tabular-parser')
    .addOption(
      new Option(
        '--traceparent <w3c>',
        "W3C traceparent the job's trace continues from (its publish becomes a child of it)",
      ).env('TRACEPARENT'),
    )
    .addOption(
      new Option('--tracestate <w3c>', 'W3C tracestate that goes with --traceparent').env('TRACESTATE'),
    )
    .action(async (o: CreateOptions) => (await import('./jobsActions.js')).createAction(o));
  jobs
    .command('show <id>')
    .description('print a job, its file and its result object')
    .action(async (id: string) => (await import('./jobsActions.js')).showAction(id));
  inspectOptions(
    jobs
      .command('history <id>')
      .description(
        "print a job's transitions, oldest first; --inspect replays them into the Stately inspector",
      ),
  ).action(async (id: string, o: InspectOptions) => (await import('./jobsActions.js')).historyAction(id, o));
  registerJobsAtScaleCommands(jobs);
  registerJobsExportCommand(jobs);
}

/** `jobs list` and `jobs retry`, on the `jobs` command. */
function registerJobsAtScaleCommands(jobs: Command): void {
  const list = jobs
    .command('list')
    .description('list jobs, newest first: a table in a terminal, JSON lines otherwise (or with --json)')
    .option(
      '--status <statuses>',
      `only these statuses, comma-separated (${JOB_STATUSES.join(', ')})`,
      oneOrMoreOf(JOB_STATUSES),
    )
    .option('--service <name>', 'only jobs for this target service', serviceName)
    .option('--file <id>', 'only the jobs of this stored_file')
    .option('--created-since <when>', `only jobs created since ${SINCE_FORMS}`, sinceTime)
    .option('--finished-since <when>', `only jobs finished since ${SINCE_FORMS}`, sinceTime)
    .option('--limit <n>', 'at most this many jobs', wholeNumber(1), DEFAULT_LIST_LIMIT);
  outputOptions(list).action(async (o: ListOptions) => (await import('./jobsActions.js')).listAction(o));

  const retry = jobs
    .command('retry [id]')
    .description(
      'retry a failed job, or failed jobs in bulk with --status: a new pending job (attempt + 1) for each file whose current job failed; prints the new jobs',
    )
    .option(
      '--status <statuses>',
      `bulk: retry the current jobs of files in these statuses, comma-separated (${FAILED_JOB_STATUSES.join(', ')})`,
      oneOrMoreOf(FAILED_JOB_STATUSES),
    )
    .option('--service <name>', 'bulk: only jobs for this target service', serviceName)
    .option('--since <when>', `bulk: only jobs that failed since ${SINCE_FORMS}`, sinceTime)
    .option('--limit <n>', 'bulk: at most this many jobs', wholeNumber(1), DEFAULT_RETRY_LIMIT)
    .option(
      '--to-service <name>',
      'publish the new attempts to this service instead of the failed jobs’ own',
      serviceName,
    )
    .option('--dry-run', 'print what would be retried; write nothing')
    .hook('preAction', (_self, cmd) => {
      const id = cmd.processedArgs[0] as string | undefined;
      const o = cmd.opts<RetryOptions>();
      if (id !== undefined && (o.status !== undefined || o.service !== undefined || o.since !== undefined))
        throw new UsageError('give either a job id or --status (with --service, --since), not both');
      if (id === undefined && o.status === undefined)
        throw new UsageError('give a job id, or --status to retry failed jobs in bulk');
    });
  outputOptions(noteOption(retry)).action(async (id: string | undefined, o: RetryOptions) =>
    (await import('./jobsActions.js')).retryAction(id, o),
  );
}

/** `jobs export`, on the `jobs` command: an archive of finished jobs, e.g. before retention deletes them. */
function registerJobsExportCommand(jobs: Command): void {
  jobs
    .command('export')
    .description(
      'print finished jobs with their result object and transitions as JSON lines, for an archive before retention deletes them (streams: any size of history)',
    )
    .requiredOption(
      '--finished-before <when>',
      'only jobs finished before this: a span back from now (90d, 12h) or an ISO 8601 time',
      sinceTime,
    )
    .option('--finished-since <when>', `and finished at or after this ${SINCE_FORMS}`, sinceTime)
    .option(
      '--status <statuses>',
      `only these final statuses, comma-separated (${FINAL_JOB_STATUSES.join(', ')})`,
      oneOrMoreOf(FINAL_JOB_STATUSES),
    )
    .action(async (o: ExportOptions) => (await import('./jobsActions.js')).exportAction(o));
}
