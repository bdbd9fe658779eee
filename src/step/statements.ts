/**
 * The step's reads and the retry's statements: fixed texts that take their batch as parameters
 * (typed arrays; a retry's JSON documents), so a driver that prepares statements by name parses
 * and plans each once per connection; and the rows they read. The event paths' write is
 * `write.ts`'s.
 */
import { FILE_STATUS } from '../../machines/index.js';
import { READ_JOB_COLUMNS, type EpochMs, type ReadJobRow } from '../db/jobRow.js';
import { defineStatement, type Statement } from './statement.js';
import { WRITTEN_JOB_COLUMNS } from './write.js';

/**
 * A job's row as the step reads it: the columns a decision depends on (its status and the context
 * the machine reads), whether its file points at it, the database clock, and where the row stands:
 * its address (`ctid`) and its version (`xmin`, the transaction that wrote this version of the
 * row). The write finds the row at that address, and only while it still holds that version.
 */
export type StepRow = ReadJobRow & {
  id: string;
  file_is_current: boolean;
  db_now: EpochMs;
  row_address: string;
  version: string;
};

/**
 * A time as milliseconds since the epoch ({@link EpochMs}), truncated to the millisecond as a
 * JavaScript Date would hold it.
 */
const epochMs = (time: string) => `(extract(epoch FROM date_trunc('milliseconds', ${time})) * 1000)::bigint`;

/**
 * {@link StepRow}'s columns: the times among them as {@link EpochMs}. The clock is the same in
 * every row of a statement; a scalar subquery computes it once per statement, not once per row.
 */
const STEP_ROW_COLUMNS = `j.id, ${READ_JOB_COLUMNS.filter((c) => c !== 'id')
  .map((c) =>
    (WRITTEN_JOB_COLUMNS as Record<string, string>)[c] === 'timestamptz'
      ? `${epochMs(`j.${c}`)} AS ${c}`
      : `j.${c}`,
  )
  .join(', ')},
         (f.current_recognition_job_id IS NOT DISTINCT FROM j.id) AS file_is_current,
         (SELECT ${epochMs('now()')}) AS db_now,
         j.ctid::text AS row_address, j.xmin::text AS version`;

/**
 * The lock of every job of the batch ($1, a uuid array), in id order so that concurrent batches
 * never deadlock. `unnest` drives the join, so the planner looks each id up in the primary key
 * whatever the batch and table sizes (with `id = ANY(…)` it may pick a sequential scan on a small
 * table).
 */
export const LOCK = defineStatement(
  'step_lock',
  `
  SELECT ${STEP_ROW_COLUMNS}
  FROM unnest($1::uuid[]) AS k(id)
  JOIN recognition_job j ON j.id = k.id
  JOIN stored_file f ON f.id = j.file_id
  ORDER BY j.id
  FOR UPDATE OF j`,
);

/** Which end of the due jobs (by reply deadline) the watchdog's batch is taken from. */
export type DueEnd = 'oldest' | 'newest';

/**
 * The watchdog's lock: due jobs (`published`/`processing` with a passed `reply_deadline`), served
 * by the partial index `recognition_job_reply_deadline_due_idx`, `$1` at most, skipping locked
 * rows (so no lock is ever waited for, and no order is needed against deadlocks). The jobs' files
 * are locked too, so that the write finds them at their addresses as well; a job whose file
 * another transaction holds is skipped with it, and the watchdog still never waits.
 *
 * The database clock is truncated to milliseconds because the machine's guard compares JavaScript
 * Dates (milliseconds) with the same truncated clock: a deadline of 12:00:00.0004 would be due in
 * SQL at 12:00:00.0007 but not in JS, and such a row would come back in every batch forever.
 */
function dueLockSql(order: 'ASC' | 'DESC'): string {
  return `
  SELECT ${STEP_ROW_COLUMNS}
  FROM recognition_job j
  JOIN stored_file f ON f.id = j.file_id
  WHERE j.status IN ('published', 'processing')
    AND j.reply_deadline < date_trunc('milliseconds', now())
  ORDER BY j.reply_deadline ${order}
  LIMIT $1
  FOR UPDATE OF j, f SKIP LOCKED`;
}

