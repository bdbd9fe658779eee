/**
 * A job's W3C trace context, stored with the job so that the publisher, which runs later from a
 * database poll, continues the creator's trace: `trace_parent` (`traceparent`, e.g.
 * `00-<32 hex trace id>-<16 hex span id>-01`) and `trace_state` (`tracestate`). Both nullable: a
 * job created without one is published as the root of a new trace, or untraced. Any creator
 * through SQL may set them; the checks keep a malformed value from reaching a message header.
 *
 * The checks are added `NOT VALID`: every existing row has NULL in the new columns, so none can
 * break them, and the table is not scanned under the ALTER's lock. New and updated rows are checked.
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
