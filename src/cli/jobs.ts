/**
 * The `jobs` commands: `create`, `show` and `history` of one job, and jobs at scale: `jobs list` (filters, a table in a terminal, JSON lines otherwise) and
 * `jobs retry` (one failed job, or failed jobs in bulk: the next attempt of each, through the
 * machine and the step).
 *
 * Output: one JSON object per line with `--json`, or when stdout is not a terminal (a pipe, a file,
 * a script); an aligned table on a terminal, or with `--table`. Messages and the progress bar go to
 * stderr, so stdout stays parseable.
 */
import cliProgress from 'cli-progress';
import { InvalidArgumentError, Option, type Command } from 'commander';
import {
  FAILED_JOB_STATUSES,
  FINAL_JOB_STATUSES,
  JOB_STATUSES,
  type FailedJobStatus,
  type FinalJobStatus,
  type JobStatus,
} from '../../machines/index.js';
import type { Db } from '../db/database.js';
import {
  assertUuid,
  createJob,
  findRetryCandidates,
  listJobs,
  loadJob,
  loadTransitions,
  type Since,
} from '../db/jobs.js';
import { UsageError } from '../errors.js';
import { applyRetries, previewRetries, type RetryOutcome, type RetryRequest } from '../step/index.js';
import { historyRun } from '../statecharts/history.js';
import { startJobCreateTrace } from '../tracing/jobSpans.js';
import { runTraced, type TraceCarrier } from '../tracing/tracing.js';
import {
  inspectOptions,
  oneOrMoreOf,
  print,
  sendToInspector,
  sinceTime,
  wholeNumber,
  withDb,
  type InspectOptions,
} from './plumbing.js';

/** Jobs `jobs list` prints unless told otherwise. */
const DEFAULT_LIST_LIMIT = 100;
/** Jobs a bulk `jobs retry` retries at most unless told otherwise: a typo in a filter cannot requeue everything. */
const DEFAULT_RETRY_LIMIT = 1_000;
/**
 * Jobs retried per transaction. Each batch holds its jobs' and files' locks until it commits, so a
 * result or a deadline for one of them waits at most one batch; large enough that a bulk retry of
 * thousands costs a few dozen transactions.
 */
export const RETRY_BATCH = 200;

const SERVICE = /^[A-Za-z0-9_-]{1,100}$/;
function serviceName(value: string): string {
  if (!SERVICE.test(value)) throw new InvalidArgumentError("must be 1-100 letters, digits, '-' or '_'");
  return value;
}

/** How rows are printed. */
interface OutputOptions {
  json?: boolean;
  table?: boolean;
}

function wantsTable(o: OutputOptions): boolean {
  if (o.json) return false;
  return o.table === true || process.stdout.isTTY === true;
}

type Cell = string | number | Date | null | undefined;

function cellText(v: Cell): string {
  if (v === null || v === undefined) return '-';
  if (v instanceof Date) return v.toISOString().replace(/\.\d{3}Z$/, 'Z');
  return String(v);
}

/** Rows as aligned columns under a header, or one JSON object per line. */
function printRows<R extends Record<string, unknown>>(
  rows: readonly R[],
  columns: ReadonlyArray<[header: string, value: (r: R) => Cell]>,
  o: OutputOptions,
): void {
  if (!wantsTable(o)) {
    for (const r of rows) process.stdout.write(JSON.stringify(r) + '\n');
    return;
  }
  const cells = [columns.map(([h]) => h), ...rows.map((r) => columns.map(([, f]) => cellText(f(r))))];
  const widths = columns.map((_, i) => Math.max(...cells.map((c) => c[i]!.length)));
  for (const line of cells)
    process.stdout.write(
      line
        .map((c, i) => c.padEnd(widths[i]!))
        .join('  ')
        .trimEnd() + '\n',
    );
}

/** A progress bar on stderr for a batch of `total` jobs, when stderr is a terminal and the batch is large. */
function progressBar(total: number): { increment(n: number): void; stop(): void } {
  if (total <= RETRY_BATCH || !process.stderr.isTTY) return { increment: () => {}, stop: () => {} };
  const bar = new cliProgress.SingleBar(
    { format: ' retrying {bar} {value}/{total} jobs', stream: process.stderr, hideCursor: true, fps: 10 },
    cliProgress.Presets.shades_classic,
  );
  bar.start(total, 0);
  return { increment: (n) => bar.increment(n), stop: () => bar.stop() };
}

