/**
 * Commands on the database: `migrate`, `files add` (the `jobs` commands are in jobs.ts).
 * This module registers them; what they do is in `./dbActions.ts`, imported when one runs.
 */
import type { Command } from 'commander';
import { outputOptions, type OutputOptions } from './rows.js';

/** Options of `files add`. */
export interface FilesAddOptions {
  bucket: string;
  key: string;
  name: string;
}

/** Register `migrate` and `files add`. */
export function registerDbCommands(program: Command): void {
  const migrate = program
    .command('migrate')
    .description(
      'create the database named in DATABASE_URL if missing, then apply pending migrations; --status lists them and changes nothing',
    )
    .option(
      '--status',
      'list the migrations, applied, pending and unknown to this version (applied by a newer one), and change nothing',
    );
  outputOptions(migrate).action(async (o: OutputOptions & { status?: boolean }) => {
    const actions = await import('./dbActions.js');
    if (o.status) await actions.migrationStatusAction(o);
    else await actions.migrateAction();
  });

  const files = program.command('files').description('uploaded files');
  files
    .command('add')
    .description('register an uploaded file (its s3_object and stored_file rows); prints its id')
    .requiredOption('--bucket <bucket>', 'S3 bucket of the upload')
    .requiredOption('--key <key>', 'S3 key of the upload')
    .requiredOption('--name <name>', 'original file name')
    .action(async (o: FilesAddOptions) => (await import('./dbActions.js')).filesAddAction(o));
}
