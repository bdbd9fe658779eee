/**
 * Latency from publish to commit at a fixed rate (bench/README.md, "Latency"): this module, forked,
 * publishes one result per job at `rate`/s; the consumer here records each commit through a hook,
 * both on the machine's monotonic clock. The first {@link WARMUP_SECONDS} are not counted.
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
import { startInboxDaemon, timeoutFor, type InboxOptions } from './throughput.js';

/** One latency round: percentiles, the publisher's worst lag, the consumer's collection pauses. */
export type LatencyResult = Awaited<ReturnType<typeof measureLatency>>;

type Consumer = 'daemon' | 'ceiling';
type PublisherStart = { natsUrl: string; jobs: BenchJob[]; rate: number };
type Published = { times: Array<[jobId: string, ms: number]>; lagMs: number };

/** The machine's monotonic clock, in ms: one clock for every process, which no wall-clock step moves. */
const clockMs = () => Number(process.hrtime.bigint()) / 1e6;

/** Seconds of publishing before the measured window: connections opened, statements prepared, JIT warm. */
const WARMUP_SECONDS = 2;

/**
 * Publish at `rate`/s for `WARMUP_SECONDS + seconds` into `consumer` (the daemon's inbox, or the
 * ceiling's); publish → commit after the warm-up. Every envelope must commit, none before its publish.
 */
export async function measureLatency(env: BenchEnv, rate: number, seconds: number, consumer: Consumer) {
  const warmup = Math.round(rate * WARMUP_SECONDS);
  const n = warmup + Math.max(100, Math.round(rate * seconds));
  const jobs = await seedPublishedJobs(env.pool, n);
  await resetStream(env.jsm, env.config());
  await checkpoint(env.pool);

  const committedAt = new Map<string, number>();
  const committed = (jobIds: Iterable<string>) => {
    const t = clockMs();
    for (const id of jobIds) committedAt.set(id, t);
  };
  const afterCommit: InboxOptions['afterCommit'] = (items) =>
    committed(items.flatMap((it) => (it.decoded.ok ? [it.decoded.envelope.job_id] : [])));
  const daemon =
    consumer === 'daemon' ? await startInboxDaemon(env, { logLevel: 'warn', afterCommit }) : undefined;
  const running = daemon ?? (await startCeiling(env.databaseUrl, env.js, 'bench-ceiling', committed));
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
      child.once('exit', (code) => code !== 0 && reject(new Error(`latency publisher exited with ${code}`)));
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
  const early = `an envelope committed ${-latencies[0]!} ms before it was published`;
  if (latencies[0]! < 0) throw new Error(early);
  const p = (q: number) => percentile(latencies, q);
  const figures = { p50Ms: p(50), p99Ms: p(99), maxMs: latencies.at(-1)!, publisherLagMs: published.lagMs };
  const logLevel = (daemon?.config.LOG_LEVEL ?? null) as string | null;
  return { consumer, rate, envelopes: latencies.length, ...figures, logLevel, ...pauses };
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
    /** Pause ms per second of `[from, to]` (`performance.now()` times), young and old, and the old collections. */
    between(from: number, to: number) {
      const seconds = Math.max(to - from, 1) / 1000;
      const inside = pauses.filter((p) => p.at >= from && p.at <= to);
      const young = (p: { kind: number | undefined }) => p.kind === constants.NODE_PERFORMANCE_GC_MINOR;
      const sum = (of: typeof inside) => of.reduce((a, p) => a + p.ms, 0) / seconds;
      return {
        gcPauseMsPerSecond: { young: sum(inside.filter(young)), old: sum(inside.filter((p) => !young(p))) },
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
  // A publisher that cannot keep the rate makes the measured rate lower than intended: reported.
  let [sent, lagMs] = [0, 0];
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
  const fail = (err: unknown) => (
    process.stderr.write(`latency publisher failed: ${String(err)}\n`),
    process.exit(1)
  );
  const done = (r: Published) => process.send!(r, () => process.exit(0));
  process.once('message', (m: PublisherStart) => void publish(m).then(done, fail));
}
