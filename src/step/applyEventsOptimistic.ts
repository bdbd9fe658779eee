/**
 * The unlocked path, for a few events of one job (the inbox's batches of one job): two autocommit
 * statements instead of BEGIN, lock, write, COMMIT.
 */
import { WRITE_CHUNK } from './decideAndWrite.js';
import { planBatch, type StepItem, type StepOutcome } from './plan.js';
import type { StepSql } from './sql.js';
import { CONFIRM, READ, WRITE, type StepRow } from './statements.js';

/** Reads of the unlocked path before it hands the work to the locked one. */
const OPTIMISTIC_ATTEMPTS = 3;
const SERIALIZATION_FAILURE = '40001';

/**
 * Apply `items`, all for one job, with no transaction around them:
 * 1. read the job's row and version (`xmin`), without locking it;
 * 2. decide, as the locked path does;
 * 3. write everything in the locked path's statement, which updates each job only at the address
 *    and version it read, and aborts as a whole when any job was changed in between (a
 *    serialization failure, raised by `recognition_job_versions_checked`). Then read again and
 *    decide anew, a few times.
 *    A decision that writes nothing is confirmed instead ({@link CONFIRM}): the version read is
 *    still current once any transaction holding the row has finished.
 *
 * One statement is one transaction: the outcome is exactly that of the locked path run at the
 * moment of the write. Resolves with `null` when this path cannot finish the work — the events name
 * more than one job, the job does not exist or an event is `rejected` (the caller quarantines such
 * a message in a transaction), more events than one write holds, or the row kept changing — and the
 * caller then runs the locked path; nothing has been written.
 * A decision that writes nothing (a duplicate, a late result) costs the read and the check.
 */
export async function applyEventsOptimistic(
  sql: StepSql,
  items: readonly StepItem[],
): Promise<StepOutcome[] | null> {
  if (items.length === 0) return [];
  if (items.length > WRITE_CHUNK) return null;
  const jobId = items[0]!.jobId;
  if (items.some((i) => i.jobId !== jobId)) return null;
  for (let attempt = 1; attempt <= OPTIMISTIC_ATTEMPTS; attempt++) {
    const rows = await sql.query<StepRow>(READ, [jobId]);
    const read = rows[0];
    if (!read) return null;
    // One chunk: the items fit in one write.
    const { outcomes, write } = planBatch(rows).next(items);
    // Decided before anything is written: the caller quarantines a rejected event in a transaction.
    if (outcomes.some((o) => o.decision === 'rejected')) return null;
    if (write) {
      try {
        await sql.query(WRITE, write.params);
      } catch (err) {
        if ((err as { code?: unknown }).code !== SERIALIZATION_FAILURE) throw err;
        continue;
      }
      return outcomes;
    }
    // Nothing written: the decision stands only if no transaction was changing the row.
    const now = await sql.query<{ id: string; version: string }>(CONFIRM, [jobId]);
    if (now.length === 1 && read.version === now[0]!.version) return outcomes;
  }
  return null;
}
