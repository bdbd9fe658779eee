/**
 * The `recognition-core` command as an operator meets it (the built CLI, a clean environment, a
 * real database): misspelt variables are named, a closed output pipe ends a command quietly,
 * `quarantine replay` says what stayed quarantined, `--version`, `migrate --status`, and a
 * database migrated by a newer version.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropDatabase, openDb } from '../../src/db/database.js';
import { migrations } from '../../src/db/migrations/index.js';
import { CLI_BIN, cliEnv, runCli, spawnCli } from '../helpers/cliProcess.js';
import { insertJob } from '../helpers/fixtures.js';
import { dbUrl } from '../helpers/pgUrls.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true });

/** A port nothing listens on: commands that need NATS fail after their start-up lines. */
const NO_NATS = 'nats://127.0.0.1:1';

describe('misspelt variables', () => {
  it('a one-shot command names them in one line on stderr and runs on', async () => {
    const r = await runCli(['jobs', 'list', '--json'], { DATABASE_URL: t.url, DATABSE_URL: t.url });
    expect(r.code, r.output).toBe(0);
    expect(r.stderr).toEqual(['recognition-core: DATABSE_URL: did you mean DATABASE_URL?']);
  });

  it('migrate names them before it touches the database', async () => {
    const r = await runCli(['migrate'], { DATABASE_URL: t.url, NATS_PASWORD: 'x', LOG_LEVL: 'debug' });
    expect(r.code, r.output).toBe(0);
    expect(r.stderr).toEqual([
      'recognition-core: LOG_LEVL: did you mean LOG_LEVEL?; NATS_PASWORD: did you mean NATS_PASSWORD?',
    ]);
    expect(r.stdout).toEqual(['migrations are up to date']);
  });

  it('start names them in a warn log line, its first line', async () => {
    const cli = spawnCli(['start'], {
      DATABASE_URL: t.url,
      NATS_URL: NO_NATS,
      HTTP_PORT: '0',
      WATCHDOG_INTERVAL: '1000',
    });
    try {
      const line = await cli.waitForLog((l) => l['event'] === 'env_typos');
      expect(line).toMatchObject({
        level: 'warn',
        variables: ['WATCHDOG_INTERVAL'],
        msg: 'WATCHDOG_INTERVAL: did you mean WATCHDOG_INTERVAL_MS?',
      });
      expect(cli.logs()[0]).toEqual(line);
      expect(cli.lines.filter((l) => l.stream === 'stderr' && l.text.includes('did you mean'))).toEqual([]);
    } finally {
      cli.child.kill('SIGKILL');
      await cli.exited;
    }
  });

  it('start names them on stderr when the configuration is refused', async () => {
    const r = await runCli(['start'], { NATS_USR: 'core', NATS_PASSWORD: 'pw' });
    expect(r.code).toBe(2);
    expect(r.stderr).toEqual([
      'recognition-core: NATS_USR: did you mean NATS_USER?',
      'recognition-core: NATS_PASSWORD is set but NATS_USER is not',
    ]);
  });

  it('commands that read no configuration say nothing of them', async () => {
    const r = await runCli(['jobs', 'list', '--help'], { DATABSE_URL: 'x' });
    expect(r.code).toBe(0);
    expect(r.stderr).toEqual([]);
  });
});

describe('a closed output pipe', () => {
  /** Jobs enough that `jobs list` prints far more than a pipe holds. */
  const JOBS = 1000;
  beforeAll(async () => {
    await sql`
      WITH o AS (
        INSERT INTO s3_object (bucket, key, bucket_role, created_by)
        SELECT 'arm-ka', 'uploads/pipe-' || g || '.xlsx', 'uploads', 'test' FROM generate_series(1, ${JOBS}) g
        RETURNING id
      ), f AS (
        INSERT INTO stored_file (s3_object_id, original_name, status)
        SELECT id, 'report.xlsx', 'QUEUED' FROM o RETURNING id
      )
      INSERT INTO recognition_job (id, file_id, attempt, target_service, status, next_publish_at)
      SELECT gen_random_uuid(), id, 1, 'tabular-parser', 'pending', now() FROM f
    `.execute(t.db);
  });

  /** `recognition-core ARGS | head -1` in bash with pipefail: the CLI's exit code is the pipeline's. */
  async function throughHead(args: string[]) {
    const line = `set -o pipefail; "$NODE" "$CLI" ${args.join(' ')} | head -1`;
    try {
      const { stdout, stderr } = await promisify(execFile)('bash', ['-c', line], {
        env: cliEnv({ DATABASE_URL: t.url, NODE: process.execPath, CLI: CLI_BIN }),
      });
      return { code: 0, stdout, stderr };
    } catch (err) {
      const e = err as { code: number; stdout: string; stderr: string };
      return { code: e.code, stdout: e.stdout, stderr: e.stderr };
    }
  }

  it.each([
    ['JSON lines', ['jobs', 'list', '--limit', String(JOBS)]],
    ['a table', ['jobs', 'list', '--table', '--limit', String(JOBS)]],
    ['help', ['jobs', 'list', '--help']],
  ])('ends a command that prints %s quietly, exit code 0', async (_what, args) => {
    const r = await throughHead(args);
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(r.stdout.split('\n').filter(Boolean)).toHaveLength(1);
  });
});

