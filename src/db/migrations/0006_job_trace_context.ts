/**
 * A job's W3C trace context (`trace_parent`, `trace_state`), stored with the job so the publisher
 * continues the creator's trace; nullable. The checks keep a malformed value from reaching a
 * header, and are added `NOT VALID` (every existing row is NULL there), so the table is not scanned.
 */
import { sql, type Kysely } from 'kysely';

/** The most of `tracestate` a vendor must pass on (W3C Trace Context, "tracestate limits"). */
export const TRACE_STATE_MAX_CHARS = 512;

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    ALTER TABLE recognition_job
      ADD COLUMN trace_parent text,
      ADD COLUMN trace_state text,
      ADD CONSTRAINT recognition_job_trace_parent_format
        CHECK (trace_parent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') NOT VALID,
      ADD CONSTRAINT recognition_job_trace_state_with_parent
        CHECK (trace_state IS NULL OR (trace_parent IS NOT NULL AND length(trace_state) <= ${sql.lit(TRACE_STATE_MAX_CHARS)})) NOT VALID`.execute(
    db,
  );
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE recognition_job DROP COLUMN trace_state, DROP COLUMN trace_parent`.execute(db);
}
