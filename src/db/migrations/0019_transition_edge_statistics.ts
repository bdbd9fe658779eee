/**
 * Extended statistics (a most-common-values list) over a transition's edge: `(from_status,
 * to_status, event)`. `ANALYZE` (autovacuum's included) fills it from its sample of the table, so
 * the daemon's HTTP figures can estimate how many transitions each edge has without reading the
 * table once it is too large to count (src/db/figures.ts, docs/monitoring.md). It costs nothing
 * on a write: only `ANALYZE` reads or updates it.
 */
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE STATISTICS IF NOT EXISTS recognition_job_transition_edge_stats (mcv)
      ON from_status, to_status, event FROM recognition_job_transition`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP STATISTICS IF EXISTS recognition_job_transition_edge_stats`.execute(db);
}
