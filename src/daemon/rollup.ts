/**
 * The rollup loop: every `ROLLUP_INTERVAL_MS`, the transitions' deltas are added to the console's
 * per-minute rollup and its old minutes expired (src/db/rollup.ts), batch after batch while they
 * come back full. One instance at a time rolls up (a lock taken without waiting); the others find
 * it busy and wait for their next tick. A run that took anything is logged at debug, a failed one
 * at error.
 */
import type { Kysely } from 'kysely';
import { ROLLUP_BATCH_SIZE, rollUpTransitions, type RollupOptions } from '../db/rollup.js';
import type { Database } from '../db/schema.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import { createPeriodicLoop, type RunControl } from './periodicLoop.js';

/** What {@link createRollup} needs. */
export interface RollupLoopOptions {
  db: Kysely<Database>;
  logger: Logger;
  metrics?: Metrics;
  /** Pause between the end of one run and the start of the next (`ROLLUP_INTERVAL_MS`). */
  intervalMs: number;
  /** The rollup's settings (tests make the batches small). */
  rollup?: RollupOptions;
}

/** What one run did. */
export interface RollupRun {
  deltas: number;
  expired: number;
  batches: number;
  /** Another instance was rolling up. */
  busy: boolean;
}

/** The daemon's rollup loop. */
export interface RollupLoop {
  /** Run at once, then `intervalMs` after each run ends. Idempotent. */
  start(): void;
  /** Stop scheduling; a run in flight ends after its current batch, and stop() resolves then. */
  stop(): Promise<void>;
  /** One run now, beside the schedule. */
  run(): Promise<RollupRun>;
}

/** Create the rollup loop; nothing runs until `start()` or `run()`. */
export function createRollup(opts: RollupLoopOptions): RollupLoop {
  const { db, metrics, intervalMs } = opts;
  const batchSize = opts.rollup?.batchSize ?? ROLLUP_BATCH_SIZE;
  const log = opts.logger.child({ loop: 'rollup' });

  async function runOnce(control: RunControl): Promise<RollupRun> {
    const started = performance.now();
    const result: RollupRun = { deltas: 0, expired: 0, batches: 0, busy: false };
    for (;;) {
      const batch = await rollUpTransitions(db, opts.rollup);
      result.batches += 1;
      result.deltas += batch.deltas;
      result.expired += batch.expired;
      metrics?.rollupDeltas.inc(batch.deltas);
      result.busy = batch.busy;
      // A full batch: more may wait.
      const full = batch.deltas >= batchSize || batch.expired >= batchSize;
      if (!full || control.halted) break;
    }
    if (result.deltas > 0 || result.expired > 0)
      log.debug(
        {
          event: 'rollup_run',
          deltas: result.deltas,
          expired_minutes: result.expired,
          batches: result.batches,
          duration_ms: Math.round(performance.now() - started),
        },
        'transitions rolled up',
      );
    return result;
  }

  const loop = createPeriodicLoop({
    run: runOnce,
    intervalMs,
    firstRunAfterMs: 0,
    onError: (err) =>
      log.error({ err, event: 'rollup_failed' }, 'transition rollup failed; retrying at the next tick'),
  });
  return { start: loop.start, stop: loop.stop, run: loop.runNow };
}
