/**
 * Throughput, end to end: N published jobs, N result envelopes already in the stream; the clock
 * starts when the consumer is started and stops when JetStream reports every envelope acked
 * (`core-inbox`'s ack floor reaches the last sequence). Every run starts from the same state
 * (tables truncated and reseeded, stream recreated, a checkpoint taken) and ends with a check that
 * every job is `done` with its object, transition and file — a fast wrong run fails the bench.
 *
 * The daemon runs in this process through `startDaemon` (inbox loop only, as in production minus
 * the idle watchdog/publisher/HTTP), logging JSON lines to a temporary file at the given level;
 * or as its own process (`recognition-core start`, every loop) started on a backlog, timed from
 * its first delivery to its last ack, its RSS sampled.
 */
import { spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import pg from 'pg';
import { startDaemon } from '../src/daemon/daemon.js';
import { createLogger } from '../src/logger.js';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../src/nats/subjects.js';
import { CEILING, CEILING_NAME, startCeiling } from './ceiling.js';
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
import { backendPids, findPid, processCpuMs, startCpuSplit, type CpuSplit } from './processCpu.js';

/** One throughput measurement. */
export interface ThroughputResult {
  name: string;
  envelopes: number;
  seconds: number;
  perSecond: number;
  batchSize: number;
  concurrency: number;
  logLevel: string | null;
  /** Bytes the daemon logged during the run (null for the ceiling). */
  logBytes: number | null;
  /** CPU per envelope of this process, the consumer's PostgreSQL backends and nats-server. */
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

/** The inbox's ceiling of bench/ceiling.ts. */
export async function measureCeiling(
  env: BenchEnv,
  n: number,
  opts: { name?: string; timed?: TimedHooks } = {},
): Promise<ThroughputResult> {
  const last = await prepare(env, n);
  const pool = new pg.Pool({ connectionString: env.databaseUrl, max: 10, application_name: 'bench-ceiling' });
  pool.on('connect', (client) => client.on('error', () => undefined));
  try {
    await opts.timed?.started();
    const split = startCpuSplit(findPid(env.nats.configFile));
    const started = performance.now();
    const ceiling = await startCeiling({ pool, js: env.js, ...CEILING });
    await waitAllAcked(env.jsm, last, timeoutFor(n));
    const seconds = (performance.now() - started) / 1000;
    const cpu = split.end(await backendPids(env.pool, 'bench-ceiling'), n);
    await opts.timed?.ended();
    await ceiling.stop();
    await checkAllDone(env.pool, n);
    return {
      name: opts.name ?? CEILING_NAME,
      envelopes: n,
      seconds,
      perSecond: n / seconds,
      batchSize: CEILING.batchSize,
      concurrency: CEILING.inFlight,
      logLevel: null,
      logBytes: null,
      cpu,
    };
  } finally {
    await pool.end();
  }
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
  const totals = await pool.query<{ objects: string; transitions: string; quarantined: string }>(`
    SELECT (SELECT count(*) FROM s3_object) AS objects,
           (SELECT count(*) FROM recognition_job_transition) AS transitions,
           (SELECT count(*) FROM inbox_quarantine) AS quarantined`);
  return JSON.stringify({ shapes: rows.map((r) => [r.shape, Number(r.n)]), totals: totals.rows[0] });
}

/** RSS sampling period of a daemon process. */
export const RSS_EVERY_MS = 100;

function rssBytes(pid: number): number | null {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

/**
 * The daemon as operators run it: `recognition-core start` (every loop, defaults, `logLevel`,
 * its log on a file) started as a new process after `n` results are already in the stream.
 * Timed from its first delivery (`core-inbox` reports a delivered message; polled every 5 ms) to
 * its last ack: start-up, JIT and the first batches are in it. Stopped with SIGTERM after.
 */
export async function measureDaemonProcess(
  env: BenchEnv,
  opts: { name: string; logLevel: 'info' | 'warn'; env?: Record<string, string> },
  n: number,
): Promise<ThroughputResult> {
  const last = await prepare(env, n);
  const config = env.config({ LOG_LEVEL: opts.logLevel });
  const dir = mkdtempSync(join(tmpdir(), 'bench-daemon-'));
  const logFile = join(dir, 'daemon.log');
  const out = openSync(logFile, 'w');
  const bin = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bin', 'recognition-core.js');
  const split = startCpuSplit(findPid(env.nats.configFile));
  const spawned = performance.now();
  const child = spawn(process.execPath, [bin, 'start'], {
    env: {
      ...process.env,
      DATABASE_URL: config.DATABASE_URL,
      NATS_URL: config.NATS_URL,
      HTTP_PORT: '0',
      HTTP_HOST: '127.0.0.1',
      LOG_LEVEL: opts.logLevel,
      LOG_PRETTY: 'false',
      ...opts.env,
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
      else if (Date.now() > deadline) throw new Error('the daemon process delivered nothing within 60 s');
      else await new Promise((r) => setTimeout(r, 5));
    }
    await waitAllAcked(env.jsm, last, timeoutFor(n));
    const seconds = (performance.now() - firstDelivery) / 1000;
    const pids = await backendPids(env.pool, 'recognition-core');
    const cpu = split.end(pids, n);
    // This process only polled: the node figure is the daemon process's whole life so far.
    const daemonMs = child.pid === undefined ? null : processCpuMs(child.pid);
    cpu.nodeUs = daemonMs === null ? null : (daemonMs * 1000) / n;
    child.kill('SIGTERM');
    const code = await exited;
    if (code !== 0) throw new Error(`the daemon process exited with ${code}`);
    await checkAllDone(env.pool, n);
    return {
      name: opts.name,
      envelopes: n,
      seconds,
      perSecond: n / seconds,
      batchSize: config.INBOX_BATCH_SIZE,
      concurrency: config.INBOX_CONCURRENCY,
      logLevel: opts.logLevel,
      logBytes: statSync(logFile).size,
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

/** Options of one daemon run; unset ones are the configuration's defaults. */
export interface InboxRunOptions {
  name: string;
  logLevel: 'info' | 'warn';
  timed?: TimedHooks;
}

/** The daemon's inbox, end to end. */
export async function measureInbox(
  env: BenchEnv,
  run: InboxRunOptions,
  n: number,
): Promise<ThroughputResult> {
  const last = await prepare(env, n);
  const config = env.config({ LOG_LEVEL: run.logLevel });
  const dir = mkdtempSync(join(tmpdir(), 'bench-log-'));
  // A real file, written synchronously like pino's default stdout: the cost of logging is measured.
  const dest = pino.destination({ dest: join(dir, 'daemon.log'), sync: true });
  const logger = createLogger({ level: config.LOG_LEVEL, destination: dest });
  try {
    await run.timed?.started();
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
      await run.timed?.ended();
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
