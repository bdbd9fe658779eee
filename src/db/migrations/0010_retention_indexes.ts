/**
 * Indexes that keep the operator's queries and retention independent of how much history the
 * tables hold (docs/performance.md, "History and its indexes"):
 *
 * - `recognition_job_final_created_idx` (status, created_at, id) over the final statuses: `jobs
 *   list` newest first, one status at a time (the list reads each status's newest rows and merges
 *   them), with or without a status filter;
 * - `recognition_job_finished_idx` (status, finished_at, id) over the final statuses: retention's
 *   walk through the expired jobs of a status, `jobs export`, `--finished-since`, and the failed
 *   jobs of `jobs retry`. It covers every final status, so it replaces migration 0005's
 *   `recognition_job_failed_idx` (failed statuses only), which is dropped;
 * - `stored_file_current_recognition_job_id_idx`: deleting a job makes PostgreSQL check that no
 *   file still points at it (`stored_file_current_recognition_job_id_fkey`); without this index
 *   that check reads the whole of `stored_file`, once per deleted job;
 * - `inbox_quarantine_received_at_idx`: retention and `quarantine purge` find old messages by age.
 *
 * Both job indexes are partial over the final statuses: a job enters them once, when it finishes,
 * so the status changes before that (published, processing) do not pay for them. The due indexes
 * of migration 0001 and the primary keys, which the hot paths use, stay as they are.
 *
 * `IF NOT EXISTS`: on a large table an operator may build the indexes beforehand with
 * `CREATE INDEX CONCURRENTLY` under the same names (docs/operations.md), and this migration then
 * keeps them.
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
