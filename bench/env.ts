/**
 * The bench's world: its own database on the local PostgreSQL server (created, migrated, dropped
 * after), its own nats-server (a child process on a free port with a temporary store), and the
 * fixtures every measurement starts from (N published jobs and their files, N result envelopes
 * in `RECOGNITION_RESULTS`).
 *
 * Fixtures are inserted with set-based SQL, not through the step: the bench measures the daemon,
 * not the seeding. Seeding runs with `session_replication_role = replica` so that a file can name
 * its job before the job row exists (foreign keys are triggers, which that role skips).
 */
import { randomUUID } from 'node:crypto';
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { headers as natsHeaders, type NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { inPgTransaction } from '../src/db/pgTransaction.js';
import { CONFIG_VARIABLES, loadConfig, type Config } from '../src/config.js';
import { createDatabaseIfMissing, dropDatabase, migrateToLatest, openDb } from '../src/db/database.js';
import { provisionStreams } from '../src/nats/provision.js';
import { INBOX_CONSUMER, RESULTS_STREAM, RESULT_SUBJECT } from '../src/nats/subjects.js';
import { startNatsServer, type NatsServerHandle } from '../src/localServers/natsServer.js';

/** The service every bench envelope comes from. */
export const SERVICE = { name: 'tabular-parser', version: '2.3.1' } as const;
export const RESULTS_BUCKET = 'arm-ka';

/** Where the bench finds PostgreSQL: `BENCH_PG_URL` (a server URL), else the machine's local server. */
function serverUrl(): string {
  return (
    process.env['BENCH_PG_URL'] ?? process.env['TEST_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/postgres'
  );
}

function dbUrl(name: string): string {
  const u = new URL(serverUrl());
  u.pathname = `/${name}`;
  return u.toString();
}

/** Everything a measurement needs; {@link BenchEnv.close} removes it all. */
export interface BenchEnv {
  databaseUrl: string;
  natsUrl: string;
  nats: NatsServerHandle;
  /** The bench's own connection (publishing, polling consumer info). */
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  /** The bench's own small pool (seeding, checks). */
  pool: pg.Pool;
  /** The daemon's configuration for this environment, with `overrides`. */
  config(overrides?: Record<string, string>): Config;
  close(): Promise<void>;
}

/**
 * The daemon's tuning variables set in the bench's own environment (`INBOX_BATCH_SIZE=1000 npm run
 * bench`): every configuration variable except the connections, which the bench owns.
 */
function tuningFromEnvironment(): Record<string, string> {
  const owned = new Set(['DATABASE_URL', 'NATS_URL', 'HTTP_PORT', 'HTTP_HOST', 'LOG_PRETTY']);
  return Object.fromEntries(
    Object.keys(CONFIG_VARIABLES)
      .filter((k) => !owned.has(k) && process.env[k] !== undefined && process.env[k] !== '')
      .map((k) => [k, process.env[k]!]),
  );
}

/** The daemon's configuration for the bench's database and nats-server, with `overrides`. */
export function configFor(
  databaseUrl: string,
  natsUrl: string,
): (overrides?: Record<string, string>) => Config {
  return (overrides = {}) =>
    loadConfig({
      DATABASE_URL: databaseUrl,
      NATS_URL: natsUrl,
      HTTP_PORT: '0',
      HTTP_HOST: '127.0.0.1',
      LOG_PRETTY: 'false',
      ...tuningFromEnvironment(),
      ...overrides,
    });
}

/** Start nats-server, create and migrate a fresh database. */
export async function startBenchEnv(): Promise<BenchEnv> {
  const nats = await startNatsServer();
  const name = `rc_bench_${process.pid}_${Date.now()}`;
  const databaseUrl = dbUrl(name);
  try {
    await createDatabaseIfMissing(databaseUrl);
    const m = openDb(databaseUrl, { max: 1 });
    try {
      await migrateToLatest(m.db);
    } finally {
      await m.close();
    }
    const nc = await connect({ servers: nats.url, name: 'bench' });
    const pool = new pg.Pool({ connectionString: databaseUrl, max: 4, application_name: 'bench' });
    // pool.end() resolves before its connections have closed: one that close()'s DROP DATABASE …
    // FORCE reaches first emits 'error' with nobody listening, which would end the run.
    pool.on('connect', (client) => client.on('error', () => undefined));
    const config = configFor(databaseUrl, nats.url);
    return {
      databaseUrl,
      natsUrl: nats.url,
      nats,
      nc,
      js: jetstream(nc),
      jsm: await jetstreamManager(nc),
      pool,
      config,
      async close() {
        await nc.close().catch(() => undefined);
        await pool.end().catch(() => undefined);
        await dropDatabase(databaseUrl).catch(() => undefined);
        await nats.cleanup();
      },
    };
  } catch (err) {
    await dropDatabase(databaseUrl).catch(() => undefined);
    await nats.cleanup();
    throw err;
  }
}

/** A job of the fixtures. */
export interface BenchJob {
  jobId: string;
  fileId: string;
}

/** Empty every table the project writes (identities restart): each measurement starts alike. */
export async function truncateAll(pool: pg.Pool): Promise<void> {
  await pool.query(
    `TRUNCATE recognition_job_transition, inbox_quarantine, recognition_job, stored_file, s3_object RESTART IDENTITY CASCADE`,
  );
}

/**
 * Insert `count` files with their uploads and one job each, every job in `published` with a
 * deadline 10 minutes away and its file `QUEUED` (current job = that job): the state in which a
 * result envelope is applied with every statement (lock, job, file, s3_object, transition).
 */
export async function seedPublishedJobs(pool: pg.Pool, count: number): Promise<BenchJob[]> {
  const jobs = Array.from({ length: count }, () => ({ jobId: randomUUID(), fileId: randomUUID() }));
  await inPgTransaction(pool, async (client: pg.PoolClient) => {
    await client.query(`SET LOCAL session_replication_role = replica`);
    for (let i = 0; i < jobs.length; i += 50_000) {
      const chunk = jobs.slice(i, i + 50_000);
      await client.query(
        `WITH input AS (
           SELECT t.jid AS job_id, t.fid AS file_id FROM unnest($1::uuid[], $2::uuid[]) AS t(jid, fid)
         ),
         upload AS (
           INSERT INTO s3_object (bucket, key, bucket_role, created_by)
           SELECT 'arm-ka', 'uploads/' || file_id || '.xlsx', 'uploads', 'bench' FROM input
           RETURNING id, key
         ),
         file AS (
           INSERT INTO stored_file (id, s3_object_id, original_name, status, current_recognition_job_id)
           SELECT i.file_id, u.id, 'report.xlsx', 'QUEUED', i.job_id
           FROM input i JOIN upload u ON u.key = 'uploads/' || i.file_id || '.xlsx'
         )
         INSERT INTO recognition_job (id, file_id, attempt, target_service, status, publish_attempts,
                                      next_publish_at, published_at, reply_deadline)
         SELECT job_id, file_id, 1, 'tabular-parser', 'published', 1, NULL,
                now() - interval '1 minute', now() + interval '10 minutes'
         FROM input`,
        [chunk.map((j) => j.jobId), chunk.map((j) => j.fileId)],
      );
    }
  });
  await pool.query('VACUUM ANALYZE s3_object, stored_file, recognition_job');
  return jobs;
}

/** Flush dirty buffers now, so a checkpoint does not land in the middle of a timed run. */
export async function checkpoint(pool: pg.Pool): Promise<void> {
  await pool.query('CHECKPOINT');
}

/** The result envelope of a job, as a service sends it (the same shape as the tests' service client). */
export function doneEnvelope(job: BenchJob, sentAt = new Date()): Uint8Array {
  return new TextEncoder().encode(
    JSON.stringify({
      job_id: job.jobId,
      status: 'done',
      service: SERVICE,
      result_s3: { bucket: RESULTS_BUCKET, key: `results/${job.fileId}/${job.jobId}/result.json` },
      result_schema_version: '1.0',
      metrics: { pages: 2, duration_ms: 420 },
      sent_at: sentAt.toISOString(),
    }),
  );
}

/** `Nats-Msg-Id` of a job's result. */
export function resultMsgId(job: BenchJob): string {
  return `result:${job.jobId}:1`;
}

/** The headers of a job's result: its `Nats-Msg-Id`. */
export function resultHeaders(job: BenchJob) {
  const h = natsHeaders();
  h.set('Nats-Msg-Id', resultMsgId(job));
  return h;
}

/** Publish one job's result envelope; resolves with JetStream's ack. */
export function publishResult(js: JetStreamClient, job: BenchJob, sentAt?: Date) {
  return js.publish(RESULT_SUBJECT, doneEnvelope(job, sentAt), {
    headers: resultHeaders(job),
    msgID: resultMsgId(job),
  });
}

/**
 * Recreate `RECOGNITION_RESULTS` and `core-inbox` empty, exactly as the daemon provisions them
 * (so the raw consumer reads through the same consumer configuration).
 */
export async function resetStream(jsm: JetStreamManager, cfg: Config): Promise<void> {
  await jsm.streams.delete(RESULTS_STREAM).catch(() => undefined);
  await provisionStreams(jsm, {
    duplicateWindowMs: cfg.NATS_DUPLICATE_WINDOW_MS,
    replicas: cfg.NATS_STREAM_REPLICAS,
    ackWaitMs: cfg.INBOX_ACK_WAIT_MS,
    maxAckPending: cfg.INBOX_MAX_ACK_PENDING,
  });
}

/** Publish one result per job, `window` in flight at a time. Resolves with the last stream sequence. */
export async function prePublish(
  js: JetStreamClient,
  jobs: readonly BenchJob[],
  window = 2_000,
): Promise<number> {
  let last = 0;
  for (let i = 0; i < jobs.length; i += window) {
    const acks = await Promise.all(jobs.slice(i, i + window).map((j) => publishResult(js, j)));
    for (const a of acks) last = Math.max(last, a.seq);
  }
  return last;
}

/** Resolve once `core-inbox` has every message up to `lastSeq` acked (polled every `everyMs`). */
export async function waitAllAcked(
  jsm: JetStreamManager,
  lastSeq: number,
  timeoutMs: number,
  everyMs = 10,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const info = await jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER);
    if (info.ack_floor.stream_seq >= lastSeq && info.num_ack_pending === 0) return;
    if (Date.now() > deadline) {
      throw new Error(
        `not every envelope was acked within ${timeoutMs} ms (ack floor ${info.ack_floor.stream_seq} of ${lastSeq}, ack pending ${info.num_ack_pending})`,
      );
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** How many jobs are in `status` (a run's correctness check). */
export async function countJobs(pool: pg.Pool, status: string): Promise<number> {
  const { rows } = await pool.query<{ n: string }>(
    'SELECT count(*) AS n FROM recognition_job WHERE status = $1',
    [status],
  );
  return Number(rows[0]!.n);
}

/** Sanity check after an inbox run: every job done with its object and transition, every file PROCESSING. */
export async function checkAllDone(pool: pg.Pool, expected: number): Promise<void> {
  const { rows } = await pool.query<{
    done: string;
    objects: string;
    transitions: string;
    files: string;
    quarantined: string;
  }>(`
    SELECT (SELECT count(*) FROM recognition_job WHERE status = 'done' AND result_s3_object_id IS NOT NULL) AS done,
           (SELECT count(*) FROM s3_object WHERE bucket_role = 'results') AS objects,
           (SELECT count(*) FROM recognition_job_transition) AS transitions,
           (SELECT count(*) FROM stored_file WHERE status = 'PROCESSING') AS files,
           (SELECT count(*) FROM inbox_quarantine) AS quarantined`);
  const r = rows[0]!;
  const got = {
    done: +r.done,
    objects: +r.objects,
    transitions: +r.transitions,
    files: +r.files,
    quarantined: +r.quarantined,
  };
  const want = { done: expected, objects: expected, transitions: expected, files: expected, quarantined: 0 };
  if (JSON.stringify(got) !== JSON.stringify(want)) {
    throw new Error(
      `inbox run left unexpected rows: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`,
    );
  }
}
