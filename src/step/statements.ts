/**
 * The step's statements: fixed texts that take their batch as parameters (typed arrays; a retry's
 * JSON documents), so a driver that prepares statements by name parses and plans each once per
 * connection; and the rows they read.
 */
import { EXPECTED_ROW, FILE_STATUS, JOB_STATUSES, type JobStatus } from '../../machines/index.js';
import {
  CONTEXT_COLUMNS,
  READ_JOB_COLUMNS,
  type EpochMs,
  type MutableJobColumn,
  type ReadJobRow,
} from '../db/jobRow.js';
import { defineStatement, type Statement } from './statement.js';

/**
 * The job columns step 3 writes, with their SQL types, in the order of its parameters: every
 * mutable column the machine assigned, to the value it assigned; the others stay as they are.
 */
export const WRITTEN_JOB_COLUMNS = {
  status: 'text',
  service_name: 'text',
  service_version: 'text',
  publish_attempts: 'integer',
  next_publish_at: 'timestamptz',
  published_at: 'timestamptz',
  reply_deadline: 'timestamptz',
  started_at: 'timestamptz',
  finished_at: 'timestamptz',
  metrics: 'jsonb',
  error_code: 'text',
  error_message: 'text',
  result_schema_version: 'text',
  result_s3_object_id: 'bigint',
  result_msg_id: 'text',
} as const satisfies Record<MutableJobColumn, string>;

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
 * Step 1: lock every job of the batch ($1, a uuid array), in id order so that concurrent batches
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
 * find it and write nothing (see {@link WRITE}).
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

/** Step 3's parameters: one typed array per column of each part, in this order. */
export const WRITE_PARAMETERS = {
  objects: { bucket: 'text', key: 'text', created_by: 'text' },
  jobs: {
    ctid: 'tid',
    version: 'xid',
    ...WRITTEN_JOB_COLUMNS,
    // Which columns but `status` the job's element sets: bit i for CONTEXT_COLUMNS[i].
    assigned: 'integer',
    // A result registered in this statement, by bucket and key: 3a returns its id.
    result_bucket: 'text',
    result_key: 'text',
  },
  // A file change and a transition row name their job by its place (from 1) among the write's job
  // rows, which the write updates first: it takes the job's id and its file's id from there.
  files: { job: 'integer', status: 'text', error_code: 'text' },
  transitions: {
    job: 'integer',
    from_status: 'text',
    to_status: 'text',
    event: 'text',
    msg_id: 'text',
    // Its detail document: a place (from 1) in the write's array of the batch's distinct
    // documents, which PostgreSQL then parses once each; null for none.
    detail: 'integer',
  },
} as const;

/** The parts of step 3's parameters, in order, and the count of jobs that must be written, last. */
export type WritePart = keyof typeof WRITE_PARAMETERS;
export const WRITE_PARTS = Object.keys(WRITE_PARAMETERS) as WritePart[];

/**
 * The function that unnests each part's arrays with a row estimate of a batch (migrations 0013
 * to 0016): it takes the part's arrays in order and returns a column of each name.
 */
export const UNNEST_FUNCTION: Record<WritePart, string> = {
  objects: 'recognition_step_objects',
  jobs: 'recognition_step_jobs',
  files: 'recognition_step_files',
  transitions: 'recognition_step_transitions',
};

/** Each part's function call over its parameters, and the number of its first parameter. */
function unnestOf(): Record<WritePart, { from: string; first: number }> {
  let n = 0;
  const out = {} as Record<WritePart, { from: string; first: number }>;
  for (const part of WRITE_PARTS) {
    const first = n + 1;
    const args = Object.values(WRITE_PARAMETERS[part] as Record<string, string>).map(
      (type) => `$${++n}::${type}[]`,
    );
    out[part] = { from: `${UNNEST_FUNCTION[part]}(${args.join(', ')})`, first };
  }
  return out;
}
const UNNEST = unnestOf();

/**
 * After the parts' arrays: the batch's distinct transition details (the documents the transition
 * rows name by place), the count of job rows the write must find, whether to return them, and the
 * unlocked path's expectations, one element per job row in the same order (null on the locked
 * paths, whose rows are locked and read already): each job's id, the statuses it may be in (bit i
 * for `JOB_STATUSES[i]`), the `target_service` it must have, and the file id its result object's
 * key names (null for a job without one), which must be the job's.
 */
const PARTS_PARAMETERS = Object.values(WRITE_PARAMETERS).reduce((n, p) => n + Object.keys(p).length, 0);
const DETAILS = `$${PARTS_PARAMETERS + 1}::jsonb[]`;
const EXPECTED_JOBS = `$${PARTS_PARAMETERS + 2}`;
const RETURN_JOBS = `$${PARTS_PARAMETERS + 3}`;
const EXPECTED_IDS = `$${PARTS_PARAMETERS + 4}::uuid[]`;
const EXPECTED_STATUSES = `$${PARTS_PARAMETERS + 5}::integer[]`;
const EXPECTED_TARGETS = `$${PARTS_PARAMETERS + 6}::text[]`;
const EXPECTED_FILES = `$${PARTS_PARAMETERS + 7}::text[]`;

