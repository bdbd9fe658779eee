/**
 * The locked path: a batch of (job, event) items inside the caller's transaction, in two
 * statements per `WRITE_CHUNK` items.
 *   1. lock every job row of the batch (in id order, so that concurrent batches never deadlock)
 *      and read the database clock;
 *   2. hydrate each machine from its row and apply the events in order with the pure `decide()`;
 *   3. write every effect in one statement: result objects, job rows (found at the address the
 *      lock read, not through the primary key, at the version it read), files still current, the
 *      transition log.
 * The caller commits; only then may it ack the messages the items came from. Round trips per
 * batch: BEGIN, lock, write, COMMIT.
 */
import type { Kysely } from 'kysely';
import type { JobEventInput } from '../../machines/index.js';
import type { Database } from '../db/schema.js';
import { decideAndWrite } from './decideAndWrite.js';
import type { StepItem, StepOutcome } from './plan.js';
import { stepSqlOf, type StepTransaction } from './sql.js';
import { LOCK, type StepRow } from './statements.js';

/**
 * Apply `items` in order, inside the caller's transaction `tx`. Several items may name the same
 * job: they are applied one after the other, as the stream delivered them. Runs one lock and one
 * write statement per `WRITE_CHUNK` items (the write only when something changes).
 */
export async function applyEvents(tx: StepTransaction, items: readonly StepItem[]): Promise<StepOutcome[]> {
  if (items.length === 0) return [];
  const sql = stepSqlOf(tx);
  // 1. Lock the rows, in id order.
  const ids = [...new Set(items.map((i) => i.jobId))];
  const rows = await sql.query<StepRow>(LOCK, [ids]);
  const { outcomes } = await decideAndWrite({ sql, items, rows });
  return outcomes;
}

/** Convenience for one event: its own transaction, committed before it returns. */
export async function step(db: Kysely<Database>, jobId: string, event: JobEventInput): Promise<StepOutcome> {
  const [outcome] = await db.transaction().execute((tx) => applyEvents(tx, [{ jobId, event }]));
  return outcome!;
}
