/**
 * Indexes that keep the operator's queries and retention independent of how much history the tables
 * hold (docs/performance.md, "History and its indexes"): `recognition_job_final_created_idx`,
 * `recognition_job_finished_idx` (replacing 0005's `recognition_job_failed_idx`), the index behind
 * the `stored_file` foreign key check, and `inbox_quarantine_received_at_idx`. `IF NOT EXISTS`, so
 * indexes an operator built beforehand `CONCURRENTLY` are kept.
 */
import { sql, type Kysely } from 'kysely';

/** The final statuses when this migration was written. Never edit: add a migration. */
const FINAL_0010 = ['done', 'needs_check', 'error', 'timeout', 'dlq'] as const;
/** Migration 0005's failed statuses, to restore its index on the way down. */
const FAILED_0005 = ['error', 'timeout', 'dlq'] as const;

export async function up(db: Kysely<unknown>): Promise<void> {
  const final = sql.join(FINAL_0010.map((s) => sql.lit(s)));
  await sql`
    CREATE INDEX IF NOT EXISTS recognition_job_final_created_idx
      ON recognition_job (status, created_at, id) WHERE status IN (${final})`.execute(db);
  await sql`
    CREATE INDEX IF NOT EXISTS recognition_job_finished_idx
      ON recognition_job (status, finished_at, id) WHERE status IN (${final})`.execute(db);
  await sql`DROP INDEX IF EXISTS recognition_job_failed_idx`.execute(db);
  await sql`
    CREATE INDEX IF NOT EXISTS stored_file_current_recognition_job_id_idx
      ON stored_file (current_recognition_job_id)`.execute(db);
  await sql`
    CREATE INDEX IF NOT EXISTS inbox_quarantine_received_at_idx
      ON inbox_quarantine (received_at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  const failed = sql.join(FAILED_0005.map((s) => sql.lit(s)));
  await sql`DROP INDEX inbox_quarantine_received_at_idx`.execute(db);
  await sql`DROP INDEX stored_file_current_recognition_job_id_idx`.execute(db);
  await sql`
    CREATE INDEX recognition_job_failed_idx
      ON recognition_job (status, finished_at) WHERE status IN (${failed})`.execute(db);
  await sql`DROP INDEX recognition_job_finished_idx`.execute(db);
  await sql`DROP INDEX recognition_job_final_created_idx`.execute(db);
}
