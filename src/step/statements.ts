/**
 * The step's statements: fixed texts that take their batch as parameters (a uuid array, JSON
 * documents), so a driver that prepares statements by name parses and plans each once per
 * connection; and the rows they read.
 */
import { FILE_STATUS } from '../../machines/index.js';
import { JOB_STATE_COLUMNS, type JobStateRow, type MutableJobColumn } from '../db/jobRow.js';
import { defineStatement, type Statement } from './statement.js';

/** A job's row as the step reads it: its state, whether its file points at it, the database clock. */
export type StepRow = JobStateRow & { file_is_current: boolean; db_now: Date };
/**
 * A row read under this transaction's lock, with its address (`ctid`): nobody else can move a
 * locked row, so the write finds it there without a search of the primary key.
 */
export type LockedRow = StepRow & { row_address: string };
/** A locked row whose file is locked too, with the file's address. */
export type LockedWithFileRow = LockedRow & { file_address: string };
/** A row read without a lock, with its version: `xmin`, the transaction that wrote this version of the row. */
export type VersionedRow = StepRow & { version: string };

/** {@link StepRow}'s columns. */
const STEP_ROW_COLUMNS = `${JOB_STATE_COLUMNS.map((c) => `j.${c}`).join(', ')},
         (f.current_recognition_job_id IS NOT DISTINCT FROM j.id) AS file_is_current,
         date_trunc('milliseconds', now()) AS db_now`;

/**
 * Step 1: lock every job of the batch ($1, a uuid array), in id order so that concurrent batches
 * never deadlock. `unnest` drives the join, so the planner looks each id up in the primary key
 * whatever the batch and table sizes (with `id = ANY(…)` it may pick a sequential scan on a small
 * table).
 */
export const LOCK = defineStatement(
  'step_lock',
  `
  SELECT ${STEP_ROW_COLUMNS}, j.ctid::text AS row_address
  FROM unnest($1::uuid[]) AS k(id)
  JOIN recognition_job j ON j.id = k.id
  JOIN stored_file f ON f.id = j.file_id
  ORDER BY j.id
  FOR UPDATE OF j`,
);

/**
 * Step 1 of the unlocked path: the job's row ($1), not locked, with its version — any later update
 * changes `xmin`. One job, a scalar parameter: with an array PostgreSQL plans the statement anew at
 * every execution (its custom plan for one element looks cheaper than the generic plan's guess of
 * ten).
 */
export const READ = defineStatement(
  'step_read',
  `
  SELECT ${STEP_ROW_COLUMNS}, j.xmin::text AS version
  FROM recognition_job j
  JOIN stored_file f ON f.id = j.file_id
  WHERE j.id = $1::uuid`,
);

/**
 * The unlocked path's check of a decision that writes nothing: the row's current version,
 * `FOR SHARE` so that it waits for a transaction holding the row and then sees what that committed
 * (the lock ends with the statement). A write needs no such check — its version guard waits for
 * the holder too — but a decision with nothing to write would otherwise stand on a row that is
 * about to change: the publisher holds a job's lock while its message goes out, so the service's
 * ack can arrive before `published` commits, and a job still read as `pending` would have its ack
 * ignored for good.
 */
