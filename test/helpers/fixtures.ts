/**
 * Test fixtures: files and jobs inserted directly in any state, so a test can start from the row a
 * scenario names. (Inserts only; every change of a job in a test goes through the step.)
 */
import { randomUUID } from 'node:crypto';
import { sql, type Kysely } from 'kysely';
import type { JobStatus } from '../../machines/index.js';
import type { Database, JobRow } from '../../src/db/schema.js';

export interface JobFixture {
  jobId: string;
  fileId: string;
}

/** Insert a file and a job in `status` (default `published`, with a deadline 10 min away). */
export async function insertJob(
  db: Kysely<Database>,
  opts: Partial<Omit<JobRow, 'id' | 'file_id'>> & {
    status?: JobStatus;
    fileIsCurrent?: boolean;
    jobId?: string;
  } = {},
): Promise<JobFixture> {
  const jobId = opts.jobId ?? randomUUID();
  const status = opts.status ?? 'published';
  const { fileIsCurrent = true, jobId: _jobId, ...cols } = opts;
  return db.transaction().execute(async (tx) => {
    const obj = await tx
      .insertInto('s3_object')
      .values({
        bucket: 'arm-ka',
        key: `uploads/${randomUUID()}.xlsx`,
        bucket_role: 'uploads',
        created_by: 'test',
      })
      .returning('id')
      .executeTakeFirstOrThrow();
    const file = await tx
      .insertInto('stored_file')
      .values({
        s3_object_id: obj.id,
        original_name: 'report.xlsx',
        status: status === 'pending' ? 'QUEUED' : status === 'processing' ? 'PROCESSING' : 'QUEUED',
      })
      .returning('id')
      .executeTakeFirstOrThrow();
    const published = status !== 'pending';
    await tx
      .insertInto('recognition_job')
      .values({
        id: jobId,
        file_id: file.id,
        attempt: 1,
        target_service: 'tabular-parser',
        publish_attempts: published ? 1 : 0,
        next_publish_at: published ? null : sql<Date>`now()`,
        published_at: published ? sql<Date>`now() - interval '1 minute'` : null,
        reply_deadline: published ? sql<Date>`now() + interval '10 minutes'` : null,
        started_at: status === 'processing' ? sql<Date>`now() - interval '30 seconds'` : null,
        service_name: status === 'processing' ? 'tabular-parser' : null,
        service_version: status === 'processing' ? '1.0.0' : null,
        ...(cols as object),
        status,
      } as never)
      .execute();
    if (fileIsCurrent) {
      await tx
        .updateTable('stored_file')
        .set({ current_recognition_job_id: jobId })
        .where('id', '=', file.id)
        .execute();
    }
    return { jobId, fileId: file.id };
  });
}

/** Every row of every table the project writes, in a stable order: for "nothing changed" checks. */
export async function snapshotTables(db: Kysely<Database>) {
  const [jobs, files, objects, transitions, quarantine] = await Promise.all([
    db.selectFrom('recognition_job').selectAll().orderBy('id').execute(),
    db.selectFrom('stored_file').selectAll().orderBy('id').execute(),
    db.selectFrom('s3_object').selectAll().orderBy('id').execute(),
    db.selectFrom('recognition_job_transition').selectAll().orderBy('id').execute(),
    db.selectFrom('inbox_quarantine').selectAll().orderBy('id').execute(),
  ]);
  return { jobs, files, objects, transitions, quarantine };
}

/** One job's row, its file's row and its transitions. */
export async function loadAll(db: Kysely<Database>, jobId: string) {
  const job = await db
    .selectFrom('recognition_job')
    .selectAll()
    .where('id', '=', jobId)
    .executeTakeFirstOrThrow();
  const file = await db
    .selectFrom('stored_file')
    .selectAll()
    .where('id', '=', job.file_id)
    .executeTakeFirstOrThrow();
  const transitions = await db
    .selectFrom('recognition_job_transition')
    .selectAll()
    .where('job_id', '=', jobId)
    .orderBy('id')
    .execute();
  return { job, file, transitions };
}

/** The results bucket the tests' daemons are configured with (`RESULTS_BUCKET`'s default). */
export const RESULTS = { resultsBucket: 'arm-ka' } as const;

/**
 * Make the database refuse every transition of `jobId`: a trigger raises a check violation
 * ('refused by the test', naming its table and constraint), a value refused, the message's fault.
 */
export async function refuseTransitionsOf(db: Kysely<Database>, jobId: string): Promise<void> {
  await sql`
    CREATE FUNCTION test_refuse_transition() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.job_id = ${sql.lit(jobId)}::uuid THEN
        RAISE EXCEPTION 'refused by the test'
          USING ERRCODE = 'check_violation', TABLE = 'recognition_job_transition', CONSTRAINT = 'test_refuse';
      END IF;
      RETURN NEW;
    END $$`.execute(db);
  await sql`
    CREATE TRIGGER test_refuse_transition BEFORE INSERT ON recognition_job_transition
    FOR EACH ROW EXECUTE FUNCTION test_refuse_transition()`.execute(db);
}
