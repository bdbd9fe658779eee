/**
 * The transition rollup of the console's figures (migration 0021, docs/performance.md, "Counting
 * for the console"): {@link rollUpTransitions} takes a batch of the deltas the transition trigger
 * appended and adds them to `recognition_transition_minute`, then expires the rollup's old minutes,
 * in one transaction under a lock taken without waiting, so one instance at a time rolls up. Each
 * delta is added exactly once: one whose transaction has not committed is invisible to the batch,
 * and taken by a later one. The latency ladder is defined here once, passed to the rollup and read
 * back by {@link bucketQuantile}.
 */
import { sql, type Kysely } from 'kysely';
import type { Database } from './schema.js';

/**
 * The ladder of the latency counts, in ms: place 0 counts the times below the first bound, place
 * i the times from bound i−1 up to bound i, the last place the times from the last bound up. Never
 * edit: the stored counts are by place; another ladder needs new columns.
 */
export const LATENCY_BUCKET_BOUNDS_MS: readonly number[] = [
  10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 120_000, 300_000, 600_000,
  1_800_000, 3_600_000,
];

/** How long the rollup keeps a minute: the console reads a day, and a week back is there to compare. */
export const ROLLUP_KEEP_MS = 8 * 24 * 3_600_000;

/** Deltas taken, and expired minutes deleted, per transaction. */
export const ROLLUP_BATCH_SIZE = 50_000;

/**
 * Key of the advisory lock of a rollup transaction: the ASCII bytes of `rcrollup` as a bigint.
 * Fixed, so that every instance contends for the same lock.
 */
export const ROLLUP_LOCK_KEY = '8242557565904123248';

/** What one {@link rollUpTransitions} did. */
export interface RollupBatch {
  /** Deltas taken and added to the rollup; `batchSize` of them: more may wait. */
  deltas: number;
  /** Rollup minutes deleted as older than the retention. */
  expired: number;
  /** Another instance held the rollup lock: this call did nothing. */
  busy: boolean;
}

/** What {@link rollUpTransitions} takes besides the database. */
export interface RollupOptions {
  bucketBounds?: readonly number[];
  batchSize?: number;
  keepMs?: number;
}

/**
 * One rollup transaction: 1. the rollup lock, or `busy` and nothing; 2. up to `batchSize` deltas
 * taken and added to their minutes; 3. up to `batchSize` minutes older than `keepMs` (by the
 * database clock) deleted. Both through the migration's functions, which run as their owner.
 */
export async function rollUpTransitions(
  db: Kysely<Database>,
  {
    bucketBounds = LATENCY_BUCKET_BOUNDS_MS,
    batchSize = ROLLUP_BATCH_SIZE,
    keepMs = ROLLUP_KEEP_MS,
  }: RollupOptions = {},
): Promise<RollupBatch> {
  return db.transaction().execute(async (tx) => {
    // 1. The lock, held by this transaction, released by its end.
    const { rows } = await sql<{ locked: boolean }>`
      SELECT pg_try_advisory_xact_lock(${ROLLUP_LOCK_KEY}::bigint) AS locked`.execute(tx);
    if (!rows[0]!.locked) return { deltas: 0, expired: 0, busy: true };
    // 2. The deltas.
    const bounds = `{${bucketBounds.join(',')}}`;
    const taken = await sql<{ n: number }>`
      SELECT recognition_roll_up_transitions(${bounds}::bigint[], ${batchSize}::integer) AS n`.execute(tx);
    // 3. The old minutes.
    const expired = await sql<{ n: number }>`
      SELECT recognition_expire_transition_minutes(
        now() - ${String(keepMs)}::bigint * interval '1 millisecond', ${batchSize}::integer) AS n`.execute(
      tx,
    );
    return { deltas: taken.rows[0]!.n, expired: expired.rows[0]!.n, busy: false };
  });
}

/**
 * The `q` quantile (0 < q ≤ 1) of times counted over `bounds` (`counts` has one place more than
 * `bounds`), as the upper edge of the place it falls in: an upper bound on the true quantile,
 * never more than `max`, the largest time counted. Null when nothing is counted.
 */
export function bucketQuantile(
  counts: readonly number[],
  bounds: readonly number[],
  max: number | null,
  q: number,
): number | null {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) return null;
  const rank = Math.max(1, Math.ceil(q * total));
  let seen = 0;
  for (let place = 0; place < counts.length; place++) {
    seen += counts[place]!;
    if (seen < rank) continue;
    const edge = place < bounds.length ? bounds[place]! : Infinity;
    return max === null ? (Number.isFinite(edge) ? edge : null) : Math.min(edge, max);
  }
  return max;
}
