/**
 * A database migrated and used by one superuser, moved to the two roles with
 * `deploy/postgres/adopt-database.sql` and `narrow-runtime.sql` (psql, as docs/deployment.md says):
 * the migration role then owns every table and function, `migrate` runs as it, a table or function
 * a later migration creates reaches the runtime role through the default privileges, and the
 * runtime role reads and writes the existing rows but deletes only through the retention functions.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { sql } from 'kysely';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { findPgBinDir } from '../../workshop/localServers/pgCluster.js';
import { runCli } from '../helpers/cliProcess.js';
import { insertJob, type JobFixture } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';

const run = promisify(execFile);
const deployFile = (name: string) => fileURLToPath(new URL(`../../deploy/postgres/${name}`, import.meta.url));
const DB = 'legacy';

const t = useHarness({ pgCluster: true, database: { name: DB, max: 2 } });
let job: JobFixture;

async function psql(file: string, vars: Record<string, string>, role?: string) {
  const args = [
    '-X',
    '-q',
    '-v',
    'ON_ERROR_STOP=1',
    '-h',
    t.pgCluster.dir,
    '-p',
    String(t.pgCluster.port),
    '-U',
    'postgres',
  ];
  for (const [k, v] of Object.entries(vars)) args.push('-v', `${k}=${v}`);
  args.push('-d', DB);
  if (role) args.push('-c', `SET ROLE ${role}`);
  args.push('-f', deployFile(file));
  await run(join(findPgBinDir(), 'psql'), args);
}

/** A client logged in as `role` (the cluster trusts local TCP connections). */
async function as<T>(role: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: `postgres://${role}@127.0.0.1:${t.pgCluster.port}/${DB}` });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

beforeAll(async () => {
  job = await insertJob(t.db, { status: 'published' });
  await psql('adopt-database.sql', { migrator_password: 'm-pw', runtime_password: 'r-pw' });
  await psql('narrow-runtime.sql', {}, 'recognition_migrator');
});

describe('adopt-database.sql', () => {
  it('gives the migration role the database, every table and every function', async () => {
    const { rows } = await sql<{ kind: string; owner: string }>`
      SELECT 'database' AS kind, pg_get_userbyid(datdba) AS owner FROM pg_database WHERE datname = ${DB}
      UNION SELECT 'table', tableowner FROM pg_tables WHERE schemaname = 'public'
      UNION SELECT 'function', pg_get_userbyid(proowner) FROM pg_proc WHERE pronamespace = 'public'::regnamespace
    `.execute(t.db);
    expect(rows.sort((a, b) => a.kind.localeCompare(b.kind))).toEqual([
      { kind: 'database', owner: 'recognition_migrator' },
      { kind: 'function', owner: 'recognition_migrator' },
      { kind: 'table', owner: 'recognition_migrator' },
    ]);
    const r = await runCli(['migrate'], {
      DATABASE_URL: `postgres://recognition_migrator@127.0.0.1:${t.pgCluster.port}/${DB}`,
    });
    expect(r.code, r.output).toBe(0);
    expect(r.stdout).toEqual(['migrations are up to date']);
  });

  it('lets the runtime role read and change the existing rows, and delete only through the retention functions', async () => {
    await as('recognition_runtime', async (c) => {
      expect((await c.query('SELECT status FROM recognition_job WHERE id = $1', [job.jobId])).rows).toEqual([
        { status: 'published' },
      ]);
      await c.query('UPDATE recognition_job SET updated_at = now() WHERE id = $1', [job.jobId]);
      await c.query(
        `INSERT INTO inbox_quarantine (subject, reason, payload) VALUES ('recognition.result', 'INVALID_JSON', '\\x00')`,
      );
      await expect(c.query('DELETE FROM recognition_job')).rejects.toThrow(/permission denied/);
      // Deleting goes through the retention functions, which it may call, and which delete no
      // job that is not final.
      expect(
        (
          await c.query(
            "SELECT recognition_retention_delete_quarantined(now() + interval '1 day', NULL, 10) AS n",
          )
        ).rows,
      ).toEqual([{ n: 1 }]);
      expect(
        (
          await c.query(
            "SELECT jobs FROM recognition_retention_delete_jobs('published', now() + interval '1 day', NULL, NULL, 10)",
          )
        ).rows,
      ).toEqual([{ jobs: 0 }]);
      await expect(c.query("INSERT INTO kysely_migration VALUES ('x', 'y')")).rejects.toThrow(
        /permission denied/,
      );
    });
  });

  it('gives the runtime role the rows of a table, and the functions, a later migration creates', async () => {
    await as('recognition_migrator', async (c) => {
      await c.query(
        'CREATE TABLE later_feature (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, note text)',
      );
      await c.query('ALTER TABLE recognition_job ADD COLUMN later_column int');
      await c.query(
        'CREATE FUNCTION later_function() RETURNS int LANGUAGE sql SECURITY DEFINER AS $$ SELECT 1 $$',
      );
      await c.query('REVOKE ALL ON FUNCTION later_function() FROM PUBLIC');
    });
    await as('recognition_runtime', async (c) => {
      await c.query("INSERT INTO later_feature (note) VALUES ('a')");
      await c.query("UPDATE later_feature SET note = 'b'");
      expect((await c.query('SELECT note FROM later_feature')).rows).toEqual([{ note: 'b' }]);
      expect((await c.query('SELECT later_function() AS n')).rows).toEqual([{ n: 1 }]);
      await expect(c.query('DELETE FROM later_feature')).rejects.toThrow(/permission denied/);
      await expect(c.query('CREATE TABLE intruder (id int)')).rejects.toThrow(/permission denied/);
    });
  });
});
