/**
 * Commands on the database: `migrate`, `files add`, `jobs create|show|history` (and `jobs
 * list|retry`, in jobs.ts).
 */
import type { Command } from 'commander';
import { loadConfig } from '../config.js';
import { createDatabaseIfMissing, migrateToLatest, openDb, type Db } from '../db/database.js';
import { addFile, createJob, loadJob, loadTransitions } from '../db/jobs.js';
import { UsageError } from '../errors.js';
import { historyRun } from '../statecharts/history.js';
import { registerJobsAtScaleCommands } from './jobs.js';
import { inspectOptions, sendToInspector, type InspectOptions } from './statecharts.js';

/** Open the configured database for one command and close it after. */
export async function withDb<T>(fn: (db: Db) => Promise<T>): Promise<T> {
  const cfg = loadConfig();
  const db = openDb(cfg.DATABASE_URL, { max: 2 });
  try {
    return await fn(db);
  } finally {
    await db.close();
  }
}

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
    .action(async (o: { file: string; service: string }) => {
      const job = await withDb(({ db }) => createJob(db, { fileId: o.file, targetService: o.service }));
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
  registerJobsAtScaleCommands(jobs, withDb);
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