/**
 * The due lock from either end of the index: oldest passed deadline first, or newest first for a
 * sweep's second worker, so that neither worker's scan steps over the rows the other holds (SKIP
 * LOCKED visits each of them, row and lock manager, before skipping it) until they meet.
 */
export const DUE_LOCK: Readonly<Record<DueEnd, Statement>> = {
  oldest: defineStatement('step_due_lock', dueLockSql('ASC')),
  newest: defineStatement('step_due_lock_newest', dueLockSql('DESC')),
};

/**
 * The locked paths' check of the result objects a batch names ($1 buckets, $2 keys, side by side):
 * those `s3_object` already holds, which no result may register again. Read after the jobs are
 * locked, in the transaction that writes; an object registered after this read makes the write
 * find it and write nothing (see `WRITE` in `write.ts`).
 */
export const REGISTERED_OBJECTS = defineStatement(
  'step_registered_objects',
  `
  SELECT o.bucket, o.key, o.bucket_role, o.created_by
  FROM unnest($1::text[], $2::text[]) AS k(bucket, key)
  JOIN s3_object o ON o.bucket = k.bucket AND o.key = k.key`,
);

/** A row of {@link REGISTERED_OBJECTS}. */
export interface RegisteredObjectRow {
  bucket: string;
  key: string;
  bucket_role: string;
  created_by: string;
}
/** A job and its file, both locked for a retry, with the job its file points at now. */
export type RetryLockedRow = StepRow & { file_current_job_id: string | null };

/**
 * A retry's lock: the jobs ($1, a uuid array) and their files, in job id order (so that
 * concurrent retries never deadlock). The files are locked because the retry moves them, and so
 * that a second retry of the same job, waiting here for the first to commit, reads the file as the
 * first left it (the job's row itself does not change) and is refused.
 */
export const RETRY_LOCK = defineStatement(
  'step_retry_lock',
  `
  SELECT ${STEP_ROW_COLUMNS}, f.current_recognition_job_id AS file_current_job_id
  FROM unnest($1::uuid[]) AS k(id)
  JOIN recognition_job j ON j.id = k.id
  JOIN stored_file f ON f.id = j.file_id
  ORDER BY j.id
  FOR UPDATE OF j, f`,
);

/**
 * A retry's write, one statement, kept apart from the event paths' write so that theirs stays as
 * it is: $1 the next attempts, $2 the transition rows (each naming the attempt it belongs to).
 *   a. move each file to its next attempt (QUEUED, no error code), only while it still points at
 *      the retried job (the guard repeated in SQL on purpose);
 *   b. insert the next attempts of the files moved, `pending` (the insert wakes the publisher);
 *   c. append the retried jobs' rows and the new jobs' creation rows, for the files moved only.
 * Foreign keys are checked at the statement's end, so the files may point at jobs it inserts.
 * Returns the ids of the jobs inserted.
 */
export const RETRY_WRITE = defineStatement(
  'step_retry_write',
  `
  WITH next AS (
    SELECT * FROM jsonb_to_recordset($1::jsonb)
      AS n(id uuid, file_id uuid, attempt integer, target_service text, retry_of uuid)
  ),
  file AS (
    UPDATE stored_file AS f
    SET current_recognition_job_id = n.id, status = '${FILE_STATUS.QUEUED}', error_code = NULL, updated_at = now()
    FROM next AS n
    WHERE f.id = n.file_id AND f.current_recognition_job_id = n.retry_of
    RETURNING n.id, n.file_id, n.attempt, n.target_service
  ),
  job AS (
    INSERT INTO recognition_job (id, file_id, attempt, target_service)
    SELECT id, file_id, attempt, target_service FROM file
    RETURNING id
  ),
  log AS (
    INSERT INTO recognition_job_transition (job_id, from_status, to_status, event, msg_id, detail)
    SELECT t.job_id, t.from_status, t.to_status, t.event, NULL, t.detail
    FROM jsonb_to_recordset($2::jsonb)
      AS t(seq integer, attempt_id uuid, job_id uuid, from_status text, to_status text, event text, detail jsonb)
    WHERE t.attempt_id IN (SELECT id FROM file)
    ORDER BY t.seq
  )
  SELECT id::text FROM job`,
);
