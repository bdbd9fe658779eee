/**
 * The deployment of docs/deployment.md, end to end on this machine: a PostgreSQL that takes TLS
 * connections only (a password and a client certificate), set up with `deploy/postgres/roles.sql`
 * and `narrow-runtime.sql` through psql; a nats-server that requires a user and password; the
 * secrets in files. `migrate` runs as the migration role; the daemon runs as the runtime role with
 * `DATABASE_URL_FILE` and `NATS_PASSWORD_FILE`, over TLS with verify-full, and every loop does its
 * work: the publisher (woken by NOTIFY), the inbox, the quarantine, the watchdog, the dead letters,
 * readiness, retention (an expired job that `jobs retry` superseded goes with its transitions);
 * so do the CLI's commands an operator runs, `quarantine purge` and `retention run` included.
 * Every line the daemon prints is JSON, and no secret appears in any of them. The runtime role can
 * do no more than that: it deletes only through the retention functions and the rollup's, which
 * only it may call; it runs the console's rollup and reads.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDb, type Db } from '../../src/db/database.js';
import { readOverview, readServices } from '../../src/db/overview.js';
import { rollUpTransitions } from '../../src/db/rollup.js';
import { pgConnection } from '../../src/db/pgTls.js';
import { findPgBinDir, type PgClusterHandle } from '../../workshop/localServers/pgCluster.js';
import { JOBS_STREAM } from '../../src/nats/subjects.js';
import { runCli, spawnCli, type CliProcess } from '../helpers/cliProcess.js';
import { insertJob } from '../helpers/fixtures.js';
import { makeTestPki, type TestPki } from '../helpers/testPki.js';
import { waitFor } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';

const run = promisify(execFile);
const deployFile = (name: string) => fileURLToPath(new URL(`../../deploy/postgres/${name}`, import.meta.url));

const MIGRATOR = 'recognition_migrator';
const RUNTIME = 'recognition_runtime';
const DATABASE = 'recognition';
/** With characters URLs encode, so every spelling is checked. */
const MIGRATOR_PASSWORD = 'migr/S3cr3t:Qx8';
const RUNTIME_PASSWORD = 'run+S3cr3t@Vb4';
const NATS_PASSWORD = 'natsFileS3cr3t-Jw2';
const SECRETS = [MIGRATOR_PASSWORD, RUNTIME_PASSWORD, NATS_PASSWORD].flatMap((s) => [
  s,
  encodeURIComponent(s),
]);

const t = useHarness({
  nats: { user: 'core', password: NATS_PASSWORD },
  client: { user: 'core', pass: NATS_PASSWORD },
});
let pki: TestPki;
let cluster: PgClusterHandle;
let secretsDir: string;
/** A superuser's handle on the database, over the Unix socket, for fixtures and checks. */
let admin: Db;
let daemon: CliProcess | undefined;
const allOutput: string[] = [];

/** A file holding `content` and a newline, readable by its owner only (as a secret is). */
async function secretFile(name: string, content: string): Promise<string> {
  const path = join(secretsDir, name);
  await writeFile(path, `${content}\n`, { mode: 0o600 });
  await chmod(path, 0o600);
  return path;
}

/** The URL of `role` over TLS to the cluster, as it would be in a credential file. */
function roleUrl(role: string, password: string): string {
  const u = new URL(`postgres://${role}@localhost:${cluster.port}/${DATABASE}`);
  u.password = encodeURIComponent(password);
  u.searchParams.set('sslmode', 'verify-full');
  u.searchParams.set('sslrootcert', pki.ca);
  return u.toString();
}

/** Run a psql script of deploy/postgres/ as a superuser, over the socket, with `-v` variables. */
async function psql(file: string, vars: Record<string, string>, opts: { db?: string; role?: string } = {}) {
  const args = [
    '-X',
    '-q',
    '-v',
    'ON_ERROR_STOP=1',
    '-h',
    cluster.dir,
    '-p',
    String(cluster.port),
    '-U',
    'postgres',
  ];
  for (const [k, v] of Object.entries(vars)) args.push('-v', `${k}=${v}`);
  args.push('-d', opts.db ?? 'postgres');
  // As the migration role: the script runs as it would when that role logs in.
  if (opts.role) args.push('-c', `SET ROLE ${opts.role}`);
  args.push('-f', deployFile(file));
  return run(join(findPgBinDir(), 'psql'), args, { env: { ...process.env, PGCONNECT_TIMEOUT: '10' } });
}

let env: { migrator: Record<string, string>; runtime: Record<string, string> };