/** Why a retry of one job is refused, in one line. */
function refusal(o: RetryOutcome): string {
  switch (o.reason ?? o.decision) {
    case 'unknown_job':
      return `no recognition_job with id ${o.jobId}`;
    case 'not_failed':
      return `job ${o.jobId} is ${o.status}: only a failed job (${FAILED_JOB_STATUSES.join(', ')}) is retried`;
    case 'file_not_current':
      return `job ${o.jobId} is not the current job of file ${o.fileId} (that is job ${o.fileCurrentJobId ?? 'none'}): retry that one if it failed`;
    default:
      return `job ${o.jobId} was not retried (${o.reason ?? o.decision})`;
  }
}

/** A retried job and its next attempt, as printed; a dry run's attempt has no id yet. */
function attemptRow(o: RetryOutcome, dryRun: boolean) {
  const next = o.next!;
  return {
    id: dryRun ? null : next.jobId,
    file_id: next.fileId,
    attempt: next.attempt,
    target_service: next.targetService,
    status: 'pending',
    retry_of: o.jobId,
    retried_status: o.status,
  };
}
type AttemptRow = ReturnType<typeof attemptRow>;

/** The forms a `--…-since` option takes. */
const SINCE_FORMS = '(30m, 1h, 2d, or an ISO 8601 time)';

/** `--json` and `--table`: how a command prints its rows (see {@link wantsTable}). */
function outputOptions(cmd: Command): Command {
  return cmd
    .option('--json', 'one JSON object per line, even in a terminal')
    .option('--table', 'an aligned table, even when stdout is not a terminal');
}

/** The columns every job table starts with. */
function jobColumns<
  R extends { id: Cell; file_id: Cell; attempt: Cell; target_service: Cell; status: Cell },
>(): Array<[string, (r: R) => Cell]> {
  return [
    ['ID', (r) => r.id],
    ['FILE', (r) => r.file_id],
    ['ATTEMPT', (r) => r.attempt],
    ['SERVICE', (r) => r.target_service],
    ['STATUS', (r) => r.status],
  ];
}

const ATTEMPT_COLUMNS: ReadonlyArray<[string, (r: AttemptRow) => Cell]> = [
  ...jobColumns<AttemptRow>(),
  ['RETRY OF', (r) => r.retry_of],
  ['WAS', (r) => r.retried_status],
];

interface RetryOptions extends OutputOptions {
  status?: FailedJobStatus[];
  service?: string;
  since?: Since;
  limit: number;
  toService?: string;
  dryRun?: boolean;
}

/**
 * Retry `requests` (or, dry, decide them and write nothing), batch by batch, each batch in its own
 * transaction. Resolves with every outcome, in order.
 */
async function retryInBatches(
  db: Db,
  requests: readonly RetryRequest[],
  dryRun: boolean,
): Promise<RetryOutcome[]> {
  const bar = progressBar(requests.length);
  const outcomes: RetryOutcome[] = [];
  try {
    for (let start = 0; start < requests.length; start += RETRY_BATCH) {
      const batch = requests.slice(start, start + RETRY_BATCH);
      outcomes.push(
        ...(await db.db
          .transaction()
          .execute((tx) => (dryRun ? previewRetries(tx, batch) : applyRetries(tx, batch)))),
      );
      bar.increment(batch.length);
    }
  } finally {
    bar.stop();
  }
  return outcomes;
}

