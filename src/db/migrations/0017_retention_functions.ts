/**
 * Retention and `quarantine purge` delete through two `SECURITY DEFINER` functions, so the runtime
 * role needs no `DELETE` on any table: `recognition_retention_delete_jobs` (one batch of a final
 * status's walk, current jobs skipped) and `recognition_retention_delete_quarantined`. Each carries
 * the rule of what may go (docs/operations.md, "Retention").
 */
import { sql, type Kysely } from 'kysely';

/** The final statuses when this migration was written. Never edit: add a migration. */
const FINAL_0017 = ['done', 'needs_check', 'error', 'timeout', 'dlq'] as const;

const JOBS = sql`recognition_retention_delete_jobs(text, timestamptz, timestamptz, uuid, integer)`;
const QUARANTINED = sql`recognition_retention_delete_quarantined(timestamptz, text, integer)`;

export async function up(db: Kysely<unknown>): Promise<void> {
  const final = sql.join(FINAL_0017.map((s) => sql.lit(s)));
  await sql`
    CREATE FUNCTION recognition_retention_delete_jobs(
      job_status text, finished_before timestamptz, after_finished_at timestamptz, after_id uuid,
      batch_size integer)
    RETURNS TABLE (scanned integer, last_finished_at text, last_id uuid, jobs integer, transitions integer)
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
      WITH scanned AS (
        SELECT j.id, j.finished_at
        FROM recognition_job j
        WHERE j.status = job_status
          AND j.status IN (${final})
          AND j.finished_at < finished_before
          AND (j.finished_at, j.id) > (coalesce(after_finished_at, '-infinity'),
                                       coalesce(after_id, '00000000-0000-0000-0000-000000000000'))
        ORDER BY j.finished_at, j.id
        LIMIT batch_size
      ),
      doomed AS (
        SELECT j.id
        FROM recognition_job j
        WHERE j.id IN (
          SELECT s.id FROM scanned s
          WHERE NOT EXISTS (SELECT 1 FROM stored_file f WHERE f.current_recognition_job_id = s.id)
        )
        FOR UPDATE OF j SKIP LOCKED
      ),
      gone_transitions AS (
        DELETE FROM recognition_job_transition t USING doomed d WHERE t.job_id = d.id RETURNING 1
      ),
      gone_jobs AS (
        DELETE FROM recognition_job j USING doomed d WHERE j.id = d.id RETURNING 1
      ),
      last AS (
        SELECT to_char(s.finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS finished_key, s.id
        FROM scanned s ORDER BY s.finished_at DESC, s.id DESC LIMIT 1
      )
      SELECT (SELECT count(*) FROM scanned)::int,
             (SELECT finished_key FROM last),
             (SELECT id FROM last),
             (SELECT count(*) FROM gone_jobs)::int,
             (SELECT count(*) FROM gone_transitions)::int
    $$`.execute(db);
  await sql`
    CREATE FUNCTION recognition_retention_delete_quarantined(
      received_before timestamptz, only_reason text, batch_size integer)
    RETURNS integer
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
      WITH doomed AS (
        SELECT q.id FROM inbox_quarantine q
        WHERE q.received_at < received_before AND (only_reason IS NULL OR q.reason = only_reason)
        ORDER BY q.received_at, q.id
        LIMIT batch_size
        FOR UPDATE SKIP LOCKED
      ),
      gone AS (DELETE FROM inbox_quarantine q USING doomed d WHERE q.id = d.id RETURNING 1)
      SELECT count(*)::int FROM gone
    $$`.execute(db);
  await sql`REVOKE ALL ON FUNCTION ${JOBS}, ${QUARANTINED} FROM PUBLIC`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP FUNCTION ${QUARANTINED}`.execute(db);
  await sql`DROP FUNCTION ${JOBS}`.execute(db);
}
