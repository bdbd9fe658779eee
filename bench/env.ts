/**
 * The bench's world: its own database on the local PostgreSQL server (created, migrated, dropped
 * after), its own nats-server (a child process on a free port with a temporary store), the
 * fixtures every measurement starts from (N published jobs and their files, N result envelopes
 * in `RECOGNITION_RESULTS`), and the CPU and RSS of processes read from `/proc`.
 *
 * Fixtures are inserted with set-based SQL, not through the step: the bench measures the daemon,
 * not the seeding. Seeding runs with `session_replication_role = replica` so that a file can name
 * its job before the job row exists (foreign keys are triggers, which that role skips).
 */
import { readFileSync, readdirSync } from 'node:fs';
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { newId } from '../src/db/ids.js';
import { inPgTransaction } from '../src/db/pgTransaction.js';
import { CONFIG_VARIABLES, loadConfig, type Config } from '../src/config.js';
import { createDatabaseIfMissing, dropDatabase, migrateToLatest, openDb } from '../src/db/database.js';
import { provisionStreams } from '../src/nats/provision.js';
import { INBOX_CONSUMER, RESULTS_STREAM, RESULT_SUBJECT } from '../src/nats/subjects.js';
import { startNatsServer, type NatsServerHandle } from '../workshop/localServers/natsServer.js';

/** Everything a measurement needs; {@link BenchEnv.close} removes it all. */
export interface BenchEnv {
  databaseUrl: string;
  nats: NatsServerHandle;
  /** The bench's own JetStream client and manager (publishing, polling consumer info). */
  js: JetStreamClient;
  jsm: JetStreamManager;
  /** The bench's own small pool (seeding, checks). */
  pool: pg.Pool;
  /** The tables hold a history that runs keep: they remove and check their own fixtures only. */
  history: boolean;
  /** The daemon's configuration for this environment, with `overrides`. */
  config(overrides?: Record<string, string>): Config;
  close(): Promise<void>;
}

/**
 * The daemon's configuration for the bench's database and nats-server, with `overrides`. The
 * daemon's tuning variables set in the bench's own environment (`INBOX_BATCH_SIZE=1000 npm run
 * bench`) apply too: every configuration variable except the connections, which the bench owns.
 */
export function configFor(databaseUrl: string, natsUrl: string) {
  const owned = ['DATABASE_URL', 'NATS_URL', 'HTTP_PORT', 'HTTP_HOST', 'LOG_PRETTY'];
  const tuning = Object.keys(CONFIG_VARIABLES).filter((k) => !owned.includes(k) && process.env[k]);
  const connections = { DATABASE_URL: databaseUrl, NATS_URL: natsUrl, HTTP_PORT: '0', LOG_PRETTY: 'false' };
  return (overrides: Record<string, string> = {}): Config =>
    loadConfig({
      ...connections,
      ...Object.fromEntries(tuning.map((k) => [k, process.env[k]!])),
      ...overrides,
    });
}

/** A pool of the bench's own whose connections may be cut by the final `DROP DATABASE … FORCE`. */
export function benchPool(databaseUrl: string, applicationName: string, max = 4): pg.Pool {
  const pool = new pg.Pool({ connectionString: databaseUrl, max, application_name: applicationName });
  // pool.end() resolves before its connections have closed: one that the DROP reaches first
  // emits 'error' with nobody listening, which would end the run.
  pool.on('connect', (client) => client.on('error', () => undefined));
  return pool;
}

/**
 * Start nats-server, create and migrate a fresh database: `BENCH_PG_URL` or `TEST_PG_URL` names
 * the PostgreSQL server, by default the machine's local one.
 */
