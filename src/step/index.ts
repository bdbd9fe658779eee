/**
 * The step: the only place where a job's machine meets the database, and the only code that ever
 * updates a `recognition_job` row. Every event path ends in one write statement (`write.ts`), on
 * one of two paths: the locked one reads and locks its jobs first, inside the caller's
 * transaction; the unlocked one decides for the state each job is assumed to be in and leaves the
 * check to the write, a transaction of its own. Entry points:
 * - {@link applyUnlocked}: the inbox's batches (one statement; null hands the batch back);
 * - {@link applyEvents}: a batch of events, its jobs locked in id order (the publisher, and the
 *   inbox's batches the unlocked path hands back);
 * - {@link applyPassedDeadlines}: the watchdog's due jobs, locked skipping locked rows;
 * - {@link applyRetries}: `RETRY_REQUESTED` for failed jobs, their jobs and files locked in job id
 *   order; it creates the next attempts, which no event path does (`jobs retry`);
 *   {@link previewRetries} decides the same and writes nothing (`--dry-run`);
 * - {@link applyEvent}: one event in its own transaction (the dead letters).
 */
export { applyUnlocked } from './applyUnlocked.js';
export { applyEvent, applyEvents } from './applyEvents.js';
export { applyPassedDeadlines, type PassedDeadlines } from './applyPassedDeadlines.js';
export {
  applyRetries,
  planRetries,
  previewRetries,
  type PlannedRetries,
  type RetryOutcome,
  type RetryRequest,
} from './applyRetries.js';
export type { StepItem } from '../../machines/index.js';
export type { ResultObjects, StepOutcome } from './effects.js';
export {
  pgPoolStepSql,
  pgStepSql,
  stepSqlOf,
  type PgQueryable,
  type StepSql,
  type StepTransaction,
} from './sql.js';
export { defineStatement, type Statement } from './statement.js';
export {
  DUE_LOCK,
  RETRY_LOCK,
  RETRY_WRITE,
  type DueEnd,
  type RetryLockedRow,
  type StepRow,
} from './statements.js';
export { WRITE } from './write.js';
