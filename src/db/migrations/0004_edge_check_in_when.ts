/**
 * The legal-edge check of migration 0002, compiled into the trigger's `WHEN` clause: a legal status
 * change is checked by the executor itself; only an illegal one calls `recognition_job_check_edge()`,
 * which raises migration 0002's error. The list is `LEGAL_EDGES_0002`, frozen; a migration that
 * changes the machine's edges rewrites both the table and the clause.
 */
import { sql, type Kysely } from 'kysely';
import { LEGAL_EDGES_0002 } from './0002_legal_edges.js';

export async function up(db: Kysely<unknown>): Promise<void> {
  const legal = sql.join(LEGAL_EDGES_0002.map(([from, to]) => sql`(${sql.lit(from)}, ${sql.lit(to)})`));
  await sql`DROP TRIGGER recognition_job_legal_edge ON recognition_job`.execute(db);
  await sql`
    CREATE TRIGGER recognition_job_legal_edge
      BEFORE UPDATE OF status ON recognition_job
      FOR EACH ROW
      WHEN (OLD.status IS DISTINCT FROM NEW.status AND (OLD.status, NEW.status) NOT IN (${legal}))
      EXECUTE FUNCTION recognition_job_check_edge()`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TRIGGER recognition_job_legal_edge ON recognition_job`.execute(db);
  await sql`
    CREATE TRIGGER recognition_job_legal_edge
      BEFORE UPDATE OF status ON recognition_job
      FOR EACH ROW
      WHEN (OLD.status IS DISTINCT FROM NEW.status)
      EXECUTE FUNCTION recognition_job_check_edge()`.execute(db);
}