async function retryCommand(db: Db, id: string | undefined, o: RetryOptions): Promise<void> {
  const bulk = o.status !== undefined;
  if (id !== undefined && (bulk || o.service !== undefined || o.since !== undefined))
    throw new UsageError('give either a job id or --status (with --service, --since), not both');
  if (id === undefined && !bulk)
    throw new UsageError('give a job id, or --status to retry failed jobs in bulk');
  const target = o.toService !== undefined ? { targetService: o.toService } : {};
  let requests: RetryRequest[];
  if (id !== undefined) {
    assertUuid(id, 'job id');
    requests = [{ jobId: id, ...target }];
  } else {
    const candidates = await findRetryCandidates(db.db, {
      statuses: o.status!,
      service: o.service,
      finishedSince: o.since,
      limit: o.limit,
    });
    requests = candidates.map((c) => ({ jobId: c.id, ...target }));
  }
  const outcomes = await retryInBatches(db, requests, o.dryRun === true);
  const retried = outcomes.filter((r) => r.next !== null);
  if (id !== undefined && retried.length === 0) throw new UsageError(refusal(outcomes[0]!));
  printRows(
    retried.map((r) => attemptRow(r, o.dryRun === true)),
    ATTEMPT_COLUMNS,
    o,
  );
  const skipped = outcomes.filter((r) => r.next === null);
  for (const s of skipped.slice(0, 5)) process.stderr.write(`skipped: ${refusal(s)}\n`);
  if (skipped.length > 5) process.stderr.write(`skipped: … and ${skipped.length - 5} more\n`);
  if (bulk) {
    const verb = o.dryRun ? 'would retry' : 'retried';
    process.stderr.write(
      `${verb} ${retried.length} of ${requests.length} selected job(s)${skipped.length ? `; ${skipped.length} skipped` : ''}${requests.length === o.limit ? ` (--limit ${o.limit} reached: run again for more)` : ''}\n`,
    );
  } else if (o.dryRun) {
    process.stderr.write('dry run: nothing written\n');
  }
}

interface ListOptions extends OutputOptions {
  status?: JobStatus[];
  service?: string;
  file?: string;
  createdSince?: Since;
  finishedSince?: Since;
  limit: number;
}

/** Register `jobs create|show|list|retry|history`. */
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
    .action(async (o: { file: string; service: string; traceparent?: string; tracestate?: string }) => {
      let parent: TraceCarrier | undefined;
      if (o.traceparent) {
        const { checkedCarrier } = await import('../tracing/carrier.js');
        try {
          parent = checkedCarrier(o.traceparent, o.tracestate);
        } catch (err) {
          throw new UsageError((err as Error).message);
        }
      } else if (o.tracestate) throw new UsageError('--tracestate needs --traceparent');
      // With tracing on, the job's creation is a span (child of --traceparent) and the row stores
      // its context; with tracing off, the row stores --traceparent as given.
      const traced = startJobCreateTrace({ parent, fileId: o.file, targetService: o.service });
      const job = await runTraced(traced, () =>
        withDb(({ db }) =>
          createJob(db, {
            fileId: o.file,
            targetService: o.service,
            traceContext: traced ? traced.carrier : parent,
          }),
        ),
      );
      traced?.end(job.id);
      print(job);
    });
  jobs
    .command('show <id>')
    .description('print a job, its file and its result object')
    .action(async (id: string) => {
      const view = await withDb(({ db }) => loadJob(db, id));
      if (!view) throw new UsageError(`no recognition_job with id ${id}`);
      print(view);
    });
  inspectOptions(
    jobs
      .command('history <id>')
      .description(
        "print a job's transitions, oldest first; --inspect replays them into the Stately inspector",
      ),
  ).action(async (id: string, o: InspectOptions) => {
    const { rows, status } = await withDb(async ({ db }) => {
      const view = await loadJob(db, id);
      if (!view) throw new UsageError(`no recognition_job with id ${id}`);
      return { rows: await loadTransitions(db, id), status: view.job.status };
    });
    print(rows);
    if (o.inspect)
      await sendToInspector(historyRun(id, rows, status), o, (line) => process.stderr.write(line + '\n'));
  });
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
  outputOptions(list).action(async (o: ListOptions) => {
    const rows = await withDb(({ db }) =>
      listJobs(db, {
        statuses: o.status,
        service: o.service,
        fileId: o.file,
        createdSince: o.createdSince,
        finishedSince: o.finishedSince,
        limit: o.limit,
      }),
    );
    printRows(
      rows,
      [
        ...jobColumns<(typeof rows)[number]>(),
        ['ERROR', (r) => r.error_code],
        ['CREATED', (r) => r.created_at],
        ['FINISHED', (r) => r.finished_at],
      ],
      o,
    );
  });

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
    .option('--dry-run', 'print what would be retried; write nothing');
  outputOptions(retry).action(async (id: string | undefined, o: RetryOptions) => {
    await withDb((db) => retryCommand(db, id, o));
  });
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
    .action(async (o: { finishedBefore: Since; finishedSince?: Since; status?: FinalJobStatus[] }) => {
      const { jobsExport } = await import('./retentionActions.js');
      await jobsExport(o);
    });
}
