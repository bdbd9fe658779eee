/**
 * The check that makes the step's unlocked fast path atomic: its write statement updates each job
 * only if the row is still the version it locked or read (`xmin`), and calls this function with
 * how many it updated against how many it meant to. Any difference raises a serialization failure
 * (40001), which aborts the whole statement — objects, job, file and transition alike — so the
 * step sends it again. See `applyUnlocked` in src/step/.
 */
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE FUNCTION recognition_job_versions_checked(updated bigint, expected integer) RETURNS integer
    LANGUAGE plpgsql AS $$
    BEGIN
      IF updated IS DISTINCT FROM expected THEN
        RAISE EXCEPTION 'recognition_job rows changed since they were read (% of % still current)', updated, expected
          USING ERRCODE = 'serialization_failure';
      END IF;
      RETURN updated;
    END $$`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP FUNCTION recognition_job_versions_checked(bigint, integer)`.execute(db);
}
