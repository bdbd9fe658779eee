/**
 * Reading and creating files and jobs. Creating a job is an insert; every later change of a job
 * goes through the step (`src/step/`), and so does a retry's next attempt (`applyRetries`).
 */
import { sql, type Kysely } from 'kysely';
import {
  FAILED_JOB_STATUSES,
  FILE_STATUS,
  JOB_STATUSES,
  type FailedJobStatus,
  type JobStatus,
} from '../../machines/statuses.js';
import { UsageError } from '../errors.js';
import type { Database, FileRow, JobRow, S3ObjectRow, TransitionRow } from './schema.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const SERVICE = /^[A-Za-z0-9_-]{1,100}$/;

/** Throws a UsageError unless `id` is a uuid. */
export function assertUuid(id: string, what: string): void {
  if (!UUID.test(id)) throw new UsageError(`${what} is not a uuid: ${JSON.stringify(id)}`);
}

/** Register an uploaded file: its `s3_object` (role `uploads`) and its `stored_file` (UPLOADED). */
export async function addFile(
  db: Kysely<Database>,
  file: { bucket: string; key: string; name: string; createdBy?: string },
): Promise<FileRow> {
  if (!file.bucket || !file.key || !file.name)
    throw new UsageError('a file needs a bucket, a key and a name');
  return db.transaction().execute(async (tx) => {
    const obj = await tx
      .insertInto('s3_object')
      .values({
        bucket: file.bucket,
        key: file.key,
        bucket_role: 'uploads',
        created_by: file.createdBy ?? 'recognition-core',
      })
      .onConflict((oc) => oc.columns(['bucket', 'key']).doNothing())
      .returning('id')
      .executeTakeFirst();
    if (!obj) throw new UsageError(`s3://${file.bucket}/${file.key} is already registered`);
    return tx
      .insertInto('stored_file')
      .values({ s3_object_id: obj.id, original_name: file.name })
      .returningAll()
      .executeTakeFirstOrThrow();
  });
}

/** A W3C trace context as text (`traceparent`, optionally `tracestate`), checked by the caller. */
export interface JobTraceContext {
  traceparent: string;
  tracestate?: string | null;
}

/**
 * Create a job for a file, in one transaction: insert it `pending` (attempt = the file's last
 * attempt + 1), point the file's `current_recognition_job_id` at it and set the file `QUEUED`.
 * The insert wakes the publisher (NOTIFY). `traceContext` is stored on the row (`trace_parent`,
 * `trace_state`): the publish of the job continues that trace.
 */
export async function createJob(
  db: Kysely<Database>,
  input: { fileId: string; targetService: string; traceContext?: JobTraceContext | undefined },
): Promise<JobRow> {
  assertUuid(input.fileId, 'file id');
  if (!SERVICE.test(input.targetService)) {
    throw new UsageError(
      `service name must be 1-100 letters, digits, '-' or '_': ${JSON.stringify(input.targetService)}`,
    );
  }
  return db.transaction().execute(async (tx) => {
    const file = await tx
      .selectFrom('stored_file')
      .select(['id'])
      .where('id', '=', input.fileId)
      .forUpdate()
      .executeTakeFirst();
    if (!file) throw new UsageError(`no stored_file with id ${input.fileId}`);
    const { max } = await tx
      .selectFrom('recognition_job')
      .select((eb) => eb.fn.max<number | null>('attempt').as('max'))
      .where('file_id', '=', input.fileId)
      .executeTakeFirstOrThrow();
    const job = await tx
      .insertInto('recognition_job')
      .values({
        file_id: input.fileId,
        attempt: (max ?? 0) + 1,
        target_service: input.targetService,
        trace_parent: input.traceContext?.traceparent ?? null,
        trace_state: input.traceContext?.tracestate || null,
      })
      .returningAll()
      .executeTakeFirstOrThrow();
    await tx
      .updateTable('stored_file')
      .set({
        current_recognition_job_id: job.id,
        status: FILE_STATUS.QUEUED,
        error_code: null,
        updated_at: sql`now()`,
      })
      .where('id', '=', input.fileId)
      .execute();
    return job;
  });
}

/** A job with its file and, if any, its result object. */
export interface JobView {
  job: JobRow;
  file: FileRow;
  result: S3ObjectRow | null;
}

