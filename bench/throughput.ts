/**
 * Throughput end to end: N results already in the stream for N published jobs, timed from the
 * consumer's start (a process: its first delivery) until JetStream reports the last ack. Every run
 * starts from the same state and ends with a check of every row (bench/README.md, "Inbox").
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
import type { BenchEnv, CpuSplit } from './env.js';
import { checkAllDone, prePublish, seedPublishedJobs } from '../workshop/benchFixtures.js';
import { processCpuMs, rssBytes } from '../workshop/processStats.js';

/**
 * One throughput measurement: `cpu` per envelope of the consumer's process, its backends and
 * nats-server; `roundsPerSecond` every round's rate (this is the median one); a process's start to
 * its first delivery (not in `seconds`) and its largest RSS, sampled every {@link RSS_EVERY_MS}.
 */
export type ThroughputResult = Record<
  'envelopes' | 'seconds' | 'perSecond' | 'batchSize' | 'concurrency',
  number
> & {
  name: string;
  logLevel: LogLevel | null;
  cpu: CpuSplit;
  roundsPerSecond?: number[];
  startupSeconds?: number;
  maxRssBytes?: number;
};

/** Runs taking turns over the rounds, each reported as its median round (bench/run.ts). */
export type Compared = (runs: Array<() => Promise<ThroughputResult>>) => Promise<ThroughputResult[]>;

/** Called when a run's clock starts and when it stops (profiles, HTTP clients, retention run between). */
export type TimedHooks = Record<'started' | 'ended', () => Promise<void>>;

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

const ceilingShape = { batchSize: CEILING.batchSize, concurrency: CEILING.inFlight, logLevel: null };
const daemonShape = (c: Config, l: LogLevel) => ({
  batchSize: c.INBOX_BATCH_SIZE,
  concurrency: c.INBOX_CONCURRENCY,
  logLevel: l,
});

/** What a drain starts: `stop` (once) ends it; a process also tells its CPU so far. */
type Consumer = { stop(): Promise<unknown>; cpuMs?: () => number | null };

/**
 * Drain `n` results with the consumer `start` starts, its backends connected as `applicationName`,
 * timed from its start or (`fromFirstDelivery`, a process) from its first delivery to the last ack.
 */
async function drain(
  env: BenchEnv,
  n: number,
  o: { applicationName: string; timed?: TimedHooks | undefined; fromFirstDelivery?: boolean },
  start: () => Promise<Consumer>,
) {
  const last = await prepare(env, n);
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
    return { envelopes: n, seconds, perSecond: n / seconds, cpu, ...startup };
  } finally {
    await stop();
  }
}

/** The inbox's ceiling (bench/ceiling.ts) in this process. */
export async function measureCeiling(
  env: BenchEnv,
  n: number,
  opts: { name?: string; timed?: TimedHooks | undefined } = {},
): Promise<ThroughputResult> {
  const o = { applicationName: 'bench-ceiling', timed: opts.timed };
  const run = await drain(env, n, o, () => startCeiling(env.databaseUrl, env.js));
  return { name: opts.name ?? CEILING_NAME, ...run, ...ceilingShape };
}

/** How the daemon runs in this process: its log level, and the rest a section needs. */
export interface InboxOptions {
  logLevel: LogLevel;
  afterCommit?: DaemonOptions['afterInboxCommit'];
  overrides?: Record<string, string>;
  /** The HTTP endpoints too, on this port (bench/http.ts). */
  httpPort?: number | undefined;
}

/**
 * The daemon in this process: `startDaemon`, the inbox loop only (the others have nothing to do on
 * the bench's tables), its JSON lines in a file through the stream `recognition-core start` logs
 * to stdout with, so logging costs what it costs the daemon.
 */
