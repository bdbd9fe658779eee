/**
 * The watchdog (docs/lifecycle.md, "Timeouts and dead letters"): turns passed `reply_deadline`s into
 * `DEADLINE_PASSED` events. It schedules sweeps and reports; the step (`applyPassedDeadlines`) locks
 * due rows `SKIP LOCKED`, decides and writes, so instances and batches never time out a job twice. A
 * backlog is drained from both ends of the due index at once. One info line per timed-out job, one
 * summary per sweep that timed anything out.
 */
import { sql, type Kysely } from 'kysely';
import type { Database } from '../db/schema.js';
import { createPeriodicLoop, type RunControl } from './periodicLoop.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import { inPgTransaction, type PgPool } from '../db/pgTransaction.js';
import { loadTraceContexts } from '../db/jobs.js';
import { recordTimeoutSpans } from '../tracing/jobSpans.js';
import { tracingActive, type TraceLogFields } from '../tracing/tracing.js';
import {
  applyPassedDeadlines,
  DUE_LOCK,
  pgStepSql,
  type DueEnd,
  type StepRow,
  type StepOutcome,
} from '../step/index.js';

/** What {@link createWatchdog} needs. */
export interface WatchdogOptions {
  db: Kysely<Database>;
  logger: Logger;
  metrics?: Metrics;
  /** Pause between the end of one sweep and the start of the next (`WATCHDOG_INTERVAL_MS`). */
  intervalMs: number;
  /** Jobs timed out per transaction (`WATCHDOG_BATCH_SIZE`). */
  batchSize: number;
  /**
   * Batches in flight at once in a sweep, each in its own transaction (`WATCHDOG_CONCURRENCY`):
   * with two, PostgreSQL writes one batch while the next is being decided. Default 1.
   */
  concurrency?: number;
  /**
   * The pg pool behind `db`. When given, batches run on its clients with prepared statements
   * (the fast path); otherwise through Kysely, unprepared.
   */
  pool?: PgPool;
}

/** A running (or startable) watchdog. */
export interface Watchdog {
  /** Sweep now, then again `intervalMs` after each sweep ends. Idempotent. */
  start(): void;
  /**
   * Stop scheduling sweeps; a sweep in flight ends after its current batch commits (or fails), and
   * stop() resolves then. What was left due is swept by the next instance or the next start.
   */
  stop(): Promise<void>;
  /**
   * One sweep: batch after batch until nothing is due (or a batch timed nothing out). Resolves with
   * the number of jobs moved to `timeout`. Rejects if a batch fails; batches committed before it
   * stay committed.
   */
  sweep(): Promise<number>;
}

/**
 * The watchdog's due query as it runs (the step's `DUE_LOCK.oldest`), with `limit` inlined:
 * exported so a test can EXPLAIN it and run it.
 */
export function dueDeadlinesQuery(limit: number) {
  if (!Number.isInteger(limit) || limit < 1) throw new Error(`limit must be a positive integer: ${limit}`);
  return sql<StepRow>`${sql.raw(DUE_LOCK.oldest.text.replace('$1', String(limit)))}`;
}

/**
 * Create a watchdog. Nothing runs until `start()` (or a direct `sweep()`). A failed sweep is
 * logged at error and retried at the next tick; the loop never dies.
 */