/** Load a job, its file and its result object; undefined when there is no such job. */
export async function loadJob(db: Kysely<Database>, jobId: string): Promise<JobView | undefined> {
  assertUuid(jobId, 'job id');
  const job = await db.selectFrom('recognition_job').selectAll().where('id', '=', jobId).executeTakeFirst();
  if (!job) return undefined;
  const file = await db
    .selectFrom('stored_file')
    .selectAll()
    .where('id', '=', job.file_id)
    .executeTakeFirstOrThrow();
  const result = job.result_s3_object_id
    ? ((await db
        .selectFrom('s3_object')
        .selectAll()
        .where('id', '=', job.result_s3_object_id)
        .executeTakeFirst()) ?? null)
    : null;
  return { job, file, result };
}

/** A job's transitions, oldest first. */
export async function loadTransitions(db: Kysely<Database>, jobId: string): Promise<TransitionRow[]> {
  assertUuid(jobId, 'job id');
  return db
    .selectFrom('recognition_job_transition')
    .selectAll()
    .where('job_id', '=', jobId)
    .orderBy('id')
    .execute();
}

/** A moment in a filter: a span back from the database clock, or an absolute time. */
export type Since = { agoMs: number } | { at: Date };

/** The SQL value of `since`: spans are taken back from the database clock, never this process's. */
export function sinceSql(since: Since) {
  return 'agoMs' in since
    ? sql<Date>`now() - ${since.agoMs} * interval '1 millisecond'`
    : sql<Date>`${since.at.toISOString()}::timestamptz`;
}

/** What {@link listJobs} selects; every filter is optional, `limit` is not. */
export interface JobFilter {
  statuses?: readonly JobStatus[] | undefined;
  service?: string | undefined;
  fileId?: string | undefined;
  createdSince?: Since | undefined;
  finishedSince?: Since | undefined;
  /**
   * Only jobs after this job in the list's order (newest first): the next page after the last row
   * shown, read from the index at that row's exact (created_at, id), never an OFFSET.
   */
  before?: string | undefined;
  limit: number;
}

/**
 * Jobs matching `filter`, newest first (by `created_at`, then id, both descending), at most
 * `limit`.
 *
 * The query reads each status on its own — the newest `limit` rows of each, merged — so that
 * every part is served by an index whatever the history: a final status by the partial
 * (status, created_at, id) index, read backwards and stopped after `limit` rows; an open status
 * by its due index (migration 0001), which holds only the jobs in flight. One query over all
 * statuses at once would have to sort every matching row, and rows of finished jobs grow without
 * bound. A file filter is served by the unique (file_id, attempt) index in every part.
 */
export async function listJobs(db: Kysely<Database>, filter: JobFilter): Promise<JobRow[]> {
  return listJobsQuery(db, filter).execute();
}

/** The query of {@link listJobs}, not run: a test explains it. Throws a UsageError on a malformed file id. */
export function listJobsQuery(db: Kysely<Database>, filter: JobFilter) {
  if (filter.fileId !== undefined) assertUuid(filter.fileId, 'file id');
  if (filter.before !== undefined) assertUuid(filter.before, 'cursor job id');
  const statuses = filter.statuses?.length ? [...new Set(filter.statuses)] : [...JOB_STATUSES];
  const parts = statuses.map((status) => {
    // The status as a literal: the planner proves the partial index's predicate from it.
    let q = db.selectFrom('recognition_job').selectAll().where('status', '=', sql.lit(status));
    if (filter.service !== undefined) q = q.where('target_service', '=', filter.service);
    if (filter.fileId !== undefined) q = q.where('file_id', '=', filter.fileId);
    if (filter.createdSince) q = q.where('created_at', '>=', sinceSql(filter.createdSince));
    if (filter.finishedSince) q = q.where('finished_at', '>=', sinceSql(filter.finishedSince));
    if (filter.before !== undefined) {
      // A row comparison with the cursor's own (created_at, id), read once by its primary key: the
      // (status, created_at, id) index is read from the cursor on, at the column's full precision.
      const cursor = sql`(SELECT c.created_at FROM recognition_job c WHERE c.id = ${filter.before}::uuid)`;
      q = q.where(sql<boolean>`(created_at, id) < (${cursor}, ${filter.before}::uuid)`);
    }
    const newest = q.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(filter.limit);
    return db.selectFrom(newest.as('part')).selectAll();
  });
  const merged = parts.slice(1).reduce((all, part) => all.unionAll(part), parts[0]!);
  return db
    .selectFrom(merged.as('j'))
    .selectAll()
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(filter.limit);
}

/** What {@link findRetryCandidates} selects. */
export interface RetryFilter {
  statuses: readonly FailedJobStatus[];
  service?: string | undefined;
  /** Jobs that finished (failed) at or after this moment. */
  finishedSince?: Since | undefined;
  limit: number;
}

