/**
 * What the database commands do when they run (registered in `./db.ts`): `migrate`,
 * `migrate --status`, `files add`. Imported by their actions only: it loads the database client.
 */
import type { MigrationState } from '../db/database.js';
import type { FilesAddOptions } from './db.js';
import { print } from './plumbing.js';
import { printRows, type OutputOptions } from './rows.js';

/** `a, b and 3 more`: names in a message, the list kept short. */
function someOf(names: readonly string[], max = 5): string {
  return names.length <= max
    ? names.join(', ')
    : `${names.slice(0, max).join(', ')} and ${names.length - max} more`;
}

/** `migrate`: create the database if missing, apply what is pending. */
export async function migrateAction(): Promise<void> {
  const { commandConfig } = await import('./commandConfig.js');
  const { createDatabaseIfMissing, migrateToLatest, migrationStatus } = await import('../db/database.js');
  const { withDb } = await import('./withDb.js');
  const cfg = commandConfig();
  const created = await createDatabaseIfMissing(cfg.DATABASE_URL);
  const results = await withDb(async ({ db }) => {
    const status = await migrationStatus(db);
    const unknown = status.filter((m) => m.state === 'unknown').map((m) => m.name);
    const pending = status.filter((m) => m.state === 'pending').map((m) => m.name);
    if (unknown.length === 0) return migrateToLatest(db);
    // A newer version migrated the database. Nothing of this version's is missing: nothing to
    // do, and this version may run (rolling back, or instances not upgraded yet). Something is
    // missing too: the histories differ, and no order of applying them is known to be right.
    if (pending.length > 0)
      throw new Error(
        `the database carries migrations this version does not know (${someOf(unknown)}) and lacks some it knows (${someOf(pending)}): migrate with the version that applied them (docs/operations.md, "Upgrades and rollbacks")`,
      );
    process.stderr.write(
      `recognition-core: the database also carries ${unknown.length} migration(s) this version does not know (${someOf(unknown)}): a newer version applied them\n`,
    );
    return [];
  });
  const applied = results.filter((r) => r.status === 'Success').map((r) => r.migrationName);
  process.stdout.write(
    `${created ? 'created the database; ' : ''}${applied.length ? `applied ${applied.join(', ')}` : 'migrations are up to date'}\n`,
  );
}

/**
 * `migrate --status`: every migration and its state, then a count on stderr. Changes nothing and
 * creates no database: a database that does not exist is an error.
 */
export async function migrationStatusAction(o: OutputOptions): Promise<void> {
  const { migrationStatus } = await import('../db/database.js');
  const { withDb } = await import('./withDb.js');
  const status = await withDb(({ db }) => migrationStatus(db));
  printRows(
    status.map((m) => ({ migration: m.name, state: m.state, applied_at: m.appliedAt })),
    [
      ['MIGRATION', (r) => r.migration],
      ['STATE', (r) => r.state],
      ['APPLIED AT', (r) => r.applied_at],
    ],
    o,
  );
  const count = (state: MigrationState['state']) => status.filter((m) => m.state === state).length;
  process.stderr.write(
    `${count('applied')} applied, ${count('pending')} pending, ${count('unknown')} unknown to this version\n`,
  );
}

/** `files add`: register an uploaded file; prints it. */
export async function filesAddAction(o: FilesAddOptions): Promise<void> {
  const { addFile } = await import('../db/jobs.js');
  const { withDb } = await import('./withDb.js');
  const file = await withDb(({ db }) => addFile(db, o));
  print(file);
}
