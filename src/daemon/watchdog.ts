/**
 * The watchdog (SPEC §3.3, §6): turns passed `reply_deadline`s into `DEADLINE_PASSED` events.
 *
 * It only finds due jobs and builds events; the step decides and writes. Due rows are locked
 * `FOR UPDATE SKIP LOCKED`, so several instances sweep side by side without ever timing out the
 * same job twice, and a result being applied right now (its row locked by the inbox) is skipped:
 * if the result commits first the job is final and the machine ignores the deadline.
 *
 * Logging: one info line per timed-out job (`job_id`, `event`, `from`, `to`), as for every other
 * decision of the daemon, plus one info summary per sweep that timed anything out (count, batches,
 * duration). Per-batch lines and jobs the machine declined are at debug.
 */
import { sql, type Kysely } from 'kysely';
import type { Database } from '../db/schema.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import { applyEvents, type StepOutcome } from './step.js';

/** What {@link createWatchdog} needs. */
export interface WatchdogOptions {
  db: Kysely<Database>;
  logger: Logger;
  metrics?: Metrics;
  /** Pause between the end of one sweep and the start of the next (`WATCHDOG_INTERVAL_MS`). */
  intervalMs: number;
  /** Jobs timed out per transaction (`WATCHDOG_BATCH_SIZE`). */
  batchSize: number;
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
 * The watchdog's due query: `batchSize` jobs in `published`/`processing` whose deadline passed,
 * oldest deadline first, locked, skipping rows another transaction holds. Served by the partial
 * index `recognition_job_reply_deadline_due_idx` (exported so a test can EXPLAIN the real query).
 *
 * The database clock is truncated to milliseconds because the machine's guard compares JavaScript
 * Dates (milliseconds) with the same truncated clock: a deadline of 12:00:00.0004 would be due in
 * SQL at 12:00:00.0007 but not in JS, and such a row would come back in every batch forever.
 */
export function dueDeadlinesQuery(batchSize: number) {
  return sql<{ id: string }>`
    SELECT id FROM recognition_job
    WHERE status IN ('published', 'processing')
      AND reply_deadline < date_trunc('milliseconds', now())
    ORDER BY reply_deadline
    LIMIT ${batchSize}
    FOR UPDATE SKIP LOCKED`;
}

/**
 * Create a watchdog. Nothing runs until `start()` (or a direct `sweep()`). A failed sweep is
 * logged at error and retried at the next tick; the loop never dies.
 */
export function createWatchdog(opts: WatchdogOptions): Watchdog {
  const { db, metrics, intervalMs, batchSize } = opts;
  const log = opts.logger.child({ loop: 'watchdog' });
  /** Sweeps in flight, each with its own flag: stop() halts them after their current batch. */
  const inFlight = new Map<Promise<unknown>, { halted: boolean }>();
  let running = false;
  let timer: NodeJS.Timeout | undefined;
  // Bumped by every start/stop, so a tick of an earlier run never schedules another.
  let generation = 0;

  /** One transaction: lock a batch of due jobs, step each with DEADLINE_PASSED, commit. */
  async function sweepBatch(): Promise<{ locked: number; applied: StepOutcome[]; outcomes: StepOutcome[] }> {
    const started = performance.now();
    const outcomes = await db.transaction().execute(async (tx) => {
      const { rows } = await dueDeadlinesQuery(batchSize).execute(tx);
      // applyEvents locks the same rows again (FOR UPDATE): a no-op inside this transaction.
      return applyEvents(
        tx,
        rows.map((r) => ({ jobId: r.id, event: { type: 'DEADLINE_PASSED' } as const })),
      );
    });
    if (outcomes.length > 0) {
      metrics?.stepDuration.observe({ loop: 'watchdog' }, (performance.now() - started) / 1000);
      metrics?.batchSize.observe({ loop: 'watchdog' }, outcomes.length);
    }
    const applied = outcomes.filter((o) => o.decision === 'applied');
    return { locked: outcomes.length, applied, outcomes };
  }

  async function runSweep(control: { halted: boolean }): Promise<number> {
    const started = performance.now();
    let total = 0;
    let batches = 0;
    try {
      for (;;) {
        // 1. Lock, decide and commit one batch.
        const { locked, applied, outcomes } = await sweepBatch();
        batches += 1;
        total += applied.length;
        // 2. Report, only after the commit.
        for (const o of outcomes) {
          if (o.decision === 'applied') {
            log.info({ job_id: o.jobId, event: o.event, from: o.from, to: o.to, decision: o.decision }, 'job timed out');
            metrics?.transitions.inc({ from: o.from, event: o.event, to: o.to });
          } else {
            log.debug({ job_id: o.jobId, event: o.event, from: o.from, to: o.to, decision: o.decision, reason: o.reason }, 'deadline event changed nothing');
          }
        }
        metrics?.watchdogTimeouts.inc(applied.length);
        if (locked > 0) log.debug({ event: 'watchdog_batch', locked, timed_out: applied.length }, 'watchdog batch committed');
        // 3. Go on while batches come back full, so a backlog drains in one sweep, not one batch
        //    per tick. Stop when a batch timed nothing out: rows due in SQL that the machine
        //    declines would otherwise be selected again and again.
        if (locked < batchSize || applied.length === 0 || control.halted) break;
      }
    } finally {
      metrics?.watchdogSweepDuration.observe((performance.now() - started) / 1000);
    }
    if (total > 0) {
      log.info(
        { event: 'watchdog_sweep', timed_out: total, batches, duration_ms: Math.round(performance.now() - started) },
        'watchdog sweep timed out jobs',
      );
    }
    return total;
  }

  function sweep(): Promise<number> {
    const control = { halted: false };
    const p = runSweep(control);
    inFlight.set(p, control);
    void p.then(
      () => inFlight.delete(p),
      () => inFlight.delete(p),
    );
    return p;
  }

  async function tick(gen: number): Promise<void> {
    timer = undefined;
    try {
      await sweep();
    } catch (err) {
      log.error({ err, event: 'watchdog_sweep_failed' }, 'watchdog sweep failed; retrying at the next tick');
    }
    if (running && gen === generation) timer = setTimeout(() => void tick(gen), intervalMs);
  }

  return {
    start() {
      if (running) return;
      running = true;
      const gen = ++generation;
      // Sweep at once: after a restart the backlog of the downtime is due now, not in one interval.
      timer = setTimeout(() => void tick(gen), 0);
    },
    async stop() {
      running = false;
      generation += 1;
      if (timer) clearTimeout(timer);
      timer = undefined;
      for (const control of inFlight.values()) control.halted = true;
      await Promise.allSettled([...inFlight.keys()]);
    },
    sweep,
  };
}
