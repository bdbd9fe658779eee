/**
 * Throughput, end to end: N published jobs, N result envelopes already in the stream; the clock
 * starts when the consumer is started and stops when JetStream reports every envelope acked
 * (`core-inbox`'s ack floor reaches the last sequence). Every run starts from the same state
 * (tables truncated and reseeded, stream recreated, a checkpoint taken) and ends with a check that
 * every job is `done` with its object, transition and file — a fast wrong run fails the bench.
 *
 * The daemon runs in this process through `startDaemon` (inbox loop only, as in production minus
 * the idle watchdog/publisher/HTTP), logging JSON lines to a temporary file at the given level.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import pg from 'pg';
import { startDaemon } from '../src/daemon/daemon.js';
import { createLogger } from '../src/logger.js';
import {
  checkAllDone,
  checkpoint,
  prePublish,
  resetStream,
  seedPublishedJobs,
  truncateAll,
  waitAllAcked,
  type BenchEnv,
} from './env.js';
import { backendPids, findPid, startCpuSplit, type CpuSplit } from './processCpu.js';
import { startRawConsumer } from './rawConsumer.js';

/** One throughput measurement. */
export interface ThroughputResult {
  name: string;
  envelopes: number;
  seconds: number;
  perSecond: number;
  batchSize: number;
  concurrency: number;
  logLevel: string | null;
  /** Bytes the daemon logged during the run (null for the raw consumer). */
  logBytes: number | null;
  /** CPU per envelope of this process, the consumer's PostgreSQL backends and nats-server. */
  cpu: CpuSplit;
  /** When measured over several rounds (this is the median one): every round's envelopes/s. */
  roundsPerSecond?: number[];
}

/** Truncate, seed `n` jobs, recreate the stream, publish `n` results, checkpoint. */
async function prepare(env: BenchEnv, n: number): Promise<number> {
  await truncateAll(env.pool);
  const jobs = await seedPublishedJobs(env.pool, n);
  await resetStream(env.jsm, env.config());
  const last = await prePublish(env.js, jobs);
  await checkpoint(env.pool);
  return last;
}

function timeoutFor(n: number): number {
  // Generous: 200 envelopes/s would be a broken run, not a slow one.
  return 60_000 + n * 5;
}

/** The raw consumer of bench/rawConsumer.ts. */
export async function measureRaw(
  env: BenchEnv,
  mode: 'message' | 'batch',
  n: number,
): Promise<ThroughputResult> {
  const last = await prepare(env, n);
  const pool = new pg.Pool({ connectionString: env.databaseUrl, max: 10, application_name: 'bench-raw' });
  // pool.end() resolves before its connections have closed: one the bench's DROP DATABASE … FORCE
  // reaches first emits 'error' with nobody listening, which would end the run.
  pool.on('connect', (client) => client.on('error', () => undefined));
  const inFlight = 8;
  const batchSize = 100;
  try {
    const split = startCpuSplit(findPid(env.nats.configFile));
    const started = performance.now();
    const raw = await startRawConsumer({ pool, js: env.js, mode, inFlight, batchSize });
    await waitAllAcked(env.jsm, last, timeoutFor(n));
    const seconds = (performance.now() - started) / 1000;
    const cpu = split.end(await backendPids(env.pool, 'bench-raw'), n);
    await raw.stop();
    await checkAllDone(env.pool, n);
    return {
      name:
        mode === 'message' ? 'raw, one tx per message, 8 in flight' : 'raw, one tx per fetched batch of 100',
      envelopes: n,
      seconds,
      perSecond: n / seconds,
      batchSize: mode === 'message' ? 1 : batchSize,
      concurrency: mode === 'message' ? inFlight : 1,
      logLevel: null,
      logBytes: null,
      cpu,
    };
  } finally {
    await pool.end();
  }
}

/** Options of one daemon run; unset ones are the configuration's defaults. */
export interface InboxRunOptions {
  name: string;
  logLevel: 'info' | 'warn';
  batchSize?: number;
  concurrency?: number;
  env?: Record<string, string>;
}

/** The daemon's inbox, end to end. */
export async function measureInbox(
  env: BenchEnv,
  run: InboxRunOptions,
  n: number,
): Promise<ThroughputResult> {
  const last = await prepare(env, n);
  const overrides: Record<string, string> = { LOG_LEVEL: run.logLevel, ...run.env };
  if (run.batchSize !== undefined) overrides['INBOX_BATCH_SIZE'] = String(run.batchSize);
  if (run.concurrency !== undefined) overrides['INBOX_CONCURRENCY'] = String(run.concurrency);
  const config = env.config(overrides);
  const dir = mkdtempSync(join(tmpdir(), 'bench-log-'));
  // A real file, written synchronously like pino's default stdout: the cost of logging is measured.
  const dest = pino.destination({ dest: join(dir, 'daemon.log'), sync: true });
  const logger = createLogger({ level: config.LOG_LEVEL, destination: dest });
  try {
    const split = startCpuSplit(findPid(env.nats.configFile));
    const started = performance.now();
    const daemon = await startDaemon({
      config,
      logger,
      loops: { inbox: true, watchdog: false, publisher: false, deadLetters: false, http: false },
    });
    let seconds: number;
    let cpu: CpuSplit;
    try {
      await waitAllAcked(env.jsm, last, timeoutFor(n));
      seconds = (performance.now() - started) / 1000;
      // The daemon's pool connects as `recognition-core` (src/db/database.ts).
      cpu = split.end(await backendPids(env.pool, 'recognition-core'), n);
    } finally {
      await daemon.stop();
    }
    await checkAllDone(env.pool, n);
    dest.flushSync();
    const { size } = statSync(join(dir, 'daemon.log'));
    return {
      name: run.name,
      envelopes: n,
      seconds,
      perSecond: n / seconds,
      batchSize: config.INBOX_BATCH_SIZE,
      concurrency: config.INBOX_CONCURRENCY,
      logLevel: run.logLevel,
      logBytes: size,
      cpu,
    };
  } finally {
    dest.end();
    rmSync(dir, { recursive: true, force: true });
  }
}
