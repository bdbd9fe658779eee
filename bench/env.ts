/**
 * The bench's world: its own database (created, migrated, dropped after) and nats-server (a child on
 * a free port), the stream, the CPU split of a run, and the small tools every section uses.
 */
import { jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { CONFIG_VARIABLES, loadConfig, type Config } from '../src/config.js';
import { createDatabaseIfMissing, dropDatabase, migrateToLatest, openDb } from '../src/db/database.js';
import type { Db } from '../src/db/database.js';
import { provisionStreams } from '../src/nats/provision.js';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../src/nats/subjects.js';
import { processCpuMs } from '../workshop/processStats.js';
import { startNatsServer } from '../workshop/localServers/natsServer.js';

/** Everything a measurement needs; `close` removes it all. */
export type BenchEnv = Awaited<ReturnType<typeof startBenchEnv>>;

/** The daemon's configuration for these servers: the bench's environment's tuning, then `overrides`. */
export function configFor(databaseUrl: string, natsUrl: string) {
  const owned = ['DATABASE_URL', 'NATS_URL', 'HTTP_PORT', 'HTTP_HOST', 'LOG_PRETTY'];
  const tuning = Object.keys(CONFIG_VARIABLES).filter((k) => !owned.includes(k) && process.env[k]);
  const connections = { DATABASE_URL: databaseUrl, NATS_URL: natsUrl, HTTP_PORT: '0', LOG_PRETTY: 'false' };
  const tuned = Object.fromEntries(tuning.map((k) => [k, process.env[k]!]));
  return (overrides: Record<string, string> = {}): Config =>
    loadConfig({ ...connections, ...tuned, ...overrides });
}

/** A pool of the bench's own whose connections the final `DROP DATABASE … FORCE` may cut. */
export function benchPool(databaseUrl: string, applicationName: string, max = 4): pg.Pool {
  const pool = new pg.Pool({ connectionString: databaseUrl, max, application_name: applicationName });
  // pool.end() resolves before its connections close: one the DROP reaches first emits 'error'.
  pool.on('connect', (client) => client.on('error', () => undefined));
  return pool;
}

/** nats-server and a fresh migrated database on `BENCH_PG_URL`, `TEST_PG_URL` or the local server. */
export async function startBenchEnv() {
  const nats = await startNatsServer();
  const server = process.env['BENCH_PG_URL'] ?? process.env['TEST_PG_URL'];
  const url = new URL(server ?? 'postgres://postgres@127.0.0.1:5432/postgres');
  url.pathname = `/rc_bench_${process.pid}_${Date.now()}`;
  const databaseUrl = url.toString();
  try {
    await createDatabaseIfMissing(databaseUrl);
    await withDb(databaseUrl, 'recognition-core', migrateToLatest);
    const nc = await connect({ servers: nats.url, name: 'bench' });
    const pool = benchPool(databaseUrl, 'bench');
    const [js, jsm, config] = [jetstream(nc), await jetstreamManager(nc), configFor(databaseUrl, nats.url)];
    const close = async () => {
      await nc.close().catch(() => undefined);
      await pool.end().catch(() => undefined);
      await dropDatabase(databaseUrl).catch(() => undefined);
      await nats.cleanup();
    };
    // `history`: the tables hold a history that runs keep; they remove and check their own fixtures only.
    return { databaseUrl, nats, js, jsm, pool, config, close, history: false };
  } catch (err) {
    await dropDatabase(databaseUrl).catch(() => undefined);
    await nats.cleanup();
    throw err;
  }
}

/** `fn` on an environment of its own (a section's generated history), removed after. */
export async function withBenchEnv<T>(fn: (env: BenchEnv) => Promise<T>): Promise<T> {
  const env = await startBenchEnv();
  return fn(env).finally(() => env.close());
}

/** `fn` on one connection of its own to `databaseUrl`, its backend named `applicationName`, closed after. */
export function withDb<T>(databaseUrl: string, applicationName: string, fn: (db: Db['db']) => Promise<T>) {
  const { db, close } = openDb(databaseUrl, { max: 1, applicationName });
  return fn(db).finally(close);
}

/** Flush dirty buffers now, so a checkpoint does not land in the middle of a timed run. */
export const checkpoint = (pool: pg.Pool) => pool.query('CHECKPOINT');
export const vacuumAnalyze = (pool: pg.Pool) =>
  pool.query('VACUUM ANALYZE s3_object, stored_file, recognition_job, recognition_job_transition');

/** Recreate `RECOGNITION_RESULTS` and `core-inbox` empty, as the daemon provisions them. */
export async function resetStream(jsm: JetStreamManager, cfg: Config): Promise<void> {
  await jsm.streams.delete(RESULTS_STREAM).catch(() => undefined);
  await provisionStreams(jsm, {
    duplicateWindowMs: cfg.NATS_DUPLICATE_WINDOW_MS,
    replicas: cfg.NATS_STREAM_REPLICAS,
    ackWaitMs: cfg.INBOX_ACK_WAIT_MS,
    maxAckPending: cfg.INBOX_MAX_ACK_PENDING,
  });
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Resolve once `core-inbox` has every message up to `lastSeq` acked (polled every 10 ms). */
export async function waitAllAcked(jsm: JetStreamManager, lastSeq: number, timeoutMs: number): Promise<void> {
  for (const deadline = Date.now() + timeoutMs; ; await sleep(10)) {
    const { ack_floor: floor, num_ack_pending: pending } = await jsm.consumers.info(
      RESULTS_STREAM,
      INBOX_CONSUMER,
    );
    if (floor.stream_seq >= lastSeq && pending === 0) return;
    const late = `not every envelope was acked within ${timeoutMs} ms (ack floor ${floor.stream_seq} of ${lastSeq}, ack pending ${pending})`;
    if (Date.now() > deadline) throw new Error(late);
  }
}

/** The `performance.now()` of `core-inbox`'s first delivery (polled every 5 ms, for 60 s at most). */
export async function firstDelivery(jsm: JetStreamManager, who: string): Promise<number> {
  for (const deadline = Date.now() + 60_000; ; await sleep(5)) {
    if ((await jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER)).delivered.stream_seq > 0)
      return performance.now();
    if (Date.now() > deadline) throw new Error(`the ${who} delivered nothing within 60 s`);
  }
}

/** CPU per envelope (or per job) of each part of a run, in microseconds (null where unknown). */
export type CpuSplit = Record<'nodeUs' | 'postgresUs' | 'natsUs', number | null>;

/** A run's CPU: this process and nats-server from now, the backends named `applicationName` over their life (`end` before their pool closes). */
export function startCpuSplit(env: BenchEnv) {
  const natsPid = env.nats.pid();
  const node0 = process.cpuUsage();
  const nats0 = natsPid === null ? null : processCpuMs(natsPid);
  return {
    async end(applicationName: string, envelopes: number): Promise<CpuSplit> {
      const node = process.cpuUsage(node0);
      const nats1 = natsPid === null ? null : processCpuMs(natsPid);
      const { rows } = await env.pool.query<{ pid: number }>(
        `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`,
        [applicationName],
      );
      const sum = (a: number | null, b: number | null) => (b === null ? a : (a ?? 0) + b);
      const pgMs = rows.map((r) => processCpuMs(r.pid)).reduce(sum, null);
      return {
        nodeUs: (node.user + node.system) / envelopes,
        postgresUs: pgMs === null ? null : (pgMs * 1000) / envelopes,
        natsUs: nats0 === null || nats1 === null ? null : ((nats1 - nats0) * 1000) / envelopes,
      };
    },
  };
}

/** The middle element of `all` by `key` (the lower one of an even count). */
export function median<T>(all: readonly T[], key: (t: T) => number): T {
  return [...all].sort((a, b) => key(a) - key(b))[Math.floor((all.length - 1) / 2)]!;
}

/** The `p`th percentile (0–100, nearest rank) of `sorted`, ascending. */
export function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/** Milliseconds of `runs` calls of `fn` after an untimed one, ascending; `restMs` untimed after each. */
export async function timeRuns(runs: number, fn: (i: number) => Promise<unknown>, restMs = 0) {
  const ms: number[] = [];
  for (let i = 0; i <= runs; i++) {
    const started = performance.now();
    await fn(i);
    if (i > 0) ms.push(performance.now() - started);
    if (restMs > 0) await sleep(restMs);
  }
  return ms.sort((a, b) => a - b);
}

/** A count in the report's style: rounded, thousands separated. */
export const n0 = (n: number) => Math.round(n).toLocaleString('en-US');
