/**
 * The chart is what the database enforces: the machine's legal status changes, frozen here as a
 * literal list in `recognition_job_edge`, and a trigger that rejects any other change of
 * `recognition_job.status`, whoever makes it. The list is a copy, never an import
 * (`test/unit/legalEdges.test.ts` compares it with the machine). Updates that keep the status pass.
 */
import { sql, type Kysely } from 'kysely';

/** `legalEdges()` of the machine when this migration was written. Never edit: add a migration. */
export const LEGAL_EDGES_0002: ReadonlyArray<readonly [from: string, to: string]> = [
  ['pending', 'dlq'],
  ['pending', 'done'],
  ['pending', 'error'],
  ['pending', 'needs_check'],
  ['pending', 'published'],
  ['processing', 'done'],
  ['processing', 'error'],
  ['processing', 'needs_check'],
  ['processing', 'timeout'],
  ['published', 'dlq'],
  ['published', 'done'],
  ['published', 'error'],
  ['published', 'needs_check'],
  ['published', 'processing'],
  ['published', 'timeout'],
];

export async function up(db: Kysely<unknown>): Promise<void> {
  const values = sql.join(LEGAL_EDGES_0002.map(([from, to]) => sql`(${from}, ${to})`));
  await sql`
    CREATE TABLE recognition_job_edge (
      from_status text NOT NULL,
      to_status   text NOT NULL,
      CONSTRAINT recognition_job_edge_pkey PRIMARY KEY (from_status, to_status),
      CONSTRAINT recognition_job_edge_changes_status CHECK (from_status <> to_status)
    )`.execute(db);
  await sql`INSERT INTO recognition_job_edge (from_status, to_status) VALUES ${values}`.execute(db);
  await sql`
    CREATE FUNCTION recognition_job_check_edge() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NOT EXISTS (
        SELECT 1 FROM recognition_job_edge WHERE from_status = OLD.status AND to_status = NEW.status
      ) THEN
        RAISE EXCEPTION 'illegal recognition_job status change % -> % (job %)', OLD.status, NEW.status, OLD.id
          USING ERRCODE = 'check_violation',
                CONSTRAINT = 'recognition_job_legal_edge',
                DETAIL = 'the legal status changes are the rows of recognition_job_edge, copied from the lifecycle machine',
                HINT = 'change a job only through its machine (the step); see visualizations/recognition-job.md';
      END IF;
      RETURN NEW;
    END $$;

    CREATE TRIGGER recognition_job_legal_edge
      BEFORE UPDATE OF status ON recognition_job
      FOR EACH ROW
      WHEN (OLD.status IS DISTINCT FROM NEW.status)
      EXECUTE FUNCTION recognition_job_check_edge();
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    DROP TRIGGER recognition_job_legal_edge ON recognition_job;
    DROP FUNCTION recognition_job_check_edge();
    DROP TABLE recognition_job_edge;
  `.execute(db);
}
