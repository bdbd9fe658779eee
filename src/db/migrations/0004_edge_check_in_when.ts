/**
 * The legal-edge check of migration 0002, made cheap: the legal status changes are compiled into
 * the trigger's `WHEN` clause, so a legal change (every change the step makes) is checked by the
 * executor itself, without calling PL/pgSQL or querying `recognition_job_edge`. Only an illegal
 * change calls `recognition_job_check_edge()`, which consults the table and raises the error
 * migration 0002 defines (check_violation, constraint `recognition_job_legal_edge`).
 *
 * Why: a PL/pgSQL call and a table lookup per status change are paid by every result applied and
 * every job timed out, the hottest writes of the system (docs/performance.md).
 *
 * The list is `LEGAL_EDGES_0002`, frozen: the table and the clause hold the same edges. A migration
 * that changes the machine's edges must rewrite both (test/integration/statecharts.test.ts tries
 * every status pair against the machine, so a clause left behind fails there).
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
