/**
 * `recognition_job_transition` is an append-only log: its new rows belong at its end, beside the
 * other recent ones. With the default fillfactor (100) an insert takes any page the free space
 * map says can hold the row, and after a vacuum the map lists the crumbs left at the end of
 * nearly every page of the history (rows are of different sizes): each transition of a sweep or
 * a batch then lands on another old page, which is read back and, the first time after each
 * checkpoint, written whole to the WAL. At fillfactor 95 an insert takes a page only if 5 % of it
 * stays free after the row, so crumbs are passed over and new rows go to the end; a page that
 * retention has emptied still takes new rows. The cost is up to 5 % of each page left unused.
 *
 * Every insert follows it at once, into old pages as into new ones; no page is rewritten.
 */
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE recognition_job_transition SET (fillfactor = 95)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE recognition_job_transition RESET (fillfactor)`.execute(db);
}
