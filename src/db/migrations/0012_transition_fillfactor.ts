/**
 * `recognition_job_transition` at fillfactor 95: an append-only log whose new rows go to its end
 * rather than into the crumbs of free space the free space map lists on old pages
 * (docs/performance.md, "History and its indexes"). No page is rewritten.
 */
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE recognition_job_transition SET (fillfactor = 95)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE recognition_job_transition RESET (fillfactor)`.execute(db);
}