export async function startInboxDaemon(
  env: BenchEnv,
  o: InboxOptions,
): Promise<{ config: Config; stop(): Promise<void> }> {
  const http = o.httpPort !== undefined;
  const config = env.config({
    LOG_LEVEL: o.logLevel,
    ...o.overrides,
    ...(http ? { HTTP_PORT: String(o.httpPort), HTTP_HOST: '127.0.0.1' } : {}),
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
    afterInboxCommit: o.afterCommit,
  }).catch((err: unknown) => {
    close();
    throw err;
  });
  return { config, stop: () => daemon.stop().finally(close) };
}

/** The daemon's inbox in this process ({@link startInboxDaemon}), end to end. */
export async function measureInbox(
  env: BenchEnv,
  opts: InboxOptions & { name: string; timed?: TimedHooks | undefined },
  n: number,
): Promise<ThroughputResult> {
  const config = env.config({ LOG_LEVEL: opts.logLevel, ...opts.overrides });
  // The daemon's pool connects as `recognition-core` (src/db/database.ts).
  const o = { applicationName: 'recognition-core', timed: opts.timed };
  const run = await drain(env, n, o, () => startInboxDaemon(env, opts));
  return { name: opts.name, ...run, ...daemonShape(config, opts.logLevel) };
}

/**
 * What a run left in the tables, each per-job value replaced by whether it is the job's own and each
 * time by whether it is set: each distinct shape and its count, as JSON. Two consumers that did the
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

/** RSS sampling period of a consumer process. */
export const RSS_EVERY_MS = 100;
export type ProcessKind = 'daemon' | 'ceiling';

/**
 * A consumer started as a new process: the daemon as operators run it (`recognition-core start`:
 * every loop, the defaults, `logLevel`, its log on a file, tracing off as shipped) or the ceiling
 * (bench/ceiling.ts), its RSS sampled. `stop` (once; again, the same) ends it and returns its exit
 * code and its log.
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
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      exitedEarly = !stopping;
      resolve(code);
    }),
  );
  const sampler = setInterval(() => {
    maxRss = Math.max(maxRss, (child.pid && rssBytes(child.pid)) || 0);
  }, RSS_EVERY_MS);
  let stopped: Promise<{ code: number | null; log: string }> | undefined;
  return {
    config,
    maxRss: () => maxRss,
    exitedEarly: () => exitedEarly,
    cpuMs: () => (child.pid === undefined ? null : processCpuMs(child.pid)),
    stop: () =>
      (stopped ??= (async () => {
        stopping = !exitedEarly;
        clearInterval(sampler);
        if (child.exitCode === null) child.kill('SIGTERM');
        const code = await exited;
        closeSync(out);
        const log = readFileSync(join(dir, 'daemon.log'), 'utf8');
        rmSync(dir, { recursive: true, force: true });
        return { code, log };
      })()),
  };
}

/**
 * A consumer process ({@link startProcess}) started after `n` results are in the stream, timed from
 * its first delivery (start-up, JIT and the first batches are in it), stopped with SIGTERM after,
 * which must exit 0.
 */
export async function measureProcess(
  env: BenchEnv,
  opts: { name: string; kind: ProcessKind; logLevel: LogLevel },
  n: number,
): Promise<ThroughputResult> {
  const daemon = opts.kind === 'daemon';
  const applicationName = daemon ? 'recognition-core' : CEILING_PROCESS_APPLICATION;
  let child: ReturnType<typeof startProcess> | undefined;
  const run = await drain(env, n, { applicationName, fromFirstDelivery: true }, () => {
    const c = (child = startProcess(env, opts.kind, opts.logLevel));
    const stop = async () => {
      const { code } = await c.stop();
      if (code !== 0) throw new Error(`the ${opts.kind} process exited with ${code}`);
    };
    return Promise.resolve({ stop, cpuMs: c.cpuMs });
  });
  const shape = daemon ? daemonShape(child!.config, opts.logLevel) : ceilingShape;
  return { name: opts.name, ...run, ...shape, maxRssBytes: child!.maxRss() };
}