describe('quarantine replay', () => {
  let seq = 990_000;
  /** A quarantined ack envelope for `jobId` (UNKNOWN_JOB), or a payload that is not JSON. */
  async function quarantined(jobId: string, reason: 'UNKNOWN_JOB' | 'INVALID_JSON' = 'UNKNOWN_JOB') {
    const payload =
      reason === 'INVALID_JSON'
        ? '{"job_id": '
        : JSON.stringify({
            job_id: jobId,
            status: 'processing',
            service: { name: 'tabular-parser', version: '1' },
          });
    const row = await t.db
      .insertInto('inbox_quarantine')
      .values({
        stream: 'RECOGNITION_RESULTS',
        stream_seq: seq++,
        subject: 'recognition.result',
        msg_id: `ack:${jobId}:1`,
        job_id: jobId,
        reason,
        details: JSON.stringify({ message: reason }),
        payload: Buffer.from(payload),
        headers: JSON.stringify({ 'Nats-Msg-Id': [`ack:${jobId}:1`] }),
      })
      .returning('id')
      .executeTakeFirstOrThrow();
    return row.id;
  }

  it('exits 1 and sums up, by reason, when a message stays quarantined', async () => {
    const known = randomUUID();
    await insertJob(t.db, { status: 'published', jobId: known });
    const applied = await quarantined(known);
    const stuck = await quarantined(randomUUID());
    const r = await runCli(['quarantine', 'replay', '--reason', 'UNKNOWN_JOB'], { DATABASE_URL: t.url });
    expect(r.code, r.output).toBe(1);
    expect(r.stdout.map((l) => JSON.parse(l) as { id: string; outcome: string })).toMatchObject([
      { id: applied, outcome: 'applied: published -> processing' },
      { id: stuck, outcome: 'still quarantined: UNKNOWN_JOB' },
    ]);
    expect(r.stderr).toEqual([
      'recognition-core: replayed 2: 1 applied, 1 still quarantined (UNKNOWN_JOB: 1)',
    ]);

    // Replayed rows are not picked again by --reason: nothing left, exit 0.
    const again = await runCli(['quarantine', 'replay', '--reason', 'UNKNOWN_JOB'], { DATABASE_URL: t.url });
    expect(again).toMatchObject({ code: 0, stdout: [], stderr: ['nothing to replay'] });
  });

  it('exits 1 for one message that stays quarantined, 0 when everything applied', async () => {
    const bad = await quarantined(randomUUID(), 'INVALID_JSON');
    const r = await runCli(['quarantine', 'replay', bad], { DATABASE_URL: t.url });
    expect(r.code, r.output).toBe(1);
    expect(r.stderr).toEqual(['recognition-core: replayed 1: 1 still quarantined (INVALID_JSON: 1)']);

    const jobId = randomUUID();
    await insertJob(t.db, { status: 'published', jobId });
    const good = await quarantined(jobId);
    const ok = await runCli(['quarantine', 'replay', good], { DATABASE_URL: t.url });
    expect(ok).toMatchObject({ code: 0, stderr: ['replayed 1: 1 applied'] });
  });
});

describe('--version', () => {
  it("prints package.json's version and nothing else", async () => {
    const { version } = JSON.parse(readFileSync('package.json', 'utf8')) as { version: string };
    for (const flag of ['--version', '-V']) {
      const r = await runCli([flag], {});
      expect(r).toMatchObject({ code: 0, stdout: [version], stderr: [] });
    }
  });
});