/** A failed job that is its file's current job: a candidate for a retry. */
export type RetryCandidate = Pick<
  JobRow,
  'id' | 'file_id' | 'attempt' | 'target_service' | 'status' | 'error_code' | 'finished_at'
>;

/**
 * Failed jobs (of `filter.statuses`) that are still their files' current jobs, oldest failure
 * first, at most `limit`; read without locks (the retry locks and decides again). Served by the
 * partial (status, finished_at, id) index of finished jobs, the files by their primary key.
 */
export async function findRetryCandidates(
  db: Kysely<Database>,
  filter: RetryFilter,
): Promise<RetryCandidate[]> {
  if (filter.statuses.length === 0) return [];
  let q = db
    .selectFrom('recognition_job as j')
    .innerJoin('stored_file as f', (join) =>
      join.onRef('f.id', '=', 'j.file_id').onRef('f.current_recognition_job_id', '=', 'j.id'),
    )
    .select([
      'j.id',
      'j.file_id',
      'j.attempt',
      'j.target_service',
      'j.status',
      'j.error_code',
      'j.finished_at',
    ])
    .where('j.status', 'in', [...filter.statuses])
    // The literal list lets the planner prove the partial index's predicate whatever the parameters.
    .where(sql<boolean>`j.status IN (${sql.join(FAILED_JOB_STATUSES.map((s) => sql.lit(s)))})`);
  if (filter.service !== undefined) q = q.where('j.target_service', '=', filter.service);
  if (filter.finishedSince) q = q.where('j.finished_at', '>=', sinceSql(filter.finishedSince));
  return q.orderBy('j.finished_at').orderBy('j.id').limit(filter.limit).execute();
}

/** The stored trace contexts of some jobs, by job id (jobs without one are left out). */
export async function loadTraceContexts(
  db: Kysely<Database>,
  jobIds: readonly string[],
): Promise<Map<string, JobTraceContext>> {
  const out = new Map<string, JobTraceContext>();
  if (jobIds.length === 0) return out;
  const rows = await db
    .selectFrom('recognition_job')
    .select(['id', 'trace_parent', 'trace_state'])
    .where('id', '=', sql<string>`ANY(${[...jobIds]}::uuid[])`)
    .where('trace_parent', 'is not', null)
    .execute();
  for (const r of rows) out.set(r.id, { traceparent: r.trace_parent!, tracestate: r.trace_state });
  return out;
}

/**
 * The job an id names: a job id, a file id (its current job, else its latest attempt), or a
 * message id (a job's `result_msg_id`, or a transition's `msg_id`). A message id is found through
 * the job id it carries (`kind:<job_id>:<attempt>`, as the contract names them): every lookup is
 * served by a primary key or the (file_id, attempt) and (job_id, id) indexes, never a scan.
 * Resolves with the job's id, or undefined when nothing matches.
 */
export async function findJobId(db: Kysely<Database>, text: string): Promise<string | undefined> {
  const id = text.trim();
  if (UUID.test(id)) {
    const job = await db.selectFrom('recognition_job').select('id').where('id', '=', id).executeTakeFirst();
    if (job) return job.id;
    const file = await db
      .selectFrom('stored_file')
      .select('current_recognition_job_id')
      .where('id', '=', id)
      .executeTakeFirst();
    if (file?.current_recognition_job_id) return file.current_recognition_job_id;
    const latest = await db
      .selectFrom('recognition_job')
      .select('id')
      .where('file_id', '=', id)
      .orderBy('attempt', 'desc')
      .limit(1)
      .executeTakeFirst();
    return latest?.id;
  }
  for (const [carried] of id.matchAll(UUID_IN_TEXT)) {
    const match = await db
      .selectFrom('recognition_job as j')
      .select('j.id')
      .where('j.id', '=', carried)
      .where((eb) =>
        eb.or([
          eb('j.result_msg_id', '=', id),
          eb.exists(
            eb
              .selectFrom('recognition_job_transition as t')
              .select('t.id')
              .whereRef('t.job_id', '=', 'j.id')
              .where('t.msg_id', '=', id),
          ),
        ]),
      )
      .executeTakeFirst();
    if (match) return match.id;
  }
  return undefined;
}

const UUID_IN_TEXT = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi;

/** Every attempt of a file, newest first (the unique (file_id, attempt) index). */
export async function loadAttempts(db: Kysely<Database>, fileId: string): Promise<JobRow[]> {
  assertUuid(fileId, 'file id');
  return db
    .selectFrom('recognition_job')
    .selectAll()
    .where('file_id', '=', fileId)
    .orderBy('attempt', 'desc')
    .execute();
}
