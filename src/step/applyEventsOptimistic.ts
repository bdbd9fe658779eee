/**
 * The unlocked path, for a batch of events (the inbox's batches): one autocommit statement
 * instead of BEGIN, lock, write, COMMIT, and no read of the jobs before it.
 */
import type { ResultObjectRule } from '../messages/resultObject.js';
import { WRITE_CHUNK } from './decideAndWrite.js';
import { planExpected, type ExpectedWrite, type StepItem, type StepOutcome } from './plan.js';
import type { StepSql } from './sql.js';
import { WRITE, type WrittenRow } from './statements.js';

/** Writes of the unlocked path before it hands the work to the locked one. */
const OPTIMISTIC_ATTEMPTS = 3;
const SERIALIZATION_FAILURE = '40001';

/**
 * Apply `items` with no transaction around them and no read before the write:
 * 1. decide each event for the state its job is expected to be in (`decideExpected`: the machine's
 *    decision, the same in each status it names);
 * 2. send the locked path's write statement with those expectations: it first locks every job, in
 *    id order as the locked paths do, and writes only when each is as its decision assumed;
 *    otherwise it writes nothing. A job that another transaction changed while the statement
 *    waited for its lock makes it abort as a whole (a serialization failure), and the path sends
 *    it again, a few times.
 *
 * One statement is one transaction: the outcome is exactly that of the locked path run at the
 * moment of the write. Resolves with `null` when this path cannot finish the work — an event
 * without an expected decision, two events of one job, more events than one write holds, a result
 * object that is not under its job's prefix in the results bucket, a job
 * not as expected (it does not exist, its status or service differ, the result is a duplicate,
 * its file has moved on), or rows that kept changing or a result object already registered (each
 * a serialization failure of the write) — and the caller then runs the locked path;
 * nothing has been written.
 */
export async function applyEventsOptimistic(
  sql: StepSql,
  items: readonly StepItem[],
  rule?: ResultObjectRule,
): Promise<StepOutcome[] | null> {
  if (items.length === 0) return [];
  const plan = planOptimistic(items, rule);
  return plan && writeOptimistic(sql, plan);
}

/**
 * The decisions and the write of {@link applyEventsOptimistic}, made before anything is sent;
 * null when this path cannot take `items`. `rule`: what a result's object is checked against (see
 * `planExpected`). Pure.
 */
export function planOptimistic(items: readonly StepItem[], rule?: ResultObjectRule): ExpectedWrite | null {
  return items.length > WRITE_CHUNK ? null : planExpected(items, rule);
}

/** Send `plan`'s write (see {@link applyEventsOptimistic}); null when the locked path must take it. */
export async function writeOptimistic(sql: StepSql, plan: ExpectedWrite): Promise<StepOutcome[] | null> {
  for (let attempt = 1; attempt <= OPTIMISTIC_ATTEMPTS; attempt++) {
    let rows: WrittenRow[];
    try {
      rows = await sql.query<WrittenRow>(WRITE, plan.params);
    } catch (err) {
      if ((err as { code?: unknown }).code !== SERIALIZATION_FAILURE) throw err;
      continue;
    }
    return plan.outcomes(rows);
  }
  return null;
}
