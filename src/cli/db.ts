/**
 * Commands on the database: `migrate`, `files add`, `jobs create|show|history`.
 */
import { Option, type Command } from 'commander';
import { loadConfig } from '../config.js';
import { createDatabaseIfMissing, migrateToLatest } from '../db/database.js';
import { addFile, createJob, loadJob, loadTransitions } from '../db/jobs.js';
import { UsageError } from '../errors.js';
import { historyRun } from '../statecharts/history.js';
import { startJobCreateTrace } from '../tracing/jobSpans.js';
import { runTraced, type TraceCarrier } from '../tracing/tracing.js';
import { inspectOptions, sendToInspector, withDb, type InspectOptions } from './plumbing.js';

function print(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + '\n');
}

export function registerDbCommands(program: Command): void {
  program
    .command('migrate')
    .description('create the database named in DATABASE_URL if missing, then apply pending migrations')
    .action(async () => {
      const cfg = loadConfig();
      const created = await createDatabaseIfMissing(cfg.DATABASE_URL);
      const results = await withDb(({ db }) => migrateToLatest(db));
      const applied = results.filter((r) => r.status === 'Success').map((r) => r.migrationName);
      process.stdout.write(
        `${created ? 'created the database; ' : ''}${applied.length ? `applied ${applied.join(', ')}` : 'migrations are up to date'}\n`,
      );
    });

  const files = program.command('files').description('uploaded files');
  files
    .command('add')
    .description('register an uploaded file (its s3_object and stored_file rows); prints its id')
    .requiredOption('--bucket <bucket>', 'S3 bucket of the upload')
    .requiredOption('--key <key>', 'S3 key of the upload')
    .requiredOption('--name <name>', 'original file name')
    .action(async (o: { bucket: string; key: string; name: string }) => {
      const file = await withDb(({ db }) => addFile(db, o));
      print(file);
    });

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
}