export const CONFIRM = defineStatement(
  'step_confirm',
  `
  SELECT j.id, j.xmin::text AS version
  FROM recognition_job j
  WHERE j.id = $1::uuid
  FOR SHARE OF j`,
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
  SELECT ${STEP_ROW_COLUMNS}, j.ctid::text AS row_address, f.ctid::text AS file_address
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

/** SQL expression reading one changed column from the JSON element `e`, else keeping `j`'s value. */
const COLUMN_SQL: Record<MutableJobColumn, string> = {
  status: `e->>'status'`,
  service_name: `e->>'service_name'`,
  service_version: `e->>'service_version'`,
  publish_attempts: `(e->>'publish_attempts')::integer`,
  next_publish_at: `(e->>'next_publish_at')::timestamptz`,
  published_at: `(e->>'published_at')::timestamptz`,
  reply_deadline: `(e->>'reply_deadline')::timestamptz`,
  started_at: `(e->>'started_at')::timestamptz`,
  finished_at: `(e->>'finished_at')::timestamptz`,
  metrics: `NULLIF(e->'metrics', 'null'::jsonb)`,
  error_code: `e->>'error_code'`,
  error_message: `e->>'error_message'`,
  result_schema_version: `e->>'result_schema_version'`,
  // A result registered in this batch names its object by bucket and key; `obj` has its id.
  result_s3_object_id: `COALESCE(obj.id, (e->>'result_s3_object_id')::bigint)`,
  result_msg_id: `e->>'result_msg_id'`,
};

/** Step 3b's SET list: a column changes only when the JSON element `e` names it. */
const SET_CHANGED_COLUMNS = Object.entries(COLUMN_SQL)
  .map(([col, expr]) => {
    const named = col === 'result_s3_object_id' ? `(e ? '${col}' OR e ? 'result_object')` : `e ? '${col}'`;
    return `${col} = CASE WHEN ${named} THEN ${expr} ELSE j.${col} END`;
  })
  .join(',\n        ');

/**
 * How step 3 finds the rows it updates:
 * - `jobsAtAddress`: each job at the row address (`ctid`) its element of $2 carries, read with the
 *   row's lock in this transaction, so the row is still there: no search of the primary key. Files
 *   by id.
 * - `jobsAndFilesAtAddress`: the same, and each file at the address its element of $3 carries
 *   (files locked by this transaction too, as the watchdog's are).
 * - `byId`: jobs and files by id, for a chunk naming a row that an earlier write of the same batch
 *   has already moved (an update writes a new row version elsewhere).
 * - `guarded`: by id, and each job only at the `version` (xmin) its element carries, the job having
 *   been read without a lock; $5 says how many must be updated: anything else aborts the statement
 *   (`recognition_job_versions_checked`, migration 0003).
 */
export type WriteMode = 'jobsAtAddress' | 'jobsAndFilesAtAddress' | 'byId' | 'guarded';

/**
 * How the jobs' UPDATE finds its rows. By address: the batch's addresses as an array make the
 * planner fetch exactly those rows (a Tid Scan) and hash them against the elements, whatever it
 * guesses of the batch's and the table's size (the join condition alone loses to a sequential scan
 * on a small table). No second condition on the row (its id): that makes the planner expect one
 * row out of the join and join the result objects to it by a nested loop over every object for
 * every job, which is quadratic.
 */
const FIND_JOBS = {
  address: `WHERE j.ctid = (e->>'ctid')::tid
      AND j.ctid = ANY (ARRAY(SELECT (x->>'ctid')::tid FROM jsonb_array_elements($2::jsonb) AS x))`,
  id: `WHERE j.id = (e->>'id')::uuid
      -- Redundant with the join, on purpose: it makes the planner reach the jobs through the
      -- primary key, whatever it guesses of the batch's size (a generic plan guesses 100 rows
      -- and would hash-join them against a sequential scan of a small-to-medium table).
      AND j.id = ANY (ARRAY(SELECT (x->>'id')::uuid FROM jsonb_array_elements($2::jsonb) AS x))`,
} as const;

/** How the files' UPDATE finds its rows: the columns of each element of $3, and the condition. */
const FIND_FILES = {
  id: {
    columns: '',
    where: `f.id = v.file_id AND f.current_recognition_job_id = v.job_id
      AND f.id = ANY (ARRAY(SELECT x.file_id FROM jsonb_to_recordset($3::jsonb) AS x(file_id uuid)))`,
  },
  address: {
    columns: ', ctid tid',
    where: `f.ctid = v.ctid AND f.current_recognition_job_id = v.job_id
      AND f.ctid = ANY (ARRAY(SELECT x.ctid FROM jsonb_to_recordset($3::jsonb) AS x(ctid tid)))`,
  },
} as const;

/** The guarded write's version check, and the count it compares with $5. */
const GUARD = {
  version: `
      AND j.xmin::text = e->>'version'
    RETURNING j.id`,
  result: `SELECT recognition_job_versions_checked((SELECT count(*) FROM job), $5::integer) AS written`,
};

/**
 * Step 3, one statement (data-modifying CTEs, which see one snapshot and whose foreign keys are
 * checked at its end): $1 objects, $2 job changes, $3 file changes, $4 transitions (JSON arrays,
 * maybe empty).
 *   a. register the result objects (`s3_object`), one multi-row upsert;
 *   b. write the changed columns of every changed job, pointing results at their objects;
 *   c. change the files that are still the jobs' current files;
 *   d. append the transition log, in the order the events were applied.
 */
function writeSql(find: { jobs: 'address' | 'id'; files: 'address' | 'id'; guarded: boolean }): string {
  const files = FIND_FILES[find.files];
  return `
  WITH obj AS (
    INSERT INTO s3_object (bucket, key, bucket_role, created_by)
    SELECT o.bucket, o.key, 'results', o.created_by
    FROM jsonb_to_recordset($1::jsonb) AS o(bucket text, key text, created_by text)
    ON CONFLICT (bucket, key) DO UPDATE SET bucket = EXCLUDED.bucket
    RETURNING id, bucket, key
  ),
  job AS (
    UPDATE recognition_job AS j SET
        ${SET_CHANGED_COLUMNS},
        updated_at = now()
    FROM jsonb_array_elements($2::jsonb) AS e
    LEFT JOIN obj ON obj.bucket = e->'result_object'->>'bucket' AND obj.key = e->'result_object'->>'key'
    ${FIND_JOBS[find.jobs]}${find.guarded ? GUARD.version : ''}
  ),
  file AS (
    -- The guard is repeated in SQL on purpose: only files still pointing at their jobs change.
    UPDATE stored_file AS f SET status = v.status, error_code = v.error_code, updated_at = now()
    FROM jsonb_to_recordset($3::jsonb) AS v(file_id uuid, job_id uuid, status text, error_code text${files.columns})
    WHERE ${files.where}
      AND (f.status, f.error_code) IS DISTINCT FROM (v.status, v.error_code)
  ),
  log AS (
    INSERT INTO recognition_job_transition (job_id, from_status, to_status, event, msg_id, detail)
    SELECT t.job_id, t.from_status, t.to_status, t.event, t.msg_id, COALESCE(t.detail, '{}')
    FROM jsonb_to_recordset($4::jsonb)
      AS t(seq integer, job_id uuid, from_status text, to_status text, event text, msg_id text, detail jsonb)
    ORDER BY t.seq
  )
  -- Every data-modifying CTE runs to completion whether or not it is read.
  ${find.guarded ? GUARD.result : `SELECT 1 AS written`}`;
}

/** Step 3's statement for each {@link WriteMode}. */
export const WRITE: Readonly<Record<WriteMode, Statement>> = {
  jobsAtAddress: defineStatement('step_write', writeSql({ jobs: 'address', files: 'id', guarded: false })),
  jobsAndFilesAtAddress: defineStatement(
    'step_write_locked_files',
    writeSql({ jobs: 'address', files: 'address', guarded: false }),
  ),
  byId: defineStatement('step_write_by_id', writeSql({ jobs: 'id', files: 'id', guarded: false })),
  guarded: defineStatement('step_guarded_write', writeSql({ jobs: 'id', files: 'id', guarded: true })),
};

/** A job and its file, both locked for a retry, with the job its file points at now. */
export type RetryLockedRow = StepRow & { file_current_job_id: string | null };

/**
 * A retry's step 1: lock the jobs ($1, a uuid array) and their files, in job id order (so that
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
 * A retry's step 3, one statement, kept apart from the event paths' write so that theirs stays as
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
