/**
 * The unlocked path, the inbox's entry into the step: a batch of acks and results written by one
 * autocommit statement, with no read of the jobs before it and no transaction around it.
 */
import type { StepItem } from '../../machines/index.js';
import type { ResultObjectRule } from '../messages/resultObject.js';
import { WRITE_CHUNK } from './decideAndWrite.js';
import type { StepOutcome } from './effects.js';
import { planUnlocked, type UnlockedWrite } from './planUnlocked.js';
import type { StepSql } from './sql.js';
import { WRITE, type WrittenRow } from './write.js';

/** Writes of the unlocked path before it hands the work to the locked one. */
const UNLOCKED_ATTEMPTS = 3;
const SERIALIZATION_FAILURE = '40001';

/**
 * Apply `items` with no transaction around them and no read before the write:
 * 1. decide each event for the state its job is assumed to be in (`planUnlocked`: its unlocked
 *    decision, the machine's, the same in each status it names), before anything is sent;
 * 2. send the write with those assumptions: it first locks every job, in id order as the locked
 *    paths do, and writes only when each is as its decision assumed; otherwise it writes nothing.
 *    A job that another transaction changed while the statement waited for its lock makes it
 *    abort as a whole (a serialization failure), and the path sends it again, a few times.
 *
 * One statement is one transaction: the outcome is exactly that of the locked path run at the
 * moment of the write. Resolves with `null` when this path cannot finish the work — an event
 * without an unlocked decision, two events of one job, more events than one write holds, a result
 * object that is not under its job's prefix in the results bucket, a job not as assumed (it does
 * not exist, its status or service differ, the result is a duplicate, its file has moved on), or
 * rows that kept changing or a result object already registered (each a serialization failure of
 * the write) — and the caller then runs the locked path (`applyEvents`); nothing has been written.
 *
 * Not an async function: the plan is made before this returns, so `items` and the decisions are
 * garbage while the write runs, and `sql` may take its connection only when the write is sent.
 */
export function applyUnlocked(
  sql: StepSql,
  items: readonly StepItem[],
  rule?: ResultObjectRule,
): Promise<StepOutcome[] | null> {
  if (items.length === 0) return Promise.resolve([]);
  let plan: UnlockedWrite | null;
  try {
    plan = items.length > WRITE_CHUNK ? null : planUnlocked(items, rule);
  } catch (err) {
    return Promise.reject(err as Error);
  }
  return plan ? writeUnlocked(sql, plan) : Promise.resolve(null);
}

/** The write of {@link applyUnlocked}: send `plan`'s write; null when the locked path must take it. */
async function writeUnlocked(sql: StepSql, plan: UnlockedWrite): Promise<StepOutcome[] | null> {
  for (let attempt = 1; attempt <= UNLOCKED_ATTEMPTS; attempt++) {
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
