/**
 * `inbox_quarantine.reason` takes `RESULT_OBJECT_NOT_OWNED`: a result whose `result_s3` is not its
 * job's own object, which the step refuses. The CHECK is rebuilt with the whole list, as 0007 does;
 * the list is this migration's own, frozen.
 */
import type { Kysely } from 'kysely';
import { QUARANTINE_REASONS_0007, allowReasons } from './0007_quarantine_service_mismatch.js';

/** The reasons this migration allows. Never edit: add a migration. */
export const QUARANTINE_REASONS_0018 = [...QUARANTINE_REASONS_0007, 'RESULT_OBJECT_NOT_OWNED'] as const;

export async function up(db: Kysely<unknown>): Promise<void> {
  await allowReasons(db, QUARANTINE_REASONS_0018);
}

/** Fails while a `RESULT_OBJECT_NOT_OWNED` row exists: an operator decides what becomes of it first. */
export async function down(db: Kysely<unknown>): Promise<void> {
  await allowReasons(db, QUARANTINE_REASONS_0007);
}
