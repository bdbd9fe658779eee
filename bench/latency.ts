/**
 * Latency from publish to commit at a fixed rate (bench/README.md, "Latency"): a child process (this
 * module, forked) publishes one result per job at `rate`/s and records each publish's time; the
 * consumer in this process records each envelope's commit through a commit hook, both on the
 * machine's monotonic clock. The first {@link WARMUP_SECONDS} are applied but not counted.
 */
import { fork } from 'node:child_process';
import { constants, PerformanceObserver } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { connect } from '@nats-io/transport-node';
import { RESULT_SUBJECT } from '../src/nats/subjects.js';
import { startCeiling } from './ceiling.js';
import { checkpoint, percentile, resetStream, waitAllAcked, type BenchEnv } from './env.js';
import { checkAllDone, doneEnvelope, resultHeaders, seedPublishedJobs } from '../workshop/benchFixtures.js';
import type { BenchJob } from '../workshop/benchFixtures.js';
import { startInboxDaemon, timeoutFor } from './throughput.js';

/** Who consumes in a latency measurement: the daemon's inbox, or the ceiling's consumer. */
export type LatencyConsumer = 'daemon' | 'ceiling';

/** Result of one latency measurement. */
export interface LatencyResult {
  consumer: LatencyConsumer;
  rate: number;
  envelopes: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** Worst lag of the publisher behind its schedule (about 0: the rate was held). */
  publisherLagMs: number;
  /** The daemon's log level; null for the ceiling. */
  logLevel: string | null;
  /** The consumer's main thread's collection pauses in the window, ms per second, young and old. */
  gcPauseMsPerSecond: { young: number; old: number };
  /** Old-generation collections in the measured window. */
  oldCollections: number;
}

/** What the publisher is sent, and what it sends back. */
interface PublisherStart {
  natsUrl: string;
  jobs: BenchJob[];
  rate: number;
}
interface Published {
  times: Array<[jobId: string, ms: number]>;
  lagMs: number;
}

/** The machine's monotonic clock, in ms: one clock for every process, which no wall-clock step moves. */
const clockMs = () => Number(process.hrtime.bigint()) / 1e6;

/** Seconds of publishing before the measured window: connections opened, statements prepared, JIT warm. */
const WARMUP_SECONDS = 2;

/** Start `consumer` on `core-inbox`, calling `committed` with each batch's job ids once committed. */
async function startConsumer(
  env: BenchEnv,
  consumer: LatencyConsumer,
  committed: (jobIds: Iterable<string>) => void,
): Promise<{ logLevel: string | null; stop(): Promise<void> }> {
  if (consumer === 'ceiling') {
    return { logLevel: null, ...(await startCeiling(env.databaseUrl, env.js, 'bench-ceiling', committed)) };
  }
  const daemon = await startInboxDaemon(env, {
    logLevel: 'warn',
    afterCommit: (items) =>
      committed(items.flatMap((it) => (it.decoded.ok ? [it.decoded.envelope.job_id] : []))),
  });
  return { logLevel: daemon.config.LOG_LEVEL, stop: () => daemon.stop() };
}

