/**
 * Throughput, end to end, from N results already in the stream for N published jobs: timed from
 * the consumer's start (a daemon process: its first delivery) until JetStream reports the last
 * envelope acked. Every run starts from the same state (tables reseeded, stream recreated, a
 * checkpoint taken) and ends with a check of every row — a fast wrong run fails the bench.
 */
import { spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import type { Config } from '../src/config.js';
import { startDaemon, type DaemonOptions } from '../src/daemon/daemon.js';
import { createLogger, logDestination } from '../src/logger.js';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../src/nats/subjects.js';
import { CEILING, CEILING_NAME, CEILING_PROCESS_APPLICATION, startCeiling } from './ceiling.js';
import {
  benchPool,
  checkpoint,
  resetStream,
  startCpuSplit,
  waitAllAcked,
  type BenchEnv,
  type CpuSplit,
} from './env.js';
import { checkAllDone, prePublish, seedPublishedJobs } from '../workshop/benchFixtures.js';
import { processCpuMs, rssBytes } from '../workshop/processStats.js';

/** One throughput measurement. */
export interface ThroughputResult {
  name: string;
  envelopes: number;
  seconds: number;
  perSecond: number;
  batchSize: number;
  concurrency: number;
  logLevel: LogLevel | null;
  /** CPU per envelope of the consumer's process, its PostgreSQL backends and nats-server. */
  cpu: CpuSplit;
  /** When measured over several rounds (this is the median one): every round's envelopes/s. */
  roundsPerSecond?: number[];
  /** A daemon process: seconds from its start to its first delivery (not in `seconds`). */
  startupSeconds?: number;
  /** A daemon process: its largest RSS while draining, sampled every {@link RSS_EVERY_MS}, bytes. */
  maxRssBytes?: number;
}

/** Called when a run's clock starts and when it stops (bench/profile.ts profiles in between). */
export interface TimedHooks {
  started(): Promise<void>;
  ended(): Promise<void>;
}

/** The daemon's log level in a run: `warn` logs nothing per envelope, `info` one line each. */
export type LogLevel = 'info' | 'warn';

/** Seed `n` jobs, recreate the stream, publish `n` results, checkpoint; the last sequence. */
async function prepare(env: BenchEnv, n: number): Promise<number> {
  const jobs = await seedPublishedJobs(env.pool, n, env.history);
  await resetStream(env.jsm, env.config());
  const last = await prePublish(env.js, jobs);
  await checkpoint(env.pool);
  return last;
}

/** Generous: 200 envelopes/s would be a broken run, not a slow one. */
export const timeoutFor = (n: number) => 60_000 + n * 5;

/** A consumer in this process: started on the backlog, its backends connected as `applicationName`. */
async function inProcess(
  env: BenchEnv,
  n: number,
  applicationName: string,
  timed: TimedHooks | undefined,
  start: () => Promise<{ stop(): Promise<unknown> }>,
): Promise<Pick<ThroughputResult, 'envelopes' | 'seconds' | 'perSecond' | 'cpu'>> {
  const last = await prepare(env, n);
  await timed?.started();
  const split = startCpuSplit(env);
  const started = performance.now();
  const consumer = await start();
  let seconds: number;
  let cpu: CpuSplit;
  try {
    await waitAllAcked(env.jsm, last, timeoutFor(n));
    seconds = (performance.now() - started) / 1000;
    cpu = await split.end(applicationName, n);
    await timed?.ended();
  } finally {
    await consumer.stop();
  }
  await checkAllDone(env.pool, n, env.history);
  return { envelopes: n, seconds, perSecond: n / seconds, cpu };
}

/** The inbox's ceiling of bench/ceiling.ts. */
export async function measureCeiling(
  env: BenchEnv,
  n: number,
  opts: { name?: string; timed?: TimedHooks | undefined } = {},
): Promise<ThroughputResult> {
  const pool = benchPool(env.databaseUrl, 'bench-ceiling', 10);
  try {
    const run = await inProcess(env, n, 'bench-ceiling', opts.timed, () => startCeiling(pool, env.js));
    const { batchSize, inFlight: concurrency } = CEILING;
    return { name: opts.name ?? CEILING_NAME, ...run, batchSize, concurrency, logLevel: null };
  } finally {
    await pool.end();
  }
}

/**
 * The daemon in this process: `startDaemon` with the configuration's defaults at `logLevel`, the
 * inbox loop only (the other loops have nothing to do on the bench's tables), logging JSON lines
 * to a file through the stream `recognition-core start` logs to stdout with, so the cost of
 * logging is measured as the daemon pays it.
 */
export async function startInboxDaemon(
  env: BenchEnv,
  logLevel: LogLevel,
  afterInboxCommit?: DaemonOptions['afterInboxCommit'],
  overrides: Record<string, string> = {},
  /** The HTTP endpoints too, on this port (bench/http.ts). */
  httpPort?: number,
): Promise<{ config: Config; stop(): Promise<void> }> {
  const http = httpPort !== undefined;
  const config = env.config({
    LOG_LEVEL: logLevel,
    ...overrides,
    ...(http ? { HTTP_PORT: String(httpPort), HTTP_HOST: '127.0.0.1' } : {}),
  });
  const dir = mkdtempSync(join(tmpdir(), 'bench-log-'));
  const dest = logDestination(join(dir, 'daemon.log'));
  const close = () => {
    dest.end();
    rmSync(dir, { recursive: true, force: true });
  };
  const daemon = await startDaemon({
    config,
    logger: createLogger({ level: config.LOG_LEVEL, destination: dest }),
    loops: { inbox: true, watchdog: false, publisher: false, deadLetters: false, http },
    afterInboxCommit,
  }).catch((err: unknown) => {
    close();
    throw err;
  });
  return { config, stop: () => daemon.stop().finally(close) };
}

/** The daemon's inbox in this process ({@link startInboxDaemon}), end to end. */
export async function measureInbox(
  env: BenchEnv,
  opts: {
    name: string;
    logLevel: LogLevel;
    timed?: TimedHooks | undefined;
    overrides?: Record<string, string>;
    httpPort?: number;
  },
  n: number,
): Promise<ThroughputResult> {
  const config = env.config({ LOG_LEVEL: opts.logLevel, ...opts.overrides });
  // The daemon's pool connects as `recognition-core` (src/db/database.ts).
  const run = await inProcess(env, n, 'recognition-core', opts.timed, () =>
    startInboxDaemon(env, opts.logLevel, undefined, opts.overrides, opts.httpPort),
  );
  const { INBOX_BATCH_SIZE: batchSize, INBOX_CONCURRENCY: concurrency } = config;
  return { name: opts.name, ...run, batchSize, concurrency, logLevel: opts.logLevel };
}

/**
 * What a run left in the tables, with every per-job value replaced by whether it is the job's
 * own (its msg id, its object key, its current file) and every time by whether it is set: a
 * canonical JSON of each distinct shape and how many jobs have it. Two consumers that did the
 * same rows for the same envelopes leave the same shapes.
 */
export async function rowShapes(pool: pg.Pool): Promise<string> {
  const { rows } = await pool.query<{ shape: unknown; n: string }>(`
    SELECT jsonb_build_object(
             'job', to_jsonb(j) - 'id' - 'file_id' - 'created_at' - 'updated_at' - 'published_at'
                    - 'reply_deadline' - 'started_at' - 'finished_at' - 'result_s3_object_id' - 'result_msg_id',
             'job_times', jsonb_build_object('started', j.started_at IS NOT NULL, 'finished', j.finished_at IS NOT NULL),
             'own_msg_id', j.result_msg_id = 'result:' || j.id || ':1',
             'object', to_jsonb(o) - 'id' - 'key' - 'created_at',
             'own_object', o.key = 'results/' || j.file_id || '/' || j.id || '/result.json',
             'file', to_jsonb(f) - 'id' - 's3_object_id' - 'created_at' - 'updated_at' - 'current_recognition_job_id',
             'file_current', f.current_recognition_job_id = j.id,
             'transitions', (SELECT jsonb_agg(to_jsonb(t) - 'id' - 'job_id' - 'at' - 'msg_id'
                                                || jsonb_build_object('own_msg_id', t.msg_id = j.result_msg_id)
                                              ORDER BY t.id)
                             FROM recognition_job_transition t WHERE t.job_id = j.id)
           ) AS shape, count(*) AS n
    FROM recognition_job j
    JOIN stored_file f ON f.id = j.file_id
    LEFT JOIN s3_object o ON o.id = j.result_s3_object_id
    GROUP BY 1 ORDER BY 1`);
  return JSON.stringify(rows.map((r) => [r.shape, Number(r.n)]));
}

/** RSS sampling period of a daemon process. */
export const RSS_EVERY_MS = 100;

/** What a process measurement starts: the daemon as operators run it, or the ceiling's consumer. */
export type ProcessKind = 'daemon' | 'ceiling';

/**
 * A consumer started as a new process after `n` results are already in the stream: the daemon as
 * operators run it (`recognition-core start`: every loop, defaults, `logLevel`, its log on a
 * file), or the ceiling's consumer (bench/ceilingProcess.ts), which pays the same start. Timed
 * from its first delivery (`core-inbox` reports a delivered message; polled every 5 ms) to its
 * last ack: start-up, JIT and the first batches are in it. Stopped with SIGTERM after, which must
 * exit 0.
 */
export async function measureProcess(
  env: BenchEnv,
  opts: { name: string; kind: ProcessKind; logLevel: LogLevel },
  n: number,
): Promise<ThroughputResult> {
  const last = await prepare(env, n);
  const config = env.config({ LOG_LEVEL: opts.logLevel });
  const daemon = opts.kind === 'daemon';
  const dir = mkdtempSync(join(tmpdir(), 'bench-daemon-'));
  const out = openSync(join(dir, 'daemon.log'), 'w');
  const script = daemon ? '../../bin/recognition-core.js' : './ceilingProcess.js';
  const args = [fileURLToPath(new URL(script, import.meta.url)), ...(daemon ? ['start'] : [])];
  const split = startCpuSplit(env);
  const spawned = performance.now();
  // Tracing off, as shipped, whatever OTEL_* variables the bench was started with.
  const inherited = Object.entries(process.env).filter(([k]) => !k.startsWith('OTEL_'));
  const child = spawn(process.execPath, args, {
    env: {
      ...Object.fromEntries(inherited),
      DATABASE_URL: config.DATABASE_URL,
      NATS_URL: config.NATS_URL,
      HTTP_PORT: '0',
      HTTP_HOST: '127.0.0.1',
      LOG_LEVEL: opts.logLevel,
      LOG_PRETTY: 'false',
    },
    stdio: ['ignore', out, 'inherit'],
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let maxRss = 0;
  const sampler = setInterval(() => {
    maxRss = Math.max(maxRss, (child.pid && rssBytes(child.pid)) || 0);
  }, RSS_EVERY_MS);
  try {
    const deadline = Date.now() + 60_000;
    let firstDelivery: number | undefined;
    while (firstDelivery === undefined) {
      const info = await env.jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER);
      if (info.delivered.stream_seq > 0) firstDelivery = performance.now();
      else if (Date.now() > deadline)
        throw new Error(`the ${opts.kind} process delivered nothing within 60 s`);
      else await new Promise((r) => setTimeout(r, 5));
    }
    await waitAllAcked(env.jsm, last, timeoutFor(n));
    const seconds = (performance.now() - firstDelivery) / 1000;
    // The daemon's pool connects as `recognition-core` (src/db/database.ts).
    const cpu = await split.end(daemon ? 'recognition-core' : CEILING_PROCESS_APPLICATION, n);
    // This process only polled: the node figure is the child's whole life so far.
    const childMs = child.pid === undefined ? null : processCpuMs(child.pid);
    cpu.nodeUs = childMs === null ? null : (childMs * 1000) / n;
    child.kill('SIGTERM');
    const code = await exited;
    if (code !== 0) throw new Error(`the ${opts.kind} process exited with ${code}`);
    await checkAllDone(env.pool, n);
    return {
      name: opts.name,
      envelopes: n,
      seconds,
      perSecond: n / seconds,
      batchSize: daemon ? config.INBOX_BATCH_SIZE : CEILING.batchSize,
      concurrency: daemon ? config.INBOX_CONCURRENCY : CEILING.inFlight,
      logLevel: daemon ? opts.logLevel : null,
      cpu,
      startupSeconds: (firstDelivery - spawned) / 1000,
      maxRssBytes: maxRss,
    };
  } finally {
    clearInterval(sampler);
    if (child.exitCode === null) child.kill('SIGKILL');
    closeSync(out);
    rmSync(dir, { recursive: true, force: true });
  }
}
