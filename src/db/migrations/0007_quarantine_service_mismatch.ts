/**
 * `inbox_quarantine.reason` takes `SERVICE_MISMATCH`: an ack or result of another service than its
 * job's, which the machine rejects. The CHECK is dropped and added again with the whole list, which
 * only grows; the list is this migration's own, frozen.
 */
import { sql, type Kysely } from 'kysely';

/** The reasons before this migration. Never edit: add a migration. */
export const QUARANTINE_REASONS_0001 = [
  'INVALID_JSON',
  'SCHEMA_INVALID',
  'MISSING_MSG_ID',
  'UNKNOWN_JOB',
  'PAYLOAD_TOO_LARGE',
] as const;

/** The reasons this migration allows. Never edit: add a migration. */
export const QUARANTINE_REASONS_0007 = [...QUARANTINE_REASONS_0001, 'SERVICE_MISMATCH'] as const;

/** Rebuild the reason CHECK with `reasons`; 0018 rebuilds it the same way. */
export async function allowReasons(db: Kysely<unknown>, reasons: readonly string[]): Promise<void> {
  const list = sql.join(reasons.map((r) => sql.lit(r)));
  await sql`
    ALTER TABLE inbox_quarantine
      DROP CONSTRAINT inbox_quarantine_reason_check,
      ADD CONSTRAINT inbox_quarantine_reason_check CHECK (reason IN (${list}))`.execute(db);
}

export async function up(db: Kysely<unknown>): Promise<void> {
  await allowReasons(db, QUARANTINE_REASONS_0007);
}

/** Fails while a `SERVICE_MISMATCH` row exists: an operator decides what becomes of it first. */
export async function down(db: Kysely<unknown>): Promise<void> {
  await allowReasons(db, QUARANTINE_REASONS_0001);
}