/** Publish results at `rate`/s into `consumer` for `WARMUP_SECONDS + seconds`; publish → commit after the warm-up. */
export async function measureLatency(
  env: BenchEnv,
  rate: number,
  seconds: number,
  consumer: LatencyConsumer = 'daemon',
): Promise<LatencyResult> {
  const warmup = Math.round(rate * WARMUP_SECONDS);
  const n = warmup + Math.max(100, Math.round(rate * seconds));
  const jobs = await seedPublishedJobs(env.pool, n);
  await resetStream(env.jsm, env.config());
  await checkpoint(env.pool);

  const committedAt = new Map<string, number>();
  const running = await startConsumer(env, consumer, (jobIds) => {
    const t = clockMs();
    for (const id of jobIds) committedAt.set(id, t);
  });
  let published: Published;
  const gc = watchCollections();
  // The measured window: from the end of the publisher's warm-up to the last ack.
  const windowStart = performance.now() + WARMUP_SECONDS * 1000;
  let windowEnd = 0;
  try {
    const child = fork(fileURLToPath(import.meta.url), [], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    published = await new Promise<Published>((resolve, reject) => {
      child.once('message', (m) => resolve(m as Published));
      child.once('exit', (code) => {
        if (code !== 0) reject(new Error(`latency publisher exited with ${code}`));
      });
      child.send({ natsUrl: env.nats.url, jobs, rate } satisfies PublisherStart);
    });
    await waitAllAcked(env.jsm, n, timeoutFor(n));
    windowEnd = performance.now();
  } finally {
    gc.stop();
    await running.stop();
  }
  const pauses = gc.between(windowStart, windowEnd);
  await checkAllDone(env.pool, n);
  const latencies = published.times
    .slice(warmup)
    .map(([jobId, t]) => committedAt.get(jobId)! - t)
    .sort((a, b) => a - b);
  if (latencies.some((l) => !Number.isFinite(l))) throw new Error('an envelope has no commit time');
  if (latencies[0]! < 0)
    throw new Error(`an envelope committed ${-latencies[0]!} ms before it was published`);
  return {
    consumer,
    rate,
    envelopes: latencies.length,
    p50Ms: percentile(latencies, 50),
    p99Ms: percentile(latencies, 99),
    maxMs: latencies.at(-1)!,
    publisherLagMs: published.lagMs,
    logLevel: running.logLevel,
    gcPauseMsPerSecond: pauses.perSecond,
    oldCollections: pauses.oldCollections,
  };
}

/** This process's garbage-collection pauses, as V8 reports them, from now until `stop()`. */
function watchCollections() {
  const pauses: Array<{ at: number; ms: number; kind: number | undefined }> = [];
  const observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      const kind = (e as { detail?: { kind?: number } }).detail?.kind;
      pauses.push({ at: e.startTime, ms: e.duration, kind });
    }
  });
  observer.observe({ entryTypes: ['gc'] });
  return {
    stop: () => observer.disconnect(),
    /** Pause ms per second of `[from, to]` (`performance.now()` times), and the old collections. */
    between(from: number, to: number) {
      const seconds = Math.max(to - from, 1) / 1000;
      const inside = pauses.filter((p) => p.at >= from && p.at <= to);
      const young = (p: { kind: number | undefined }) => p.kind === constants.NODE_PERFORMANCE_GC_MINOR;
      const sum = (of: typeof inside) => of.reduce((a, p) => a + p.ms, 0) / seconds;
      return {
        perSecond: { young: sum(inside.filter(young)), old: sum(inside.filter((p) => !young(p))) },
        oldCollections: inside.filter((p) => p.kind === constants.NODE_PERFORMANCE_GC_MAJOR).length,
      };
    },
  };
}

/** The publisher: `jobs` in order at `rate`/s (a 2 ms tick catching up), each time taken before its publish. */
async function publish({ natsUrl, jobs, rate }: PublisherStart): Promise<Published> {
  const nc = await connect({ servers: natsUrl, name: 'bench-latency-publisher' });
  const times: Published['times'] = [];
  const started = clockMs();
  let sent = 0;
  // A publisher that cannot keep the rate makes the measured rate lower than intended: reported.
  let lagMs = 0;
  await new Promise<void>((resolve) => {
    const tick = () => {
      const due = Math.min(jobs.length, Math.floor(((clockMs() - started) / 1000) * rate) + 1);
      if (due - sent > 1) lagMs = Math.max(lagMs, ((due - sent - 1) / rate) * 1000);
      while (sent < due) {
        const job = jobs[sent++]!;
        times.push([job.jobId, clockMs()]);
        nc.publish(RESULT_SUBJECT, doneEnvelope(job), { headers: resultHeaders(job) });
      }
      if (sent >= jobs.length) resolve();
      else setTimeout(tick, 2);
    };
    tick();
  });
  await nc.flush();
  await nc.drain();
  return { times, lagMs };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  process.once('message', (m: PublisherStart) => {
    publish(m).then(
      (r) => process.send!(r, () => process.exit(0)),
      (err: unknown) => {
        process.stderr.write(`latency publisher failed: ${String(err)}\n`);
        process.exit(1);
      },
    );
  });
}