beforeAll(async () => {
  pki = await makeTestPki({ serverNames: ['DNS:localhost', 'IP:127.0.0.1'], clientName: 'recognition-core' });
  cluster = await t.startPgCluster({
    ssl: { cert: pki.server.cert, key: pki.server.key, ca: pki.ca },
    hba: ['hostssl all all 127.0.0.1/32 scram-sha-256 clientcert=verify-ca'],
  });
  secretsDir = await mkdtemp(join(tmpdir(), 'roles-secrets-'));
  await psql('roles.sql', { migrator_password: MIGRATOR_PASSWORD, runtime_password: RUNTIME_PASSWORD });

  // The client certificate and key come in variables (as systemd's %d/… paths would), the rest
  // of the TLS settings in the URL of the credential file.
  const tls = { DATABASE_SSLCERT: pki.client.cert, DATABASE_SSLKEY: pki.client.key };
  env = {
    migrator: {
      DATABASE_URL_FILE: await secretFile('database-url-migrator', roleUrl(MIGRATOR, MIGRATOR_PASSWORD)),
      ...tls,
    },
    runtime: {
      DATABASE_URL_FILE: await secretFile('database-url-runtime', roleUrl(RUNTIME, RUNTIME_PASSWORD)),
      ...tls,
      NATS_URL: t.nats.url,
      NATS_USER: 'core',
      NATS_PASSWORD_FILE: await secretFile('nats-password', NATS_PASSWORD),
    },
  };
});

afterAll(async () => {
  if (daemon && daemon.child.exitCode === null) daemon.child.kill('SIGKILL');
  await admin?.close();
  await pki?.remove();
  if (secretsDir) await rm(secretsDir, { recursive: true, force: true });
});

/** Run the CLI as the runtime role; its output joins what is checked for secrets. */
async function cli(args: string[], roleEnv = env.runtime) {
  const r = await runCli(args, roleEnv);
  allOutput.push(...r.stdout, ...r.stderr);
  return r;
}

const jobStatus = async (id: string) =>
  (await admin.db.selectFrom('recognition_job').select('status').where('id', '=', id).executeTakeFirst())
    ?.status;

describe('the migration role', () => {
  it('applies the migrations over TLS with its URL from a file', async () => {
    const r = await cli(['migrate'], env.migrator);
    expect(r.code, r.output).toBe(0);
    expect(r.stdout.join('\n')).toMatch(/^applied 0001_initial, /);
    admin = openDb(
      `postgres://postgres@localhost:${cluster.port}/${DATABASE}?host=${encodeURIComponent(cluster.dir)}`,
    );
    const owners = await sql<{ owner: string }>`
      SELECT DISTINCT tableowner AS owner FROM pg_tables WHERE schemaname = 'public'`.execute(admin.db);
    expect(owners.rows).toEqual([{ owner: MIGRATOR }]);
    // The retention functions run as the migration role; the runtime role may call them from the
    // first `migrate` on (the default privileges of roles.sql: the daemon may start before
    // narrow-runtime.sql runs), PUBLIC (any other role that can connect) may not.
    const functions = async () =>
      (
        await sql<{ name: string; owner: string; definer: boolean; runtime: boolean; public: boolean }>`
          SELECT p.proname AS name, pg_get_userbyid(p.proowner) AS owner, p.prosecdef AS definer,
                 has_function_privilege(${RUNTIME}, p.oid, 'EXECUTE') AS runtime,
                 has_function_privilege('public', p.oid, 'EXECUTE') AS public
          FROM pg_proc p WHERE p.proname LIKE 'recognition_retention_%' ORDER BY p.proname`.execute(admin.db)
      ).rows;
    const expected = ['recognition_retention_delete_jobs', 'recognition_retention_delete_quarantined'].map(
      (name) => ({ name, owner: MIGRATOR, definer: true, runtime: true, public: false }),
    );
    expect(await functions()).toEqual(expected);
    await psql('narrow-runtime.sql', {}, { db: DATABASE, role: MIGRATOR });
    expect(await functions()).toEqual(expected);
  });
});

