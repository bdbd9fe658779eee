/**
 * `recognition_audit`: one row per operator action that changes jobs or the quarantine (who, when,
 * what, on which selection, how many, and the note typed), so a person on call can ask what was
 * done and why. Rows are only inserted: the runtime role may not update them
 * (`deploy/postgres/narrow-runtime.sql`). The action list is this migration's own, frozen.
 */
import { sql, type Kysely } from 'kysely';

/** The actions this migration allows. Never edit: add a migration. */
export const AUDIT_ACTIONS_0020 = [
  'jobs retry',
  'quarantine replay',
  'quarantine purge',
  'inbox replay',
] as const;

export async function up(db: Kysely<unknown>): Promise<void> {
  const actions = sql.join(AUDIT_ACTIONS_0020.map((a) => sql.lit(a)));
  await sql`
    CREATE TABLE recognition_audit (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      at timestamptz NOT NULL DEFAULT now(),
      actor text NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
      via text NOT NULL CHECK (via IN ('cli', 'console')),
      action text NOT NULL CHECK (action IN (${actions})),
      selection jsonb NOT NULL,
      affected integer NOT NULL CHECK (affected >= 0),
      outcome jsonb NOT NULL DEFAULT '{}',
      note text CHECK (length(note) <= 2000)
    )`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE recognition_audit`.execute(db);
}
