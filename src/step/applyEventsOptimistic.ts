/**
 * The unlocked path, for a batch of events (the inbox's batches): two autocommit statements
 * instead of BEGIN, lock, write, COMMIT.
 */
import { WRITE_CHUNK } from './decideAndWrite.js';
import { checkingReads, planBatch, type StepItem, type StepOutcome } from './plan.js';
import type { StepSql } from './sql.js';
import { READ, WRITE, type StepRow } from './statements.js';

/** Reads of the unlocked path before it hands the work to the locked one. */
const OPTIMISTIC_ATTEMPTS = 3;
const SERIALIZATION_FAILURE = '40001';

/**
 * Apply `items` with no transaction around them:
 * 1. read their jobs' rows, each with its address and version, without locking them;
 * 2. decide, as the locked path does;
 * 3. send the locked path's write statement with the reads to check: it first locks every job
 *    read, in id order as the locked paths do, and goes on only when each is still at the address
 *    and version read; otherwise it aborts as a whole (a serialization failure), and the path
 *    reads again and decides anew, a few times. A batch whose decisions change nothing sends the
 *    same statement, which then only checks.
 *
 * One statement is one transaction: the outcome is exactly that of the locked path run at the
 * moment of the write. Resolves with `null` when this path cannot finish the work — a job does not
 * exist or an event is `rejected` (the caller quarantines such a message in a transaction), more
 * events than one write holds, or the rows kept changing — and the caller then runs the locked
 * path; nothing has been written.
 */
export async function applyEventsOptimistic(
  sql: StepSql,
  items: readonly StepItem[],
): Promise<StepOutcome[] | null> {
  if (items.length === 0) return [];
  if (items.length > WRITE_CHUNK) return null;
  const ids = [...new Set(items.map((i) => i.jobId))];
  for (let attempt = 1; attempt <= OPTIMISTIC_ATTEMPTS; attempt++) {
    const rows = await sql.query<StepRow>(READ, [ids]);
    if (rows.length < ids.length) return null;
    // One chunk: the items fit in one write.
    const { outcomes, write } = planBatch(rows).next(items);
    // Decided before anything is written: the caller quarantines a rejected event in a transaction.
    if (outcomes.some((o) => o.decision === 'rejected')) return null;
    try {
      await sql.query(WRITE, checkingReads(write, rows));
    } catch (err) {
      if ((err as { code?: unknown }).code !== SERIALIZATION_FAILURE) throw err;
      continue;
    }
    return outcomes;
  }
  return null;
}