/**
 * What step 0 checks of a job besides its status and `target_service` is what an expected decision
 * assumes (`EXPECTED_ROW`: no result msg id, its file pointing at it), written into its SQL; this
 * stops compiling when the assumptions change and the SQL has not.
 */
const CHECKED: { resultMsgId: null; fileIsCurrent: true } = EXPECTED_ROW;
void CHECKED;

/** The statuses in the order of the expectations' bits. */
const STATUS_BITS = `'{${JOB_STATUSES.join(',')}}'::text[]`;

/**
 * Step 3, the one write of every event path, one statement (data-modifying CTEs, which see one
 * snapshot and whose foreign keys are checked at its end), its parameters typed arrays (one
 * element per row, {@link WRITE_PARAMETERS}; an array of nulls may come as null, which the
 * functions that unnest them read the same):
 *   0. on the unlocked path, before anything else: lock every job it decided for, in id order as
 *      every locked path locks (so no two transactions wait for each other), waiting for a
 *      transaction holding one, and check each is as its expected decision assumed it: its status
 *      one of the expected ones, its `target_service` the expected one, no result msg id, its file
 *      pointing at it, its file the one its result object's key names. If one is not, the
 *      statement writes nothing and returns no job; the caller then takes the batch through the
 *      locked path;
 *   a. register the result objects (`s3_object`), one multi-row insert that never touches a row
 *      already there: an object is a job's only when this statement creates it, and a job whose
 *      object is already there (registered before, or by another transaction meanwhile) is not
 *      written, so the count of written jobs falls short (below);
 *   b. write each job's status and the columns the machine assigned it (the others stay as they
 *      are), at the address it was read or locked at and only while it still has that version; a
 *      result registered in 3a is pointed at by its id; a time given as `now` is the database's
 *      clock, and every time is written to the millisecond, as a JavaScript Date holds it;
 *   c. change the files that are still the jobs' current files, each file change naming its job by
 *      the job's place among the rows of 3b, which give the job's id and its file's id;
 *   d. append the transition log, in the order the events were applied, each row naming its job
 *      as a file change does, its detail by the document's place in the batch's details, and its
 *      `from_status`, when the element has none (an expected decision), as step 0 locked it.
 * A job that step 0 locked in a version the statement's snapshot does not see (committed by
 * another transaction while step 0 waited for it) is not found by 3b. The count of written jobs
 * then falls short, and the statement aborts as a whole with a serialization failure
 * (`recognition_job_versions_checked`, migration 0003); so does a locked path's job not at its
 * address and version any more, and a job whose result object 3a found already there: the locked
 * path's next try reads that object before deciding and refuses the result (the unlocked path
 * hands such a batch to it once its tries are spent). Step 0 runs first: the insert and the
 * update wait for its check (a condition without columns, which PostgreSQL evaluates once, before
 * the first row).
 * When asked to, returns each written job's new address and version, with its file and the status
 * step 0 locked it in: a later chunk of the same batch that changes the job again finds it there,
 * and an expected decision learns its `from`. Otherwise it returns one row of nulls, and a batch
 * of one chunk of the locked path receives nothing it does not read.
 *
 * How the jobs are found: the batch's addresses (the ones read, and the ones step 0 locked) as an
 * array make the planner fetch exactly those rows (a Tid Scan) and hash them against the
 * elements, whatever it guesses of the batch's and the table's size. No condition on the row's
 * id: that makes the planner expect one row out of the join and join the result objects to it by
 * a nested loop over every object for every job. The
 * arrays of addresses and file ids are read through a subquery, which a plan for the actual
 * parameters estimates as a generic plan does: otherwise a plan for a batch of one or two looks
 * cheaper than the generic plan, and PostgreSQL plans the statement anew at every execution.
 */
