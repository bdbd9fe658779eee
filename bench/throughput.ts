/**
 * Throughput end to end: N results in the stream for N published jobs, timed from the consumer's
 * start (a process: its first delivery) until JetStream reports the last ack; every run starts from
 * the same state and ends with a check of every row (bench/README.md, "Inbox").
 */
import { spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import type { Config } from '../src/config.js';
import { startDaemon, type DaemonOptions } from '../src/daemon/daemon.js';
import { createLogger, logDestination } from '../src/logger.js';
import { CEILING, CEILING_NAME, CEILING_PROCESS_APPLICATION, startCeiling } from './ceiling.js';
import { checkpoint, firstDelivery, resetStream, startCpuSplit, waitAllAcked } from './env.js';
import type { BenchEnv } from './env.js';
import { checkAllDone, prePublish, seedPublishedJobs } from '../workshop/benchFixtures.js';
import { processCpuMs, rssBytes } from '../workshop/processStats.js';

/**
 * One measurement: `cpu` per envelope, `roundsPerSecond` every round's rate (this is the median
 * one), a process's start to its first delivery (not in `seconds`) and its largest RSS.
 */
export type ThroughputResult = Awaited<ReturnType<typeof drain>> & { roundsPerSecond?: number[] };
/** Runs taking turns over the rounds, each reported as its median round (bench/run.ts). */
export type Compared = (runs: Array<() => Promise<ThroughputResult>>) => Promise<ThroughputResult[]>;
/** Called when a run's clock starts and when it stops (profiles, HTTP clients, retention run between). */
export type TimedHooks = Record<'started' | 'ended', () => Promise<void>>;
/** `warn` logs nothing per envelope, `info` one line each. */
export type LogLevel = 'info' | 'warn';

/** Generous: 200 envelopes/s would be a broken run, not a slow one. */
export const timeoutFor = (n: number) => 60_000 + n * 5;

/** What a run is: its name, its batching, its log level (null for the ceiling). */
type Shape = { name: string; batchSize: number; concurrency: number; logLevel: LogLevel | null };
const ceilingShape = (name: string) =>
  ({ name, batchSize: CEILING.batchSize, concurrency: CEILING.inFlight, logLevel: null }) satisfies Shape;
const daemonShape = (name: string, c: Config, logLevel: LogLevel) =>
  ({ name, batchSize: c.INBOX_BATCH_SIZE, concurrency: c.INBOX_CONCURRENCY, logLevel }) satisfies Shape;

/** What a drain starts: `stop` ends it; a process also tells its CPU so far and its largest RSS. */
type Consumer = { stop(): Promise<unknown>; cpuMs?: () => number | null; maxRss?: () => number };

/**
 * Seed `n` jobs, publish their results, checkpoint; then drain them with what `start` starts, its
 * backends named `applicationName`, timed from its start or (`fromFirstDelivery`) its first delivery.
 */
async function drain(
  env: BenchEnv,
  n: number,
  o: { shape: Shape; applicationName: string; timed?: TimedHooks | undefined; fromFirstDelivery?: boolean },
  start: () => Promise<Consumer>,
) {
  const jobs = await seedPublishedJobs(env.pool, n, env.history);
  await resetStream(env.jsm, env.config());
  const last = await prePublish(env.js, jobs);
  await checkpoint(env.pool);
  await o.timed?.started();
  const split = startCpuSplit(env);
  const started = performance.now();
  const consumer = await start();
  let stopped: Promise<unknown> | undefined;
  const stop = () => (stopped ??= consumer.stop());
  try {
    const from = o.fromFirstDelivery
      ? await firstDelivery(env.jsm, `process (${o.applicationName})`)
      : started;
    await waitAllAcked(env.jsm, last, timeoutFor(n));
    const seconds = (performance.now() - from) / 1000;
    const cpu = await split.end(o.applicationName, n);
    await o.timed?.ended();
    // A process: this one only polled, the node figure is the process's whole life so far.
    const processMs = consumer.cpuMs?.();
    if (processMs !== undefined) cpu.nodeUs = processMs === null ? null : (processMs * 1000) / n;
    await stop();
    await checkAllDone(env.pool, n, env.history);
    const startup = o.fromFirstDelivery ? { startupSeconds: (from - started) / 1000 } : {};
    const rss = consumer.maxRss ? { maxRssBytes: consumer.maxRss() } : {};
    return { ...o.shape, envelopes: n, seconds, perSecond: n / seconds, cpu, ...startup, ...rss };
  } finally {
    await stop();
  }
}

/** The inbox's ceiling (bench/ceiling.ts) in this process. */
export function measureCeiling(env: BenchEnv, n: number, o: { name?: string; timed?: TimedHooks } = {}) {
  const run = {
    shape: ceilingShape(o.name ?? CEILING_NAME),
    applicationName: 'bench-ceiling',
    timed: o.timed,
  };
  return drain(env, n, run, () => startCeiling(env.databaseUrl, env.js));
}

/** How the daemon runs in this process; `httpPort` turns its HTTP endpoints on (bench/http.ts). */
export type InboxOptions = { logLevel: LogLevel; afterCommit?: DaemonOptions['afterInboxCommit'] } & {
  overrides?: Record<string, string>;
  httpPort?: number | undefined;
};

/**
 * The daemon in this process: `startDaemon`, the inbox loop only, its JSON lines in a file through
 * the stream `recognition-core start` logs to stdout with, so logging costs what it costs there.
 */
export async function startInboxDaemon(env: BenchEnv, o: InboxOptions) {
  const http = o.httpPort !== undefined;
  const listen = http ? { HTTP_PORT: String(o.httpPort), HTTP_HOST: '127.0.0.1' } : {};
  const config = env.config({ LOG_LEVEL: o.logLevel, ...o.overrides, ...listen });
  const dir = mkdtempSync(join(tmpdir(), 'bench-log-'));
  const dest = logDestination(join(dir, 'daemon.log'));
  const close = () => (dest.end(), rmSync(dir, { recursive: true, force: true }));
  const daemon = await startDaemon({
    config,
    logger: createLogger({ level: config.LOG_LEVEL, destination: dest }),
    loops: { inbox: true, watchdog: false, publisher: false, deadLetters: false, http },
    afterInboxCommit: o.afterCommit,
  }).catch((err: unknown) => {
    close();
    throw err;
  });
  return { config, stop: () => daemon.stop().finally(close) };
}

/** The daemon's inbox in this process ({@link startInboxDaemon}), end to end. */
export function measureInbox(
  env: BenchEnv,
  o: InboxOptions & { name: string; timed?: TimedHooks },
  n: number,
) {
  const shape = daemonShape(o.name, env.config({ LOG_LEVEL: o.logLevel, ...o.overrides }), o.logLevel);
  // The daemon's pool connects as `recognition-core` (src/db/database.ts).
  const run = { shape, applicationName: 'recognition-core', timed: o.timed };
  return drain(env, n, run, () => startInboxDaemon(env, o));
}

/** A run of the batched inbox at `LOG_LEVEL=warn` named `inbox, batched, LOG_LEVEL=warn, ${of}`. */
export const warnInbox =
  (env: BenchEnv, n: number, of: string, o: Omit<InboxOptions, 'logLevel'> & { timed?: TimedHooks } = {}) =>
  () =>
    measureInbox(env, { name: `inbox, batched, LOG_LEVEL=warn, ${of}`, logLevel: 'warn', ...o }, n);

/**
 * What a run left in the tables, each per-job value replaced by whether it is the job's own and each
 * time by whether it is set: each distinct shape and its count, as JSON.
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

export type ProcessKind = 'daemon' | 'ceiling';

/**
 * A consumer started as a new process, its RSS sampled every 100 ms: the daemon as operators run it
 * (`recognition-core start`, `logLevel`, its log on a file, no `OTEL_*`) or bench/ceiling.ts.
 * `stop` (once) ends it and returns its exit code and its log.
 */
export function startProcess(env: BenchEnv, kind: ProcessKind, logLevel: LogLevel) {
  const config = env.config({ LOG_LEVEL: logLevel });
  const dir = mkdtempSync(join(tmpdir(), 'bench-daemon-'));
  const out = openSync(join(dir, 'daemon.log'), 'w');
  const script = kind === 'daemon' ? '../../bin/recognition-core.js' : './ceiling.js';
  const args = [fileURLToPath(new URL(script, import.meta.url)), ...(kind === 'daemon' ? ['start'] : [])];
  const inherited = Object.entries(process.env).filter(([k]) => !k.startsWith('OTEL_'));
  const { DATABASE_URL, NATS_URL } = config;
  const connections = { DATABASE_URL, NATS_URL, HTTP_PORT: '0', HTTP_HOST: '127.0.0.1', LOG_PRETTY: 'false' };
  const child = spawn(process.execPath, args, {
    env: { ...Object.fromEntries(inherited), ...connections, LOG_LEVEL: logLevel },
    stdio: ['ignore', out, 'inherit'],
  });
  let [maxRss, stopping, exitedEarly] = [0, false, false];
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  void exited.then(() => (exitedEarly = !stopping));
  const sampler = setInterval(
    () => (maxRss = Math.max(maxRss, (child.pid && rssBytes(child.pid)) || 0)),
    100,
  );
  let stopped: Promise<{ code: number | null; log: string }> | undefined;
  const stop = async () => {
    stopping = !exitedEarly;
    clearInterval(sampler);
    if (child.exitCode === null) child.kill('SIGTERM');
    const code = await exited;
    closeSync(out);
    const log = readFileSync(join(dir, 'daemon.log'), 'utf8');
    rmSync(dir, { recursive: true, force: true });
    return { code, log };
  };
  return {
    maxRss: () => maxRss,
    exitedEarly: () => exitedEarly,
    cpuMs: () => (child.pid === undefined ? null : processCpuMs(child.pid)),
    stop: () => (stopped ??= stop()),
  };
}

/** A consumer process ({@link startProcess}) timed from its first delivery; SIGTERM after must exit 0. */
export async function measureProcess(
  env: BenchEnv,
  o: { name: string; kind: ProcessKind; logLevel: LogLevel },
  n: number,
): Promise<ThroughputResult> {
  const daemon = o.kind === 'daemon';
  const applicationName = daemon ? 'recognition-core' : CEILING_PROCESS_APPLICATION;
  const config = env.config({ LOG_LEVEL: o.logLevel });
  const shape = daemon ? daemonShape(o.name, config, o.logLevel) : ceilingShape(o.name);
  return drain(env, n, { shape, applicationName, fromFirstDelivery: true }, () => {
    const c = startProcess(env, o.kind, o.logLevel);
    const stop = async () => {
      const { code } = await c.stop();
      if (code !== 0) throw new Error(`the ${o.kind} process exited with ${code}`);
    };
    return Promise.resolve({ stop, cpuMs: c.cpuMs, maxRss: c.maxRss });
  });
}