describe('migrations of another version', () => {
  const known = Object.keys(migrations).sort();
  const url = dbUrl(`${t.dbName}_versions`);
  const FUTURE = '9999_from_a_newer_version';
  afterAll(() => dropDatabase(url));

  /** `migrate --status --json` as rows. */
  async function status() {
    const r = await runCli(['migrate', '--status', '--json'], { DATABASE_URL: url });
    const rows = r.stdout.map(
      (l) => JSON.parse(l) as { migration: string; state: string; applied_at: string | null },
    );
    return { ...r, rows };
  }

  it('migrate --status creates no database: one that does not exist is an error', async () => {
    const r = await status();
    expect(r.code).toBe(1);
    expect(r.stderr).toEqual([expect.stringMatching(/database ".*_versions" does not exist/)]);
    const admin = openDb(dbUrl('postgres'), { max: 1 });
    try {
      const found = await admin.db
        .selectFrom('pg_database' as never)
        .select('datname' as never)
        .where('datname' as never, '=', `${t.dbName}_versions` as never)
        .execute();
      expect(found).toEqual([]);
    } finally {
      await admin.close();
    }
  });

  it('migrate --status lists applied and pending migrations', async () => {
    await runCli(['migrate'], { DATABASE_URL: url });
    const db = openDb(url, { max: 1 });
    try {
      await db.db
        .deleteFrom('kysely_migration' as never)
        .where('name' as never, '=', known.at(-1)! as never)
        .execute();
    } finally {
      await db.close();
    }
    const r = await status();
    expect(r.code, r.output).toBe(0);
    expect(r.rows.map((m) => [m.migration, m.state])).toEqual(
      known.map((name, i) => [name, i < known.length - 1 ? 'applied' : 'pending']),
    );
    expect(r.rows.at(-1)!.applied_at).toBeNull();
    expect(r.stderr).toEqual([`${known.length - 1} applied, 1 pending, 0 unknown to this version`]);
  });

  it('migrate refuses migrations of a newer version while some of its own are missing', async () => {
    const db = openDb(url, { max: 1 });
    try {
      await db.db
        .insertInto('kysely_migration' as never)
        .values({ name: FUTURE, timestamp: new Date().toISOString() } as never)
        .execute();
    } finally {
      await db.close();
    }
    const r = await runCli(['migrate'], { DATABASE_URL: url });
    expect(r.code).toBe(1);
    expect(r.stderr).toEqual([
      expect.stringContaining(`does not know (${FUTURE}) and lacks some it knows (${known.at(-1)!})`),
    ]);
  });

  it('with its own all applied: migrate changes nothing, --status names the unknown one', async () => {
    const db = openDb(url, { max: 1 });
    try {
      await db.db
        .insertInto('kysely_migration' as never)
        .values({ name: known.at(-1)!, timestamp: new Date().toISOString() } as never)
        .execute();
    } finally {
      await db.close();
    }
    const r = await runCli(['migrate'], { DATABASE_URL: url });
    expect(r, r.output).toMatchObject({ code: 0, stdout: ['migrations are up to date'] });
    expect(r.stderr).toEqual([
      expect.stringContaining(`1 migration(s) this version does not know (${FUTURE})`),
    ]);

    const s = await status();
    expect(s.rows.map((m) => [m.migration, m.state])).toEqual([
      ...known.map((name) => [name, 'applied']),
      [FUTURE, 'unknown'],
    ]);
    expect(s.stderr).toEqual([`${known.length} applied, 0 pending, 1 unknown to this version`]);
  });

  it('start runs on, logs the unknown migrations once and exports their count', async () => {
    const nats = await t.startNats();
    const cli = spawnCli(['start'], {
      DATABASE_URL: url,
      NATS_URL: nats.url,
      HTTP_HOST: '127.0.0.1',
      HTTP_PORT: '0',
    });
    try {
      const warned = await cli.waitForLog((l) => l['event'] === 'db_unknown_migrations');
      expect(warned).toMatchObject({ level: 'warn', migrations: [FUTURE] });
      const started = await cli.waitForLog((l) => l['event'] === 'started');
      const text = await (await fetch(`http://127.0.0.1:${String(started['http_port'])}/metrics`)).text();
      expect(text).toMatch(/^recognition_db_unknown_migrations 1$/m);
      const { version } = JSON.parse(readFileSync('package.json', 'utf8')) as { version: string };
      expect(text).toContain(`recognition_build_info{version="${version}",node="${process.version}"} 1`);
      expect(cli.logs().filter((l) => l['event'] === 'db_unknown_migrations')).toHaveLength(1);
    } finally {
      cli.child.kill('SIGTERM');
      await cli.exited;
    }
  });

  it('start still refuses a database whose own migrations are behind', async () => {
    const db = openDb(url, { max: 1 });
    try {
      await db.db
        .deleteFrom('kysely_migration' as never)
        .where('name' as never, '=', known[0]! as never)
        .execute();
    } finally {
      await db.close();
    }
    const r = await runCli(['start'], { DATABASE_URL: url, NATS_URL: NO_NATS, HTTP_PORT: '0' });
    expect(r.code).toBe(2);
    expect(r.stderr).toEqual([expect.stringMatching(/pending migration.*recognition-core migrate/)]);
  });
});
