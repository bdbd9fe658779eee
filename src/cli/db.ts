/**
 * Commands on the database: `migrate`, `files add` (the `jobs` commands are in jobs.ts).
 */
import type { Command } from 'commander';
import { print } from './plumbing.js';

export function registerDbCommands(program: Command): void {
  program
    .command('migrate')
    .description('create the database named in DATABASE_URL if missing, then apply pending migrations')
    .action(async () => {
      const { commandConfig } = await import('./commandConfig.js');
      const { createDatabaseIfMissing, migrateToLatest } = await import('../db/database.js');
      const { withDb } = await import('./withDb.js');
      const cfg = commandConfig();
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
      const { addFile } = await import('../db/jobs.js');
      const { withDb } = await import('./withDb.js');
      const file = await withDb(({ db }) => addFile(db, o));
      print(file);
    });
}
