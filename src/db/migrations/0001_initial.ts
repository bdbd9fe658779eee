/**
 * The tables of docs/lifecycle.md, "The data model". Status lists come from the machine's `as const` vocabularies, so a CHECK
 * constraint can never disagree with the lifecycle; changing a list means a new migration.
 */
import { sql, type Kysely } from 'kysely';
import { BUCKET_ROLES, FILE_STATUSES, JOB_STATUSES, QUARANTINE_REASONS } from '../../../machines/statuses.js';

/** `'a', 'b', 'c'` for an IN list; the values are our own constants, never input. */
const list = (values: readonly string[]) => sql.raw(values.map((v) => `'${v}'`).join(', '));

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE s3_object (
      id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      bucket      text NOT NULL,
      key         text NOT NULL,
      bucket_role text NOT NULL CHECK (bucket_role IN (${list(BUCKET_ROLES)})),
      created_by  text NOT NULL,
      created_at  timestamptz NOT NULL DEFAULT now(),
      CONSTRAINT s3_object_bucket_key_key UNIQUE (bucket, key)
    );

    CREATE TABLE stored_file (
      id                         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      s3_object_id               bigint NOT NULL REFERENCES s3_object (id),
      original_name              text NOT NULL,
      status                     text NOT NULL DEFAULT 'UPLOADED' CHECK (status IN (${list(FILE_STATUSES)})),
      error_code                 text,
      current_recognition_job_id uuid,
      created_at                 timestamptz NOT NULL DEFAULT now(),
      updated_at                 timestamptz NOT NULL DEFAULT now(),
      CONSTRAINT stored_file_error_code_only_on_error CHECK (status = 'ERROR' OR error_code IS NULL)
    );

    CREATE TABLE recognition_job (
      id                    uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      file_id               uuid NOT NULL REFERENCES stored_file (id),
      attempt               integer NOT NULL CHECK (attempt >= 1),
      target_service        text NOT NULL CHECK (target_service ~ '^[A-Za-z0-9_-]+$'),
      status                text NOT NULL DEFAULT 'pending' CHECK (status IN (${list(JOB_STATUSES)})),
      service_name          text,
      service_version       text,
      publish_attempts      integer NOT NULL DEFAULT 0 CHECK (publish_attempts >= 0),
      next_publish_at       timestamptz DEFAULT now(),
      published_at          timestamptz,
      reply_deadline        timestamptz,
      started_at            timestamptz,
      finished_at           timestamptz,
      metrics               jsonb,
      error_code            text,
      error_message         text,
      result_schema_version text,
      result_s3_object_id   bigint REFERENCES s3_object (id),
      result_msg_id         text,
      created_at            timestamptz NOT NULL DEFAULT now(),
      updated_at            timestamptz NOT NULL DEFAULT now(),
      CONSTRAINT recognition_job_file_attempt_key UNIQUE (file_id, attempt)
    );

    ALTER TABLE stored_file
      ADD CONSTRAINT stored_file_current_recognition_job_id_fkey
      FOREIGN KEY (current_recognition_job_id) REFERENCES recognition_job (id);

    -- The watchdog's and the publisher's queries touch only due rows, whatever the table's size.
    CREATE INDEX recognition_job_reply_deadline_due_idx
      ON recognition_job (reply_deadline) WHERE status IN ('published', 'processing');
    CREATE INDEX recognition_job_next_publish_due_idx
      ON recognition_job (next_publish_at) WHERE status = 'pending';
    -- (file_id lookups use the unique (file_id, attempt) index; every extra index on this table
    -- is paid by each status change, the hottest write of the system.)

    CREATE TABLE recognition_job_transition (
      id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      job_id      uuid NOT NULL REFERENCES recognition_job (id),
      from_status text NOT NULL CHECK (from_status IN (${list(JOB_STATUSES)})),
      to_status   text NOT NULL CHECK (to_status IN (${list(JOB_STATUSES)})),
      event       text NOT NULL,
      msg_id      text,
      at          timestamptz NOT NULL DEFAULT now(),
      detail      jsonb NOT NULL DEFAULT '{}'
    );
    CREATE INDEX recognition_job_transition_job_id_idx ON recognition_job_transition (job_id, id);

    CREATE TABLE inbox_quarantine (
      id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      stream         text,
      stream_seq     bigint,
      subject        text NOT NULL,
      msg_id         text,
      job_id         text,
      reason         text NOT NULL CHECK (reason IN (${list(QUARANTINE_REASONS)})),
      details        jsonb,
      payload        bytea NOT NULL,
      headers        jsonb NOT NULL DEFAULT '{}',
      received_at    timestamptz NOT NULL DEFAULT now(),
      replayed_at    timestamptz,
      replay_outcome text
    );
    -- A message redelivered after a crash between commit and ack is quarantined once.
    CREATE UNIQUE INDEX inbox_quarantine_stream_seq_key
      ON inbox_quarantine (stream, stream_seq) WHERE stream_seq IS NOT NULL;
    CREATE INDEX inbox_quarantine_reason_idx ON inbox_quarantine (reason, id);

    -- Wake the publisher as soon as a job is created (LISTEN/NOTIFY; the poll stays as a safety net).
    CREATE FUNCTION recognition_job_notify_created() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM pg_notify('recognition_job_created', '');
      RETURN NULL;
    END $$;
    CREATE TRIGGER recognition_job_notify_created
      AFTER INSERT ON recognition_job
      FOR EACH STATEMENT EXECUTE FUNCTION recognition_job_notify_created();
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    DROP TABLE inbox_quarantine;
    DROP TABLE recognition_job_transition;
    ALTER TABLE stored_file DROP CONSTRAINT stored_file_current_recognition_job_id_fkey;
    DROP TABLE recognition_job;
    DROP FUNCTION recognition_job_notify_created();
    DROP TABLE stored_file;
    DROP TABLE s3_object;
  `.execute(db);
}
