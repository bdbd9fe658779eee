/**
 * An index of failed jobs by status and finish time, for `jobs list --status error --finished-since`
 * and `jobs retry`. Partial over the failed statuses, so the hot path's status changes do not pay
 * for it.
 */
import { sql, type Kysely } from 'kysely';

/** The failed statuses when this migration was written. Never edit: add a migration. */
const FAILED_0005 = ['error', 'timeout', 'dlq'] as const;

export async function up(db: Kysely<unknown>): Promise<void> {
  const failed = sql.join(FAILED_0005.map((s) => sql.lit(s)));
  await sql`
    CREATE INDEX recognition_job_failed_idx
      ON recognition_job (status, finished_at) WHERE status IN (${failed})`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX recognition_job_failed_idx`.execute(db);
}
