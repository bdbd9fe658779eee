/**
 * New jobs and files get time-ordered ids (UUID version 7, RFC 9562): the first 48 bits are the
 * creation time in milliseconds, the rest random. A B-tree keyed by such an id keeps the entries
 * of recent rows together at its right edge, so the pages that the hot paths write — the primary
 * keys, `recognition_job_file_attempt_key` (by `file_id`), the transitions' `(job_id, id)` index
 * and a result object's key (`results/<file_id>/<job_id>/…`) — are the pages of recent jobs, few
 * and cached, whatever the size of the history. Random ids spread the same writes over every page
 * of indexes that grow with the history (docs/performance.md, "History and its indexes").
 *
 * PostgreSQL 15 has no UUIDv7 function: `recognition_uuid_v7()` takes `gen_random_uuid()`, puts
 * the clock's milliseconds into its first six bytes and sets the version nibble to 7 (the variant
 * bits of a version-4 UUID are already RFC 9562's). Rows inserted with an id of their own keep it:
 * an uploader that registers files should also use time-ordered ids (docs/operations.md).
 * Existing ids stay as they are.
 */
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE FUNCTION recognition_uuid_v7() RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
      SELECT encode(set_byte(overlay(r.bytes PLACING r.millis FROM 1 FOR 6), 6, (get_byte(r.bytes, 6) & 15) | 112), 'hex')::uuid
      FROM (SELECT uuid_send(gen_random_uuid()) AS bytes,
                   substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3) AS millis) AS r
    $$`.execute(db);
  await sql`ALTER TABLE recognition_job ALTER COLUMN id SET DEFAULT recognition_uuid_v7()`.execute(db);
  await sql`ALTER TABLE stored_file ALTER COLUMN id SET DEFAULT recognition_uuid_v7()`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE stored_file ALTER COLUMN id SET DEFAULT gen_random_uuid()`.execute(db);
  await sql`ALTER TABLE recognition_job ALTER COLUMN id SET DEFAULT gen_random_uuid()`.execute(db);
  await sql`DROP FUNCTION recognition_uuid_v7()`.execute(db);
}
