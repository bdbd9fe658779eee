/**
 * The step write's file changes and transition rows name their job by its place in the write's job
 * rows (from 1), and take the job's and file's ids from the row it updates, so an applied result
 * carries no uuid to parse (docs/performance.md, "What keeps the daemon fast"). The overloads of
 * migrations 0013 and 0015 are dropped.
 */
import { sql, type Kysely, type RawBuilder } from 'kysely';

/** One version of one function: what it takes, what it returns, its body. */
interface Version {
  signature: RawBuilder<unknown>;
  returns: RawBuilder<unknown>;
  query: RawBuilder<unknown>;
}

const FILES_BY_IDS: Version = {
  signature: sql`recognition_step_files(uuid[], uuid[], text[], text[])`,
  returns: sql`TABLE (file_id uuid, job_id uuid, status text, error_code text)`,
  query: sql`SELECT unnest($1), unnest($2), unnest($3), unnest($4)`,
};
const FILES_BY_PLACE: Version = {
  signature: sql`recognition_step_files(integer[], text[], text[])`,
  returns: sql`TABLE (job integer, status text, error_code text)`,
  query: sql`SELECT unnest($1), unnest($2), unnest($3)`,
};

/** `seq` numbers the rows from 1, as WITH ORDINALITY would. */
const transitionsQuery = sql`SELECT unnest($1), unnest($2), unnest($3), unnest($4), unnest($5), unnest($6),
        generate_series(1::bigint, cardinality($1)::bigint)`;
const TRANSITIONS_BY_ID: Version = {
  signature: sql`recognition_step_transitions(uuid[], text[], text[], text[], text[], integer[])`,
  returns: sql`TABLE (job_id uuid, from_status text, to_status text, event text, msg_id text, detail integer, seq bigint)`,
  query: transitionsQuery,
};
const TRANSITIONS_BY_PLACE: Version = {
  signature: sql`recognition_step_transitions(integer[], text[], text[], text[], text[], integer[])`,
  returns: sql`TABLE (job integer, from_status text, to_status text, event text, msg_id text, detail integer, seq bigint)`,
  query: transitionsQuery,
};

/** Drop the version `from` and create `to`. */
async function replace(db: Kysely<unknown>, from: Version, to: Version): Promise<void> {
  await sql`DROP FUNCTION ${from.signature}`.execute(db);
  await sql`
    CREATE FUNCTION ${to.signature} RETURNS ${to.returns}
    LANGUAGE plpgsql STABLE ROWS 100 AS $$
    BEGIN
      RETURN QUERY ${to.query};
    END $$`.execute(db);
}

export async function up(db: Kysely<unknown>): Promise<void> {
  await replace(db, FILES_BY_IDS, FILES_BY_PLACE);
  await replace(db, TRANSITIONS_BY_ID, TRANSITIONS_BY_PLACE);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await replace(db, TRANSITIONS_BY_PLACE, TRANSITIONS_BY_ID);
  await replace(db, FILES_BY_PLACE, FILES_BY_IDS);
}
