/** The watchdog's batch: the due jobs are locked by the statement that finds them, so a batch costs one statement fewer. */
import { decideAndWrite } from './decideAndWrite.js';
import type { StepItem } from '../../machines/index.js';
import type { StepOutcome } from './effects.js';
import { stepSqlOf, type StepTransaction } from './sql.js';
import { DUE_LOCK, type DueEnd, type StepRow } from './statements.js';

/** What {@link applyPassedDeadlines} locks. */
export interface PassedDeadlines {
  /** Jobs locked and decided at most. */
  limit: number;
  /** The end of the due index the batch is taken from; `oldest` unless given. */
  from?: DueEnd;
}

/**
 * Inside the caller's transaction, lock up to `limit` jobs whose reply deadline has passed (oldest
 * first, or `newest` first for a sweep's second worker; skipping rows another transaction holds —
 * several instances sweep side by side, and a job whose result is being applied right now is left
 * to it) and apply `DEADLINE_PASSED` to each. The machine still decides: a job it declines is
 * reported, not changed.
 */
export async function applyPassedDeadlines(
  tx: StepTransaction,
  { limit, from = 'oldest' }: PassedDeadlines,
): Promise<StepOutcome[]> {
  const sql = stepSqlOf(tx);
  const rows = await sql.query<StepRow>(DUE_LOCK[from], [limit]);
  const items = rows.map((r): StepItem => ({ jobId: r.id, event: { type: 'DEADLINE_PASSED' } }));
  const { outcomes } = await decideAndWrite({ sql, items, rows });
  return outcomes;
}
