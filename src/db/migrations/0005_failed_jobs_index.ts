/**
 * An index for the operator's questions about failed jobs (`jobs list --status error
 * --finished-since 1h`, `jobs retry --status timeout --since 2h`): failed jobs by status and by
 * when they finished.
 *
 * Partial, over the failed statuses only: a job enters it once, when it fails, so the status
 * changes of the hot path (published, processing, done, needs_check) do not pay for it, and it
 * stays as small as the failures. The open statuses are served by the due indexes of migration
 * 0001, a file's jobs by the unique (file_id, attempt) index.
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