export function createWatchdog(opts: WatchdogOptions): Watchdog {
  const { db, metrics, intervalMs, batchSize } = opts;
  const concurrency = Math.max(1, opts.concurrency ?? 1);
  const log = opts.logger.child({ loop: 'watchdog' });

  /**
   * One transaction: lock a batch of due jobs, step each with DEADLINE_PASSED, commit. `from`: the
   * end of the due index the batch is taken from.
   */
  async function sweepBatch(
    from: DueEnd,
  ): Promise<{ locked: number; applied: StepOutcome[]; outcomes: StepOutcome[] }> {
    const started = performance.now();
    const outcomes = opts.pool
      ? await inPgTransaction(
          opts.pool,
          (client) => applyPassedDeadlines(pgStepSql(client), { limit: batchSize, from }),
          { genericPlans: true },
        )
      : await db.transaction().execute((tx) => applyPassedDeadlines(tx, { limit: batchSize, from }));
    if (outcomes.length > 0) {
      metrics?.stepDuration.observe({ loop: 'watchdog' }, (performance.now() - started) / 1000);
      metrics?.batchSize.observe({ loop: 'watchdog' }, outcomes.length);
    }
    const applied = outcomes.filter((o) => o.decision === 'applied');
    return { locked: outcomes.length, applied, outcomes };
  }

  /**
   * With tracing on: one span per timed-out job, linked to the trace context stored on its row
   * (read after the commit, so the batch's locks are not held for it). Never throws: a failed read
   * leaves the batch's jobs without spans, not the sweep failed.
   */
  async function traceTimeouts(
    applied: readonly StepOutcome[],
    startedAt: number,
  ): Promise<Map<string, TraceLogFields> | undefined> {
    if (!tracingActive() || applied.length === 0) return undefined;
    try {
      const stored = await loadTraceContexts(
        db,
        applied.map((o) => o.jobId),
      );
      return recordTimeoutSpans({
        startTime: startedAt,
        jobs: applied.map((o) => ({ jobId: o.jobId, from: o.from, to: o.to, stored: stored.get(o.jobId) })),
      });
    } catch (err) {
      log.warn(
        { err, event: 'watchdog_trace_failed' },
        'could not read the trace contexts of timed-out jobs',
      );
      return undefined;
    }
  }

  /**
   * One batch: lock, decide and commit, then report. Resolves with whether to go on: the batch
   * came back full, timed something out, and the sweep was not halted (rows due in SQL that the
   * machine declines would otherwise be selected again and again).
   */
  async function batchOnce(
    control: RunControl,
    counts: { total: number; batches: number },
    from: DueEnd,
  ): Promise<boolean> {
    // 1. Lock, decide and commit one batch.
    const startedAt = Date.now();
    const { locked, applied, outcomes } = await sweepBatch(from);
    const traceFields = await traceTimeouts(applied, startedAt);
    counts.batches += 1;
    counts.total += applied.length;
    // 2. Report, only after the commit (counters once per batch and edge, not once per job).
    const edges = new Map<string, { from: string; event: string; to: string; n: number }>();
    for (const o of outcomes) {
      if (o.decision === 'applied') {
        log.info(
          {
            job_id: o.jobId,
            event: o.event,
            from: o.from,
            to: o.to,
            decision: o.decision,
            ...traceFields?.get(o.jobId),
          },
          'job timed out',
        );
        const key = `${o.from}>${o.to}`;
        const edge = edges.get(key);
        if (edge) edge.n += 1;
        else edges.set(key, { from: o.from, event: o.event, to: o.to, n: 1 });
      } else {
        log.debug(
          { job_id: o.jobId, event: o.event, from: o.from, to: o.to, decision: o.decision, reason: o.reason },
          'deadline event changed nothing',
        );
      }
    }
    for (const e of edges.values()) metrics?.transitions.inc({ from: e.from, event: e.event, to: e.to }, e.n);
    metrics?.watchdogTimeouts.inc(applied.length);
    if (locked > 0)
      log.debug({ event: 'watchdog_batch', locked, timed_out: applied.length }, 'watchdog batch committed');
    return locked === batchSize && applied.length > 0 && !control.halted;
  }

  /** One worker of a sweep: batch after batch while they come back full. */
  async function drain(
    control: RunControl,
    counts: { total: number; batches: number },
    from: DueEnd,
  ): Promise<void> {
    while (await batchOnce(control, counts, from));
  }

  async function runSweep(control: RunControl): Promise<number> {
    const started = performance.now();
    const counts = { total: 0, batches: 0 };
    try {
      // The first batch alone: an idle sweep (the usual case) is one short transaction. Only a
      // full batch, i.e. a backlog, brings in the other workers.
      if (await batchOnce(control, counts, 'oldest')) {
        // Workers take turns at the two ends of the due index: two of them never step over the
        // rows the other holds locked until they meet in the middle of the backlog.
        const results = await Promise.allSettled(
          Array.from({ length: concurrency }, (_, k) =>
            drain(control, counts, k % 2 === 0 ? 'oldest' : 'newest'),
          ),
        );
        const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
        if (failed) throw failed.reason;
      }
    } finally {
      metrics?.watchdogSweepDuration.observe((performance.now() - started) / 1000);
    }
    if (counts.total > 0) {
      log.info(
        {
          event: 'watchdog_sweep',
          timed_out: counts.total,
          batches: counts.batches,
          duration_ms: Math.round(performance.now() - started),
        },
        'watchdog sweep timed out jobs',
      );
    }
    return counts.total;
  }

  const loop = createPeriodicLoop({
    run: runSweep,
    intervalMs,
    // Sweep at once: after a restart the backlog of the downtime is due now, not in one interval.
    firstRunAfterMs: 0,
    onError: (err) =>
      log.error({ err, event: 'watchdog_sweep_failed' }, 'watchdog sweep failed; retrying at the next tick'),
  });

  return {
    start: loop.start,
    stop: loop.stop,
    sweep: loop.runNow,
  };
}
