/**
 * The step reads only the columns a decision depends on, so its write sets only the columns the
 * machine assigned: the jobs' rows of its parameters carry a bit mask of them (`assigned`, bit i
 * for the i-th mutable column but `status`, in `CONTEXT_COLUMNS` order). The function keeps
 * migration 0013's row estimate.
 */
import { sql, type Kysely } from 'kysely';

const BEFORE = sql`recognition_step_jobs(
  tid[], xid[], text[], text[], text[], integer[], timestamptz[], timestamptz[], timestamptz[],
  timestamptz[], timestamptz[], jsonb[], text[], text[], text[], bigint[], text[], text[], text[])`;

const AFTER = sql`recognition_step_jobs(
  tid[], xid[], text[], text[], text[], integer[], timestamptz[], timestamptz[], timestamptz[],
  timestamptz[], timestamptz[], jsonb[], text[], text[], text[], bigint[], text[], integer[], text[], text[])`;

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`DROP FUNCTION ${BEFORE}`.execute(db);
  await sql`
    CREATE FUNCTION ${AFTER}
    RETURNS TABLE (
      ctid tid, version xid, status text, service_name text, service_version text,
      publish_attempts integer, next_publish_at timestamptz, published_at timestamptz,
      reply_deadline timestamptz, started_at timestamptz, finished_at timestamptz,
      metrics jsonb, error_code text, error_message text, result_schema_version text,
      result_s3_object_id bigint, result_msg_id text, assigned integer, result_bucket text,
      result_key text)
    LANGUAGE plpgsql STABLE ROWS 100 AS $$
    BEGIN
      RETURN QUERY SELECT * FROM unnest(
        $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20);
    END $$`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP FUNCTION ${AFTER}`.execute(db);
  await sql`
    CREATE FUNCTION ${BEFORE}
    RETURNS TABLE (
      ctid tid, version xid, status text, service_name text, service_version text,
      publish_attempts integer, next_publish_at timestamptz, published_at timestamptz,
      reply_deadline timestamptz, started_at timestamptz, finished_at timestamptz,
      metrics jsonb, error_code text, error_message text, result_schema_version text,
      result_s3_object_id bigint, result_msg_id text, result_bucket text, result_key text)
    LANGUAGE plpgsql STABLE ROWS 100 AS $$
    BEGIN
      RETURN QUERY SELECT * FROM unnest(
        $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19);
    END $$`.execute(db);
}
