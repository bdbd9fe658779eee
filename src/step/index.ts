/**
 * The step: the only place where a job's machine meets the database, and the only code that ever
 * updates a `recognition_job` row. Its entry points run inside the caller's transaction, but for
 * the unlocked path (each of its statements is a transaction of its own) and `step`:
 * - {@link applyEvents}: a batch of events, its jobs locked in id order (the publisher, and the
 *   inbox's batches the unlocked path hands back);
 * - {@link applyEventsOptimistic}: a batch of events decided for the states their jobs are
 *   expected to be in, written by one statement, which locks and checks the jobs first (the
 *   inbox);
 * - {@link applyPassedDeadlines}: the watchdog's due jobs, locked skipping locked rows;
 * - {@link applyRetries}: `RETRY_REQUESTED` for failed jobs, their jobs and files locked in job id
 *   order; it creates the next attempts, which no event path does (`jobs retry`);
 *   {@link previewRetries} decides the same and writes nothing (`--dry-run`);
 * - {@link step}: one event in its own transaction.
 *
 * Parts: `statements.ts` (the SQL and the rows it reads), `statement.ts` (names derived from
 * texts), `plan.ts` (pure: decisions and write parameters), `decideAndWrite.ts` (chunked writes),
 * `sql.ts` (Kysely and pg adapters).
 */
export { applyEvents, step } from './applyEvents.js';
export { applyEventsOptimistic, planOptimistic, writeOptimistic } from './applyEventsOptimistic.js';
export { applyPassedDeadlines, type PassedDeadlines } from './applyPassedDeadlines.js';
export {
  applyRetries,
  planRetries,
  previewRetries,
  type PlannedRetries,
  type RetryOutcome,
  type RetryRequest,
} from './applyRetries.js';
export type { ExpectedWrite, ResultObjects, StepItem, StepOutcome } from './plan.js';
export { pgStepSql, stepSqlOf, type PgQueryable, type StepSql, type StepTransaction } from './sql.js';
export { defineStatement, type Statement } from './statement.js';
export {
  DUE_LOCK,
  RETRY_LOCK,
  RETRY_WRITE,
  WRITE,
  type DueEnd,
  type RetryLockedRow,
  type StepRow,
} from './statements.js';