describe('the runtime role', () => {
  it('runs every loop of the daemon, started with its secrets from files, over TLS (verify-full)', async () => {
    // Before the start, so that the daemon's first retention pass finds it: a failed job that
    // finished long before RETENTION_FAILED (90 days), with its transitions, which an operator
    // retries as the runtime role; its file then has a newer attempt, and the job is expired.
    const expired = await insertJob(admin.db, {
      status: 'error',
      error_code: 'SERVICE_ERROR',
      finished_at: sql<Date>`now() - interval '100 days'` as never,
    });
    await admin.db
      .insertInto('recognition_job_transition')
      .values(
        (['published', 'error'] as const).map((to, i) => ({
          job_id: expired.jobId,
          from_status: (['pending', 'published'] as const)[i]!,
          to_status: to,
          event: 'TEST',
          detail: '{}',
        })),
      )
      .execute();
    // The archive before retention deletes it, and the retry that supersedes it.
    const exported = await cli(['jobs', 'export', '--finished-before', '30d']);
    expect(exported.code, exported.output).toBe(0);
    expect(exported.stdout.map((l) => (JSON.parse(l) as { id: string }).id)).toEqual([expired.jobId]);
    const superseded = await cli(['jobs', 'retry', expired.jobId, '--note', 'the service is fixed']);
    expect(superseded.code, superseded.output).toBe(0);
    // The runtime role records the retry in the audit log and reads it back.
    const audit = await cli(['audit', 'list', '--json']);
    expect(audit.code, audit.output).toBe(0);
    expect(audit.stdout.map((l) => JSON.parse(l) as unknown)).toMatchObject([
      {
        action: 'jobs retry',
        via: 'cli',
        affected: 1,
        selection: { job_id: expired.jobId },
        note: 'the service is fixed',
      },
    ]);
    const dry = await cli(['retention', 'run', '--dry-run']);
    expect(dry.code, dry.output).toBe(0);
    // Its two transitions, and the RETRY_REQUESTED the retry recorded on it.
    expect(JSON.parse(dry.stdout.join('\n'))).toMatchObject({ failed: { jobs: 1, transitions: 3 } });

    daemon = spawnCli(['start'], {
      ...env.runtime,
      HTTP_HOST: '127.0.0.1',
      HTTP_PORT: '0',
      LOG_LEVEL: 'debug',
      WATCHDOG_INTERVAL_MS: '200',
      // Publication must come from NOTIFY: the safety-net poll would come too late for the waits.
      PUBLISHER_POLL_INTERVAL_MS: '600000',
      // Retention as configured by default, but a pass every second.
      RETENTION_INTERVAL_MS: '1000',
    });
    const started = await daemon.waitForLog((l) => l.event === 'started');
    const port = Number(started.http_port);

    // Readiness: the database, NATS and the consumer.
    await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200, '/readyz 200');

    // Retention: a pass deletes the expired job and its transitions (nothing else has expired),
    // and its success shows on /metrics.
    const retained = await daemon.waitForLog((l) => l.event === 'retention_pass' && l.failed_jobs === 1);
    expect(retained).toMatchObject({ outcome: 'done', succeeded_jobs: 0, transitions: 3 });
    expect(await jobStatus(expired.jobId)).toBeUndefined();
    expect(
      await admin.db
        .selectFrom('recognition_job_transition')
        .select('id')
        .where('job_id', '=', expired.jobId)
        .execute(),
    ).toEqual([]);
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    expect(metrics).toMatch(/^recognition_retention_last_success_timestamp_seconds [1-9]/m);
    expect(metrics).toMatch(/^recognition_retention_passes_total\{outcome="failed"\} 0$/m);
    expect(metrics).toMatch(/^recognition_retention_deleted_total\{table="recognition_job"\} 1$/m);

    // A file and a job through the CLI, as the runtime role; NOTIFY wakes the publisher.
    const file = await cli([
      'files',
      'add',
      '--bucket',
      'arm-ka',
      '--key',
      `uploads/${randomUUID()}.xlsx`,
      '--name',
      'a.xlsx',
    ]);
    expect(file.code, file.output).toBe(0);
    const fileId = (JSON.parse(file.stdout.join('\n')) as { id: string }).id;
    const created = await cli(['jobs', 'create', '--file', fileId, '--service', 'tabular-parser']);
    expect(created.code, created.output).toBe(0);
    const jobId = (JSON.parse(created.stdout.join('\n')) as { id: string }).id;
    await waitFor(async () => (await jobStatus(jobId)) === 'published', 'pending → published');

    // The inbox: the service's ack and result.
    await t.svc.ack({ jobId, fileId });
    await waitFor(async () => (await jobStatus(jobId)) === 'processing', 'published → processing');
    await t.svc.done({ jobId, fileId });
    await waitFor(async () => (await jobStatus(jobId)) === 'done', 'processing → done');

    // The quarantine: an envelope that is not JSON.
    await t.svc.raw('not json', { 'Nats-Msg-Id': `bad:${randomUUID()}` });
    await daemon.waitForLog((l) => l.event === 'quarantined');

    // The watchdog: a job whose reply deadline has passed times out.
    const late = await insertJob(admin.db, {
      status: 'published',
      reply_deadline: sql<Date>`now() - interval '1 second'` as never,
    });
    await waitFor(async () => (await jobStatus(late.jobId)) === 'timeout', 'published → timeout (watchdog)');

    // Dead letters: a service consumer that takes the job message and never acks it.
    const jsm = await jetstreamManager(t.nc);
    await jsm.consumers.add(JOBS_STREAM, {
      durable_name: 'never-acks',
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      filter_subject: 'recognition.job.never-acks',
      max_deliver: 1,
      ack_wait: nanos(1_000),
    });
    const messages = await (
      await jetstream(t.nc).consumers.get(JOBS_STREAM, 'never-acks')
    ).consume({ max_messages: 10 });
    void (async () => {
      for await (const _m of messages) {
        // taken, never acked
      }
    })();
    const file2 = await cli([
      'files',
      'add',
      '--bucket',
      'arm-ka',
      '--key',
      `uploads/${randomUUID()}.pdf`,
      '--name',
      'b.pdf',
    ]);
    const fileId2 = (JSON.parse(file2.stdout.join('\n')) as { id: string }).id;
    const dead = await cli(['jobs', 'create', '--file', fileId2, '--service', 'never-acks']);
    const deadId = (JSON.parse(dead.stdout.join('\n')) as { id: string }).id;
    await waitFor(async () => (await jobStatus(deadId)) === 'dlq', 'published → dlq (dead letters)', 30_000);
    messages.stop();

    // Every TCP connection of the daemon (this test's own come over the socket) is the runtime
    // role's, over TLS.
    const sessions = await sql<{ usename: string; ssl: boolean }>`
      SELECT a.usename, s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
      WHERE a.application_name LIKE 'recognition-core%' AND a.client_addr IS NOT NULL`.execute(admin.db);
    expect(sessions.rows.length).toBeGreaterThan(0);
    expect(new Set(sessions.rows.map((r) => `${r.usename} ssl=${r.ssl}`))).toEqual(
      new Set([`${RUNTIME} ssl=true`]),
    );

    // The operator's commands, as the runtime role.
    for (const args of [
      ['jobs', 'show', jobId],
      ['jobs', 'history', jobId],
      ['jobs', 'list', '--json'],
      ['quarantine', 'list'],
      ['jobs', 'retry', late.jobId],
      ['jobs', 'retry', '--status', 'dlq'],
      ['inbox', 'replay', '--since', '1h'],
      ['retention', 'run'],
    ]) {
      const r = await cli(args);
      expect(r.code, `${args.join(' ')}\n${r.output}`).toBe(0);
    }
    // Replaying invalid JSON runs the inbox's path as the runtime role; the message stays
    // quarantined, which the command reports with exit code 1.
    const replay = await cli(['quarantine', 'replay', '--reason', 'INVALID_JSON']);
    expect(replay.code, replay.output).toBe(1);
    expect(replay.output).toContain('1 still quarantined (INVALID_JSON: 1)');
    const retried = await admin.db
      .selectFrom('recognition_job')
      .select(['id', 'attempt'])
      .where('file_id', '=', late.fileId)
      .where('attempt', '=', 2)
      .executeTakeFirstOrThrow();
    await waitFor(async () => (await jobStatus(retried.id)) === 'published', 'the retry published');
    expect(
      (await admin.db.selectFrom('inbox_quarantine').select('replayed_at').executeTakeFirstOrThrow())
        .replayed_at,
    ).toBeInstanceOf(Date);

    // `quarantine purge` as the runtime role: a message received two days ago goes, today's stays.
    const old = await admin.db
      .insertInto('inbox_quarantine')
      .values({
        subject: 'recognition.result',
        reason: 'INVALID_JSON',
        payload: Buffer.from('{'),
        headers: '{}',
        received_at: sql<Date>`now() - interval '2 days'` as never,
      })
      .returning('id')
      .executeTakeFirstOrThrow();
    const purged = await cli(['quarantine', 'purge', '--older-than', '1d']);
    expect(purged.code, purged.output).toBe(0);
    expect(JSON.parse(purged.stdout.join('\n'))).toMatchObject({ dry_run: false, messages: 1 });
    const quarantined = await admin.db.selectFrom('inbox_quarantine').select('id').execute();
    expect(quarantined.length).toBe(1);
    expect(quarantined.map((q) => q.id)).not.toContain(old.id);

    daemon.child.kill('SIGTERM');
    expect(await daemon.exited).toEqual({ code: 0, signal: null });
    const lines = daemon.lines;
    allOutput.push(...lines.map((l) => l.text));

    // Every line of both streams is a JSON object; none says a privilege was missing.
    const notJson = lines.filter((l) => {
      try {
        return typeof JSON.parse(l.text) !== 'object';
      } catch {
        return true;
      }
    });
    expect(notJson).toEqual([]);
    expect(lines.filter((l) => l.stream === 'stderr')).toEqual([]);
    expect(lines.filter((l) => /permission denied|must be owner/i.test(l.text)).map((l) => l.text)).toEqual(
      [],
    );
    expect(daemon.logs().filter((l) => l.level === 'error' || l.event === 'listen_failed')).toEqual([]);
  });

  it('may not change the schema, delete rows but through the retention functions, or write the migrations’ bookkeeping', async () => {
    const u = new URL(roleUrl(RUNTIME, RUNTIME_PASSWORD));
    u.searchParams.set('sslcert', pki.client.cert);
    u.searchParams.set('sslkey', pki.client.key);
    const c = new pg.Client(pgConnection(u.toString()));
    await c.connect();
    try {
      for (const statement of [
        'CREATE TABLE intruder (id int)',
        'DELETE FROM recognition_job',
        'TRUNCATE recognition_job_transition',
        'DROP TABLE inbox_quarantine',
        'ALTER TABLE recognition_job ADD COLUMN x int',
        "INSERT INTO kysely_migration (name, timestamp) VALUES ('9999_fake', 'now')",
        'UPDATE recognition_job_transition SET event = event',
        'UPDATE s3_object SET key = key',
        'UPDATE recognition_audit SET note = note',
        'DELETE FROM recognition_audit',
        'DELETE FROM recognition_job_edge',
        'SELECT * FROM kysely_migration_lock',
        'DELETE FROM recognition_transition_delta',
        'UPDATE recognition_transition_delta SET event = event',
        'DELETE FROM recognition_transition_minute',
        'UPDATE recognition_transition_minute SET n = n + 1',
        "INSERT INTO recognition_transition_minute (minute, service, service_version, from_status, to_status, event, n) VALUES (now(), '', '', 'a', 'b', 'c', 1)",
      ]) {
        await expect(c.query(statement), statement).rejects.toThrow(/permission denied|must be owner/);
      }
      // The retention functions delete only what retention may: asked for every job of any
      // status finished before tomorrow, they delete none that is open or a file's current one.
      const count = async () =>
        Number(
          (await sql<{ n: string }>`SELECT count(*) AS n FROM recognition_job`.execute(admin.db)).rows[0]!.n,
        );
      const before = await count();
      for (const status of [
        'pending',
        'published',
        'processing',
        'done',
        'needs_check',
        'error',
        'timeout',
        'dlq',
      ]) {
        const { rows } = await c.query<{ jobs: number }>(
          `SELECT jobs FROM recognition_retention_delete_jobs($1, now() + interval '1 day', NULL, NULL, 1000)`,
          [status],
        );
        expect(rows, status).toEqual([{ jobs: ['timeout', 'dlq'].includes(status) ? 1 : 0 }]);
      }
      // The two it took: the timed-out and the dead-lettered job, which `jobs retry` superseded.
      expect(await count()).toBe(before - 2);

      // The console's counts: a transition the runtime role writes reaches the delta through the
      // trigger, the rollup takes it through its functions, and both reads see it.
      const done = await insertJob(admin.db, { status: 'done' });
      await c.query(
        `INSERT INTO recognition_job_transition (job_id, from_status, to_status, event) VALUES ($1, 'processing', 'done', 'ROLES_TEST')`,
        [done.jobId],
      );
      const runtime = openDb(u.toString(), { max: 1 });
      try {
        expect(await rollUpTransitions(runtime.db)).toMatchObject({
          busy: false,
          deltas: expect.any(Number),
        });
        const overview = await readOverview(runtime.db);
        expect(overview.transitions.filter((e) => e.event === 'ROLES_TEST')).toMatchObject([
          { from: 'processing', to: 'done', lastHour: 1, lastDay: 1 },
        ]);
        expect(overview.rollupBehindMs).toBeNull();
        expect((await readServices(runtime.db)).length).toBeGreaterThan(0);
      } finally {
        await runtime.close();
      }
    } finally {
      await c.end();
    }
  });

  it('never printed a secret', () => {
    expect(allOutput.length).toBeGreaterThan(20);
    for (const secret of SECRETS) expect(allOutput.filter((l) => l.includes(secret))).toEqual([]);
  });
});
