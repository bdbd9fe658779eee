/**
 * The bench's world: its own database on the local PostgreSQL server (created, migrated, dropped
 * after), its own nats-server (a child process on a free port with a temporary store), the stream
 * reset and waited on, and the CPU split of a run (this process, its PostgreSQL backends,
 * nats-server). The fixtures are `workshop/benchFixtures.ts`.
 */
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { CONFIG_VARIABLES, loadConfig, type Config } from '../src/config.js';
import { createDatabaseIfMissing, dropDatabase, migrateToLatest, openDb } from '../src/db/database.js';
import { provisionStreams } from '../src/nats/provision.js';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../src/nats/subjects.js';
import { processCpuMs } from '../workshop/processStats.js';
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

/** Flush dirty buffers now, so a checkpoint does not land in the middle of a timed run. */
export async function checkpoint(pool: pg.Pool): Promise<void> {
  await pool.query('CHECKPOINT');
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
  const natsPid = env.nats.pid();
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
