/**
 * The locked path: a batch of (job, event) items inside the caller's transaction, in two
 * statements per `WRITE_CHUNK` items (and one more for a batch of results that name objects).
 *   1. lock every job row of the batch (in id order, so that concurrent batches never deadlock)
 *      and read the database clock; read which of the objects its results name `s3_object`
 *      already holds (no result registers one again);
 *   2. hydrate each machine from its row and apply the events in order with the pure `decide()`;
 *   3. write every effect in one statement: result objects, job rows (found at the address the
 *      lock read, not through the primary key, at the version it read), files still current, the
 *      transition log.
 * The caller commits; only then may it ack the messages the items came from. Round trips per
 * batch: BEGIN, lock, write, COMMIT.
 */
import type { Kysely } from 'kysely';
import type { JobEventInput, StepItem } from '../../machines/index.js';
import type { Database } from '../db/schema.js';
import { objectKey, type RegisteredObject, type ResultObjectRule } from '../messages/resultObject.js';
import { arrayLiteral } from './arrayLiteral.js';
import { decideAndWrite } from './decideAndWrite.js';
import type { ResultObjects, StepOutcome } from './effects.js';
import { stepSqlOf, type StepSql, type StepTransaction } from './sql.js';
import { LOCK, REGISTERED_OBJECTS, type RegisteredObjectRow, type StepRow } from './statements.js';

/**
 * Apply `items` in order, inside the caller's transaction `tx`. Several items may name the same
 * job: they are applied one after the other, as the stream delivered them. Runs one lock and one
 * write statement per `WRITE_CHUNK` items (the write only when something changes). `rule`: what a
 * result's object is checked against; a batch without it takes no result that names one.
 */
export async function applyEvents(
  tx: StepTransaction,
  items: readonly StepItem[],
  rule?: ResultObjectRule,
): Promise<StepOutcome[]> {
  if (items.length === 0) return [];
  const sql = stepSqlOf(tx);
  // 1. Lock the rows, in id order; then read which objects the results name are registered.
  const ids = [...new Set(items.map((i) => i.jobId))];
  const rows = await sql.query<StepRow>(LOCK, [ids]);
  const objects = rule && (await resultObjects(sql, items, rule));
  const { outcomes } = await decideAndWrite({ sql, items, rows, objects });
  return outcomes;
}

/**
 * The objects `items`' results name that `s3_object` already holds, read after the jobs are
 * locked (no query when no result names one).
 */
async function resultObjects(
  sql: StepSql,
  items: readonly StepItem[],
  rule: ResultObjectRule,
): Promise<ResultObjects> {
  const buckets: string[] = [];
  const keys: string[] = [];
  for (const { event } of items) {
    if (event.type !== 'ENVELOPE_RESULT' || !event.resultS3) continue;
    buckets.push(event.resultS3.bucket);
    keys.push(event.resultS3.key);
  }
  const registered = new Map<string, RegisteredObject>();
  if (buckets.length === 0) return { rule, registered };
  const rows = await sql.query<RegisteredObjectRow>(REGISTERED_OBJECTS, [
    arrayLiteral('text', buckets, true),
    arrayLiteral('text', keys),
  ]);
  for (const r of rows)
    registered.set(objectKey(r), { bucket_role: r.bucket_role, created_by: r.created_by });
  return { rule, registered };
}

/** Convenience for one event: its own transaction, committed before it returns. */
export async function applyEvent(
  db: Kysely<Database>,
  jobId: string,
  event: JobEventInput,
  rule?: ResultObjectRule,
): Promise<StepOutcome> {
  const [outcome] = await db.transaction().execute((tx) => applyEvents(tx, [{ jobId, event }], rule));
  return outcome!;
}