export async function startBenchEnv(): Promise<BenchEnv> {
  const nats = await startNatsServer();
  const server = process.env['BENCH_PG_URL'] ?? process.env['TEST_PG_URL'];
  const url = new URL(server ?? 'postgres://postgres@127.0.0.1:5432/postgres');
  url.pathname = `/rc_bench_${process.pid}_${Date.now()}`;
  const databaseUrl = url.toString();
  try {
    await createDatabaseIfMissing(databaseUrl);
    const m = openDb(databaseUrl, { max: 1 });
    await migrateToLatest(m.db).finally(() => m.close());
    const nc = await connect({ servers: nats.url, name: 'bench' });
    const pool = benchPool(databaseUrl, 'bench');
    const [js, jsm, config] = [jetstream(nc), await jetstreamManager(nc), configFor(databaseUrl, nats.url)];
    const close = async () => {
      await nc.close().catch(() => undefined);
      await pool.end().catch(() => undefined);
      await dropDatabase(databaseUrl).catch(() => undefined);
      await nats.cleanup();
    };
    return { databaseUrl, nats, js, jsm, pool, config, close, history: false };
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
 * Empty the tables and insert `count` files with their uploads and one job each, every job in
 * `published` with a deadline 10 minutes away and its file `QUEUED` (current job = that job): the
 * state in which a result envelope is applied with every statement (lock, job, file, s3_object,
 * transition).
 */
export async function seedPublishedJobs(pool: pg.Pool, count: number, keep = false): Promise<BenchJob[]> {
  // `keep`: delete the fixtures (files named report.xlsx, their jobs, transitions and objects) only.
  await (keep
    ? inPgTransaction(pool, async (client: pg.PoolClient) => {
        await client.query(`SET LOCAL session_replication_role = replica`);
        await client.query(`WITH f AS (DELETE FROM stored_file WHERE original_name = 'report.xlsx' RETURNING id, s3_object_id),
      j AS (DELETE FROM recognition_job WHERE file_id IN (SELECT id FROM f) RETURNING id, result_s3_object_id),
      t AS (DELETE FROM recognition_job_transition WHERE job_id IN (SELECT id FROM j)),
      o AS (DELETE FROM s3_object WHERE id IN (SELECT s3_object_id FROM f UNION ALL SELECT result_s3_object_id FROM j))
      DELETE FROM inbox_quarantine`);
      })
    : truncateAll(pool));
  const jobs = Array.from({ length: count }, () => ({ jobId: newId(), fileId: newId() }));
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
export function doneEnvelope(job: BenchJob): Uint8Array {
  return new TextEncoder().encode(
    JSON.stringify({
      job_id: job.jobId,
      status: 'done',
      service: { name: 'tabular-parser', version: '2.3.1' },
      result_s3: { bucket: 'arm-ka', key: `results/${job.fileId}/${job.jobId}/result.json` },
      result_schema_version: '1.0',
      metrics: { pages: 2, duration_ms: 420 },
      sent_at: new Date().toISOString(),
    }),
  );
}

/** The headers of a job's result: its `Nats-Msg-Id`. */
export function resultHeaders(job: BenchJob) {
  const h = natsHeaders();
  h.set('Nats-Msg-Id', `result:${job.jobId}:1`);
  return h;
}

/**
 * Recreate `RECOGNITION_RESULTS` and `core-inbox` empty, exactly as the daemon provisions them
 * (so the ceiling reads through the same consumer configuration).
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

/** Publish one result per job, 2 000 in flight at a time. Resolves with the last stream sequence. */
export async function prePublish(js: JetStreamClient, jobs: readonly BenchJob[]): Promise<number> {
  let last = 0;
  for (let i = 0; i < jobs.length; i += 2_000) {
    const acks = await Promise.all(
      jobs
        .slice(i, i + 2_000)
        .map((j) => js.publish(RESULT_SUBJECT, doneEnvelope(j), { headers: resultHeaders(j) })),
    );
    for (const a of acks) last = Math.max(last, a.seq);
  }
  return last;
}

/** Resolve once `core-inbox` has every message up to `lastSeq` acked (polled every 10 ms). */
export async function waitAllAcked(jsm: JetStreamManager, lastSeq: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const info = await jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER);
    if (info.ack_floor.stream_seq >= lastSeq && info.num_ack_pending === 0) return;
    if (Date.now() > deadline) {
      throw new Error(
        `not every envelope was acked within ${timeoutMs} ms (ack floor ${info.ack_floor.stream_seq} of ${lastSeq}, ack pending ${info.num_ack_pending})`,
      );
    }
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * Sanity check after a run: every job done with its object and transition, every file PROCESSING;
 * with `fixturesOnly`, of the fixtures' rows (files named report.xlsx) among a history.
 */
export async function checkAllDone(pool: pg.Pool, expected: number, fixturesOnly = false): Promise<void> {
  const [file, job] = fixturesOnly ? [`original_name = 'report.xlsx'`, 'j.id IS NOT NULL'] : ['true', 'true'];
  const jobs = `(SELECT j.* FROM recognition_job j JOIN stored_file f ON f.id = j.file_id WHERE ${file})`;
  const { rows } = await pool.query<Record<string, string>>(`
    SELECT (SELECT count(*) FROM ${jobs} j WHERE status = 'done' AND result_s3_object_id IS NOT NULL) AS done,
           (SELECT count(*) FROM s3_object o LEFT JOIN ${jobs} j ON j.result_s3_object_id = o.id
            WHERE bucket_role = 'results' AND ${job}) AS objects,
           (SELECT count(*) FROM recognition_job_transition t LEFT JOIN ${jobs} j ON j.id = t.job_id WHERE ${job}) AS transitions,
           (SELECT count(*) FROM stored_file WHERE status = 'PROCESSING' AND ${file}) AS files,
           (SELECT count(*) FROM inbox_quarantine) AS quarantined`);
  const got = JSON.stringify(Object.values(rows[0]!).map(Number));
  const want = JSON.stringify([expected, expected, expected, expected, 0]);
  if (got !== want) {
    throw new Error(
      `the run left unexpected rows: got ${got}, want ${want} (done, objects, transitions, files, quarantined)`,
    );
  }
}

/** CPU milliseconds (user + system) a process has used, or null when /proc cannot be read. */
export function processCpuMs(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may contain spaces) start after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime, in clock ticks of 1/100 s (USER_HZ on Linux).
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return null;
  }
}

/** A process's resident set size, bytes, or null when /proc cannot be read. */
export function rssBytes(pid: number): number | null {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

/** Pid of the process whose command line contains `needle` (the nats-server's config file path). */
function findPid(needle: string): number | null {
  try {
    for (const entry of readdirSync('/proc').filter((e) => /^\d+$/.test(e))) {
      try {
        if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(needle)) return Number(entry);
      } catch {
        // gone meanwhile
      }
    }
  } catch {
    // no /proc
  }
  return null;
}

/** CPU per envelope (or per job) of each part of a run, in microseconds (null where unknown). */
export interface CpuSplit {
  nodeUs: number | null;
  postgresUs: number | null;
  natsUs: number | null;
}

/**
 * Start measuring the CPU of a run: this process and nats-server from now; the PostgreSQL
 * backends connected as `applicationName` over their whole life, since the consumer's pool opens
 * them during the run — so `end` must be called before that pool closes.
 */
export function startCpuSplit(env: BenchEnv): {
  end(applicationName: string, envelopes: number): Promise<CpuSplit>;
} {
  const natsPid = findPid(env.nats.configFile);
  const node0 = process.cpuUsage();
  const nats0 = natsPid === null ? null : processCpuMs(natsPid);
  return {
    async end(applicationName, envelopes) {
      const node = process.cpuUsage(node0);
      const nats1 = natsPid === null ? null : processCpuMs(natsPid);
      const { rows } = await env.pool.query<{ pid: number }>(
        `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`,
        [applicationName],
      );
      const pgMs = rows
        .map((r) => processCpuMs(r.pid))
        .reduce<number | null>((a, b) => (b === null ? a : (a ?? 0) + b), null);
      return {
        nodeUs: (node.user + node.system) / envelopes,
        postgresUs: pgMs === null ? null : (pgMs * 1000) / envelopes,
        natsUs: nats0 === null || nats1 === null ? null : ((nats1 - nats0) * 1000) / envelopes,
      };
    },
  };
}