function writeSql(): string {
  const j = UNNEST.jobs;
  const assigned = (c: string) => {
    const bit = CONTEXT_COLUMNS.findIndex(([column]) => column === c);
    const value =
      (WRITTEN_JOB_COLUMNS as Record<string, string>)[c] === 'timestamptz'
        ? `date_trunc('milliseconds', c.${c})`
        : `c.${c}`;
    return `CASE WHEN c.assigned & ${1 << bit} = 0 THEN j.${c} ELSE ${value} END`;
  };
  const set = Object.keys(WRITTEN_JOB_COLUMNS)
    .map((c) =>
      c === 'status'
        ? `${c} = c.${c}`
        : c === 'result_s3_object_id'
          ? `${c} = COALESCE(obj.id, ${assigned(c)})`
          : `${c} = ${assigned(c)}`,
    )
    .join(',\n        ');
  return `
  WITH guard AS (
    SELECT e.place, j.ctid, j.xmin, j.status AS prior_status,
           (e.statuses >> (array_position(${STATUS_BITS}, j.status) - 1)) & 1 = 1
             AND j.target_service = e.target_service
             AND j.result_msg_id IS NULL
             AND f.current_recognition_job_id IS NOT DISTINCT FROM j.id
             AND (e.result_file IS NULL OR j.file_id::text = e.result_file) AS expected
    FROM unnest(${EXPECTED_IDS}, ${EXPECTED_STATUSES}, ${EXPECTED_TARGETS}, ${EXPECTED_FILES})
      WITH ORDINALITY AS e(id, statuses, target_service, result_file, place)
    JOIN recognition_job AS j ON j.id = e.id
    JOIN stored_file AS f ON f.id = j.file_id
    ORDER BY j.id
    FOR UPDATE OF j
  ),
  -- One row: 1 when every expectation holds (and on the locked paths, which send none), else null.
  guarded AS (
    SELECT CASE WHEN (SELECT count(*) FILTER (WHERE expected) FROM guard)
                     = COALESCE(cardinality(${EXPECTED_IDS}), 0) THEN 1 END AS n
  ),
  obj AS (
    INSERT INTO s3_object (bucket, key, bucket_role, created_by)
    SELECT o.bucket, o.key, 'results', o.created_by
    FROM ${UNNEST.objects.from} AS o
    WHERE (SELECT n FROM guarded) IS NOT NULL
    ON CONFLICT (bucket, key) DO NOTHING
    RETURNING id, bucket, key
  ),
  job AS (
    UPDATE recognition_job AS j SET
        ${set},
        updated_at = now()
    FROM ${j.from} WITH ORDINALITY AS c
    LEFT JOIN guard AS g ON g.place = c.ordinality
    LEFT JOIN obj ON obj.bucket = c.result_bucket AND obj.key = c.result_key
    WHERE j.ctid = COALESCE(c.ctid, g.ctid)
      AND j.ctid = ANY (ARRAY(SELECT unnest($${j.first}::tid[]) UNION ALL SELECT ctid FROM guard))
      AND j.xmin = COALESCE(c.version, g.xmin)
      -- A job is pointed only at an object this statement created.
      AND (c.result_key IS NULL OR obj.id IS NOT NULL)
      AND (SELECT n FROM guarded) IS NOT NULL
    RETURNING j.id, j.file_id, c.ordinality AS place, g.prior_status,
              j.ctid::text AS row_address, j.xmin::text AS version
  ),
  file AS (
    -- The guard is repeated in SQL on purpose: only files still pointing at their jobs change.
    UPDATE stored_file AS f SET status = v.status, error_code = v.error_code, updated_at = now()
    FROM ${UNNEST.files.from} AS v
    JOIN job AS w ON w.place = v.job
    -- The current job compared as not distinct (the same for a job id, which is never null)
    -- rather than equal: the planner then looks each file up by its primary key, not through the
    -- index of current jobs.
    WHERE f.id = w.file_id AND f.current_recognition_job_id IS NOT DISTINCT FROM w.id
      AND (f.status, f.error_code) IS DISTINCT FROM (v.status, v.error_code)
  ),
  log AS (
    INSERT INTO recognition_job_transition (job_id, from_status, to_status, event, msg_id, detail)
    SELECT w.id, COALESCE(t.from_status, w.prior_status), t.to_status, t.event, t.msg_id, COALESCE((${DETAILS})[t.detail], '{}')
    FROM ${UNNEST.transitions.from} AS t
    JOIN job AS w ON w.place = t.job
    ORDER BY t.seq
  ),
  -- One row, so the check runs whether or not any job was written.
  -- A write that step 0 refused writes no job.
  checked AS (
    SELECT recognition_job_versions_checked((SELECT count(*) FROM job),
      CASE WHEN (SELECT n FROM guarded) IS NULL THEN 0 ELSE ${EXPECTED_JOBS}::integer END) AS n
  )
  -- Every data-modifying CTE runs to completion whether or not it is read.
  SELECT job.id::text, job.row_address, job.version, job.file_id::text, job.prior_status
  FROM checked LEFT JOIN job ON ${RETURN_JOBS}::boolean`;
}

/** Step 3's statement. */
export const WRITE = defineStatement('step_write', writeSql());

/**
 * A job row step 3 wrote: where it stands now, its file, and the status step 0 locked it in (null
 * for a job the write did not lock there); null columns when the write changed no job.
 */
export interface WrittenRow {
  id: string | null;
  row_address: string | null;
  version: string | null;
  file_id: string | null;
  prior_status: JobStatus | null;
}

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
