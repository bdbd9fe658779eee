/**
 * The step write's functions (migration 0013): the jobs' rows carry a bit mask (`assigned`) of the
 * columns the machine assigned, and each function unnests its arrays in its select list
 * (docs/performance.md, "What keeps the daemon fast").
 */
import { sql, type Kysely } from 'kysely';
import { STEP_FUNCTIONS_0013 } from './0013_step_write_rows.js';

const JOBS_BEFORE = sql`recognition_step_jobs(
  tid[], xid[], text[], text[], text[], integer[], timestamptz[], timestamptz[], timestamptz[],
  timestamptz[], timestamptz[], jsonb[], text[], text[], text[], bigint[], text[], text[], text[])`;

const JOBS_AFTER = sql`recognition_step_jobs(
  tid[], xid[], text[], text[], text[], integer[], timestamptz[], timestamptz[], timestamptz[],
  timestamptz[], timestamptz[], jsonb[], text[], text[], text[], bigint[], text[], integer[], text[], text[])`;

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE OR REPLACE FUNCTION recognition_step_objects(text[], text[], text[])
    RETURNS TABLE (bucket text, key text, created_by text)
    LANGUAGE plpgsql STABLE ROWS 100 AS $$
    BEGIN
      RETURN QUERY SELECT unnest($1), unnest($2), unnest($3);
    END $$`.execute(db);
  await sql`DROP FUNCTION ${JOBS_BEFORE}`.execute(db);
  await sql`
    CREATE FUNCTION ${JOBS_AFTER}
    RETURNS TABLE (
      ctid tid, version xid, status text, service_name text, service_version text,
      publish_attempts integer, next_publish_at timestamptz, published_at timestamptz,
      reply_deadline timestamptz, started_at timestamptz, finished_at timestamptz,
      metrics jsonb, error_code text, error_message text, result_schema_version text,
      result_s3_object_id bigint, result_msg_id text, assigned integer, result_bucket text,
      result_key text)
    LANGUAGE plpgsql STABLE ROWS 100 AS $$
    BEGIN
      RETURN QUERY SELECT unnest($1), unnest($2), unnest($3), unnest($4), unnest($5), unnest($6),
        unnest($7), unnest($8), unnest($9), unnest($10), unnest($11), unnest($12), unnest($13),
        unnest($14), unnest($15), unnest($16), unnest($17), unnest($18), unnest($19), unnest($20);
    END $$`.execute(db);
  await sql`
    CREATE OR REPLACE FUNCTION recognition_step_files(uuid[], uuid[], text[], text[])
    RETURNS TABLE (file_id uuid, job_id uuid, status text, error_code text)
    LANGUAGE plpgsql STABLE ROWS 100 AS $$
    BEGIN
      RETURN QUERY SELECT unnest($1), unnest($2), unnest($3), unnest($4);
    END $$`.execute(db);
  // `seq` numbers the rows from 1, as WITH ORDINALITY did.
  await sql`
    CREATE OR REPLACE FUNCTION recognition_step_transitions(uuid[], text[], text[], text[], text[], jsonb[])
    RETURNS TABLE (job_id uuid, from_status text, to_status text, event text, msg_id text, detail jsonb, seq bigint)
    LANGUAGE plpgsql STABLE ROWS 100 AS $$
    BEGIN
      RETURN QUERY SELECT unnest($1), unnest($2), unnest($3), unnest($4), unnest($5), unnest($6),
        generate_series(1::bigint, cardinality($1)::bigint);
    END $$`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP FUNCTION ${JOBS_AFTER}`.execute(db);
  for (const definition of STEP_FUNCTIONS_0013) await definition.execute(db);
}
