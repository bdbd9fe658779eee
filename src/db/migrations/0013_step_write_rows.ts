/**
 * The step's write takes its batch as typed arrays, one per column, through PL/pgSQL functions with
 * a row estimate of a batch (`ROWS 100`), so the generic plan hashes the result objects against the
 * jobs (docs/performance.md, "What keeps the daemon fast").
 */
import { sql, type Kysely } from 'kysely';

/** The functions as this migration defines them; 0014's `down` defines them again. Never edit. */
export const STEP_FUNCTIONS_0013 = [
  sql`
    CREATE OR REPLACE FUNCTION recognition_step_objects(text[], text[], text[])
    RETURNS TABLE (bucket text, key text, created_by text)
    LANGUAGE plpgsql STABLE ROWS 100 AS $$
    BEGIN
      RETURN QUERY SELECT * FROM unnest($1, $2, $3);
    END $$`,
  sql`
    CREATE OR REPLACE FUNCTION recognition_step_jobs(
      tid[], xid[], text[], text[], text[], integer[], timestamptz[], timestamptz[], timestamptz[],
      timestamptz[], timestamptz[], jsonb[], text[], text[], text[], bigint[], text[], text[], text[])
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
    END $$`,
  sql`
    CREATE OR REPLACE FUNCTION recognition_step_files(uuid[], uuid[], text[], text[])
    RETURNS TABLE (file_id uuid, job_id uuid, status text, error_code text)
    LANGUAGE plpgsql STABLE ROWS 100 AS $$
    BEGIN
      RETURN QUERY SELECT * FROM unnest($1, $2, $3, $4);
    END $$`,
  sql`
    CREATE OR REPLACE FUNCTION recognition_step_transitions(uuid[], text[], text[], text[], text[], jsonb[])
    RETURNS TABLE (job_id uuid, from_status text, to_status text, event text, msg_id text, detail jsonb, seq bigint)
    LANGUAGE plpgsql STABLE ROWS 100 AS $$
    BEGIN
      RETURN QUERY SELECT * FROM unnest($1, $2, $3, $4, $5, $6) WITH ORDINALITY;
    END $$`,
];

export async function up(db: Kysely<unknown>): Promise<void> {
  for (const definition of STEP_FUNCTIONS_0013) await definition.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP FUNCTION recognition_step_transitions(uuid[], text[], text[], text[], text[], jsonb[])`.execute(
    db,
  );
  await sql`DROP FUNCTION recognition_step_files(uuid[], uuid[], text[], text[])`.execute(db);
  await sql`
    DROP FUNCTION recognition_step_jobs(tid[], xid[], text[], text[], text[], integer[], timestamptz[],
      timestamptz[], timestamptz[], timestamptz[], timestamptz[], jsonb[], text[], text[], text[], bigint[],
      text[], text[], text[])`.execute(db);
  await sql`DROP FUNCTION recognition_step_objects(text[], text[], text[])`.execute(db);
}
