/**
 * New jobs and files get time-ordered ids (UUIDv7): `recognition_uuid_v7()` as the columns'
 * default, so the index entries of recent rows share the right edge of each index
 * (docs/performance.md, "History and its indexes"). Rows inserted with an id of their own keep it;
 * existing ids stay.
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
