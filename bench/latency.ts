/**
 * Latency from publish to commit at a fixed publish rate.
 *
 * Method: a child process (bench/latencyPublisher.ts) publishes one result per job at `rate`
 * envelopes/s and records the wall-clock time of each publish call. The inbox runs in this
 * process with the daemon's own wiring (pool, NATS connection, provisioning, `startInbox` with the
 * configuration's batch size and concurrency) plus the inbox's `afterCommit` hook, which records
 * the wall-clock time at which each envelope's transaction committed (the hook runs when the
 * COMMIT has returned, before the acks). Both processes read the same machine clock
 * (`performance.timeOrigin + performance.now()`). Latency = commit − publish, per envelope; the
 * hook fires after the commit's reply is processed, so a busy event loop counts against the daemon.
 * The first WARMUP_SECONDS of publishing are applied but not counted (the pool connects, the
 * statements are prepared, the JIT warms up: a one-off cost, not the steady state).
 *
 * Why not a database trigger with NOTIFY: a notifying transaction takes a global lock at commit,
 * which would serialise the very commits being measured (fsync here costs 1.5–3 ms).
 */
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import pino from 'pino';
import { openDb } from '../src/db/database.js';
import { startInbox } from '../src/daemon/inbox.js';
import { createLogger } from '../src/logger.js';
import { createMetrics } from '../src/metrics.js';
import { connectNats } from '../src/nats/connection.js';
import { provisionStreams } from '../src/nats/provision.js';
import type { PublishMode } from './latencyPublisher.js';
import {
  checkAllDone,
  checkpoint,
  resetStream,
  seedPublishedJobs,
  truncateAll,
  waitAllAcked,
  type BenchEnv,
  type BenchJob,
} from './env.js';

/** Result of one latency measurement. */
export interface LatencyResult {
  rate: number;
  envelopes: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
  /** Worst lag of the publisher behind its schedule (should be ~0: the rate was held). */
  publisherLagMs: number;
  logLevel: string;
  /** How the publisher sent the results (see bench/latencyPublisher.ts). */
  publish: PublishMode;
  /** Set when the rate was given by `--latency-rate` rather than half the batched maximum. */
  fixedRate?: boolean;
}

const wall = () => performance.timeOrigin + performance.now();

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

function publishInChild(
  natsUrl: string,
  jobs: BenchJob[],
  rate: number,
  publish: PublishMode,
): Promise<{ times: Array<[string, number]>; lagMs: number }> {
  const here = dirname(fileURLToPath(import.meta.url));
  const child = fork(join(here, 'latencyPublisher.js'), [], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return new Promise((resolve, reject) => {
    child.once('message', (m) => resolve(m as { times: Array<[string, number]>; lagMs: number }));
    child.once('exit', (code) =>
      code === 0 ? undefined : reject(new Error(`latency publisher exited with ${code}`)),
    );
    child.send({ natsUrl, jobs, rate, publish });
  });
}

/** Seconds of publishing before the measured window: connections opened, statements prepared, JIT warm. */
const WARMUP_SECONDS = 2;

/**
 * Publish results at `rate`/s into the running inbox for `WARMUP_SECONDS + seconds`; percentiles
 * of publish → commit over the envelopes published after the warm-up.
 */
export async function measureLatency(
  env: BenchEnv,
  rate: number,
  seconds: number,
  logLevel: 'info' | 'warn',
  publish: PublishMode,
  overrides: Record<string, string> = {},
): Promise<LatencyResult> {
  const warmup = Math.round(rate * WARMUP_SECONDS);
  const n = warmup + Math.max(100, Math.round(rate * seconds));
  await truncateAll(env.pool);
  const jobs = await seedPublishedJobs(env.pool, n);
  const cfg = env.config({ LOG_LEVEL: logLevel, ...overrides });
  await resetStream(env.jsm, cfg);
  await checkpoint(env.pool);

  const dir = mkdtempSync(join(tmpdir(), 'bench-log-'));
  const dest = pino.destination({ dest: join(dir, 'daemon.log'), sync: true });
  const logger = createLogger({ level: cfg.LOG_LEVEL, destination: dest });
  // The daemon's wiring (src/daemon/daemon.ts, steps 1–3), with the inbox's afterCommit hook.
  const db = openDb(cfg.DATABASE_URL, { max: cfg.DB_POOL_SIZE });
  const nats = await connectNats(cfg, logger);
  const committedAt = new Map<string, number>();
  // For the dump only (not recorded otherwise: it would be work inside the measured process):
  // when each envelope's batch transaction began, and that batch's size.
  const dump = process.env['BENCH_LATENCY_DUMP'];
  const batchStart = new Map<string, [number, number]>();
  try {
    const jsm = await jetstreamManager(nats.nc);
    await provisionStreams(jsm, {
      duplicateWindowMs: cfg.NATS_DUPLICATE_WINDOW_MS,
      replicas: cfg.NATS_STREAM_REPLICAS,
      ackWaitMs: cfg.INBOX_ACK_WAIT_MS,
      maxAckPending: cfg.INBOX_MAX_ACK_PENDING,
    });
    const inbox = await startInbox({
      db: db.db,
      pool: db.pool,
      js: jetstream(nats.nc),
      logger,
      metrics: createMetrics({}, { defaultMetrics: false }),
      batchSize: cfg.INBOX_BATCH_SIZE,
      concurrency: cfg.INBOX_CONCURRENCY,
      lingerMs: cfg.INBOX_LINGER_MS,
      maxEnvelopeBytes: cfg.MAX_ENVELOPE_BYTES,
      ackWaitMs: cfg.INBOX_ACK_WAIT_MS,
      beforeBatch: dump
        ? (items) => {
            const t = wall();
            for (const it of items)
              if (it.decoded.ok) batchStart.set(it.decoded.envelope.job_id, [t, items.length]);
          }
        : undefined,
      afterCommit: (items) => {
        const t = wall();
        for (const it of items) if (it.decoded.ok) committedAt.set(it.decoded.envelope.job_id, t);
      },
    });
    let published: { times: Array<[string, number]>; lagMs: number };
    try {
      published = await publishInChild(env.natsUrl, jobs, rate, publish);
      await waitAllAcked(env.jsm, n, 60_000 + n * 5);
    } finally {
      await inbox.stop();
    }
    await checkAllDone(env.pool, n);
    const latencies = published.times
      .slice(warmup)
      .map(([jobId, t]) => committedAt.get(jobId)! - t)
      .sort((a, b) => a - b);
    if (latencies.some((l) => !Number.isFinite(l))) throw new Error('an envelope has no commit time');
    // For a closer look at the tail, one JSON line per envelope: [publish time, latency, publish →
    // start of its batch's transaction, size of that batch].
    if (dump) {
      const lines = published.times.slice(warmup).map(([jobId, t]) => {
        const [started, size] = batchStart.get(jobId) ?? [NaN, 0];
        return JSON.stringify([t, committedAt.get(jobId)! - t, started - t, size]);
      });
      writeFileSync(dump, lines.join('\n') + '\n');
    }
    return {
      rate,
      envelopes: latencies.length,
      p50Ms: percentile(latencies, 50),
      p90Ms: percentile(latencies, 90),
      p99Ms: percentile(latencies, 99),
      maxMs: latencies[latencies.length - 1]!,
      publisherLagMs: published.lagMs,
      logLevel,
      publish,
    };
  } finally {
    await nats.nc.drain().catch(() => undefined);
    await db.close();
    dest.end();
    rmSync(dir, { recursive: true, force: true });
  }
}
