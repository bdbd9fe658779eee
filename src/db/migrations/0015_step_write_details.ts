/**
 * The step write's transition rows name their detail document by its place in one array of the
 * batch's distinct documents (docs/performance.md, "What keeps the daemon fast"). The overload of
 * migration 0013 is dropped.
 */
import { sql, type Kysely, type RawBuilder } from 'kysely';

const WITH_DOCUMENTS = sql`recognition_step_transitions(uuid[], text[], text[], text[], text[], jsonb[])`;
const WITH_PLACES = sql`recognition_step_transitions(uuid[], text[], text[], text[], text[], integer[])`;

/** `seq` numbers the rows from 1, as WITH ORDINALITY would. */
const body = sql`
    LANGUAGE plpgsql STABLE ROWS 100 AS $$
    BEGIN
      RETURN QUERY SELECT unnest($1), unnest($2), unnest($3), unnest($4), unnest($5), unnest($6),
        generate_series(1::bigint, cardinality($1)::bigint);
    END $$`;

/** Drop the overload `from` and create `to`, whose rows' `detail` column is of the type `detail`. */
async function replace(
  db: Kysely<unknown>,
  from: RawBuilder<unknown>,
  to: RawBuilder<unknown>,
  detail: RawBuilder<unknown>,
) {
  await sql`DROP FUNCTION ${from}`.execute(db);
  await sql`
    CREATE FUNCTION ${to}
    RETURNS TABLE (job_id uuid, from_status text, to_status text, event text, msg_id text, detail ${detail}, seq bigint)
    ${body}`.execute(db);
}

export async function up(db: Kysely<unknown>): Promise<void> {
  await replace(db, WITH_DOCUMENTS, WITH_PLACES, sql`integer`);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await replace(db, WITH_PLACES, WITH_DOCUMENTS, sql`jsonb`);
}
