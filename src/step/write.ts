/**
 * The write's wire format: the one statement every event path ends in (`WRITE`), its parameters'
 * layout, and the making of those parameters from a batch's effects. Its parameters are typed
 * arrays, one per column of each part (objects, jobs, files, transitions; `WRITE_PARAMETERS`), as
 * PostgreSQL array literals (`arrayLiteral.ts`); each job's element carries a mask of the columns
 * the machine assigned it (bit i for `CONTEXT_COLUMNS[i]`), a file change and a transition name
 * their job by its place among the job rows, a transition its detail by its place among the
 * batch's distinct documents; then the count of jobs, whether to return them, and the unlocked
 * path's assumptions. The functions that unnest each part's arrays (`UNNEST_FUNCTION`) are
 * defined by migrations 0013 (the parts), 0014 (the mask), 0015 (the details' places) and 0016
 * (the jobs' places), and the check of the written count by 0003 (`src/db/migrations/`): a change
 * of a part's arrays is a new migration that replaces its function.
 */
import {
  JOB_STATUSES,
  UNLOCKED_ROW,
  WRITE_CLOCK,
  type JobState,
  type JobStatus,
} from '../../machines/index.js';
import { CONTEXT_COLUMNS, sameValue, type MutableJobColumn } from '../db/jobRow.js';
import { arrayLiteral, type ArrayElement } from './arrayLiteral.js';
import type { Effects } from './effects.js';
import { defineStatement } from './statement.js';

/**
 * The job columns the write sets, with their SQL types, in the order of its parameters: every
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

/** The write's parameters: one typed array per column of each part, in this order. */
export const WRITE_PARAMETERS = {
  objects: { bucket: 'text', key: 'text', created_by: 'text' },
  jobs: {
    ctid: 'tid',
    version: 'xid',
    ...WRITTEN_JOB_COLUMNS,
    // Which columns but `status` the job's element sets: bit i for CONTEXT_COLUMNS[i].
    assigned: 'integer',
    // A result registered in this statement, by bucket and key: (a) returns its id.
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

/** The parts of the write's parameters, in order, and the count of jobs that must be written, last. */
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
 * unlocked path's assumptions, one element per job row in the same order (null on the locked
 * paths, whose rows are locked and read already): each job's id, the statuses it may be in (bit i
 * for `JOB_STATUSES[i]`), the `target_service` it must have, and the file id its result object's
 * key names (null for a job without one), which must be the job's.
 */
const PARTS_PARAMETERS = Object.values(WRITE_PARAMETERS).reduce((n, p) => n + Object.keys(p).length, 0);
const DETAILS = `$${PARTS_PARAMETERS + 1}::jsonb[]`;
const JOB_COUNT = `$${PARTS_PARAMETERS + 2}`;
const RETURN_JOBS = `$${PARTS_PARAMETERS + 3}`;
const ASSUMED_IDS = `$${PARTS_PARAMETERS + 4}::uuid[]`;
const ASSUMED_STATUSES = `$${PARTS_PARAMETERS + 5}::integer[]`;
const ASSUMED_TARGETS = `$${PARTS_PARAMETERS + 6}::text[]`;
const ASSUMED_FILES = `$${PARTS_PARAMETERS + 7}::text[]`;

/**
 * What the guard checks of a job besides its status and `target_service` is what an unlocked decision
 * assumes (`UNLOCKED_ROW`: no result msg id, its file pointing at it), written into its SQL; this
 * stops compiling when the assumptions change and the SQL has not.
 */
const CHECKED: { resultMsgId: null; fileIsCurrent: true } = UNLOCKED_ROW;
void CHECKED;

/** The statuses in the order of the assumptions' bits. */
const STATUS_BITS = `'{${JOB_STATUSES.join(',')}}'::text[]`;

/**
 * The write, the one statement every event path ends in (data-modifying CTEs, which see one
 * snapshot and whose foreign keys are checked at its end), its parameters typed arrays (one
 * element per row, {@link WRITE_PARAMETERS}; an array of nulls may come as null, which the
 * functions that unnest them read the same):
 *   0. the guard, on the unlocked path, before anything else: lock every job it decided for, in
 *      id order as every locked path locks (so no two transactions wait for each other), waiting
 *      for a transaction holding one, and check each is as its unlocked decision assumed it: its status
 *      one of the assumed ones, its `target_service` the assumed one, no result msg id, its file
 *      pointing at it, its file the one its result object's key names. If one is not, the
 *      statement writes nothing and returns no job; the caller then takes the batch through the
 *      locked path;
 *   a. register the result objects (`s3_object`), one multi-row insert that never touches a row
 *      already there: an object is a job's only when this statement creates it, and a job whose
 *      object is already there (registered before, or by another transaction meanwhile) is not
 *      written, so the count of written jobs falls short (below);
 *   b. write each job's status and the columns the machine assigned it (the others stay as they
 *      are), at the address it was read or locked at and only while it still has that version; a
 *      result registered in (a) is pointed at by its id; a time given as `now` is the database's
 *      clock, and every time is written to the millisecond, as a JavaScript Date holds it;
 *   c. change the files that are still the jobs' current files, each file change naming its job by
 *      the job's place among the rows of (b), which give the job's id and its file's id;
 *   d. append the transition log, in the order the events were applied, each row naming its job
 *      as a file change does, its detail by the document's place in the batch's details, and its
 *      `from_status`, when the element has none (an unlocked decision), as the guard locked it.
 * A job that the guard locked in a version the statement's snapshot does not see (committed by
 * another transaction while the guard waited for it) is not found by (b). The count of written
 * jobs then falls short, and the statement aborts as a whole with a serialization failure
 * (`recognition_job_versions_checked`, migration 0003); so does a locked path's job not at its
 * address and version any more, and a job whose result object (a) found already there: the locked
 * path's next try reads that object before deciding and refuses the result (the unlocked path
 * hands such a batch to it once its tries are spent). The guard runs first: the insert and the
 * update wait for its check (a condition without columns, which PostgreSQL evaluates once, before
 * the first row).
 * When asked to, returns each written job's new address and version, with its file and the status
 * the guard locked it in: a later chunk of the same batch that changes the job again finds it
 * there, and an unlocked decision learns its `from`. Otherwise it returns one row of nulls, and a batch
 * of one chunk of the locked path receives nothing it does not read.
 *
 * How the jobs are found: the batch's addresses (the ones read, and the ones the guard locked) as an
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
             AND (e.result_file IS NULL OR j.file_id::text = e.result_file) AS as_assumed
    FROM unnest(${ASSUMED_IDS}, ${ASSUMED_STATUSES}, ${ASSUMED_TARGETS}, ${ASSUMED_FILES})
      WITH ORDINALITY AS e(id, statuses, target_service, result_file, place)
    JOIN recognition_job AS j ON j.id = e.id
    JOIN stored_file AS f ON f.id = j.file_id
    ORDER BY j.id
    FOR UPDATE OF j
  ),
  -- One row: 1 when every assumption holds (and on the locked paths, which send none), else null.
  guarded AS (
    SELECT CASE WHEN (SELECT count(*) FILTER (WHERE as_assumed) FROM guard)
                     = COALESCE(cardinality(${ASSUMED_IDS}), 0) THEN 1 END AS n
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
  -- A write that the guard refused writes no job.
  checked AS (
    SELECT recognition_job_versions_checked((SELECT count(*) FROM job),
      CASE WHEN (SELECT n FROM guarded) IS NULL THEN 0 ELSE ${JOB_COUNT}::integer END) AS n
  )
  -- Every data-modifying CTE runs to completion whether or not it is read.
  SELECT job.id::text, job.row_address, job.version, job.file_id::text, job.prior_status
  FROM checked LEFT JOIN job ON ${RETURN_JOBS}::boolean`;
}

/** The write's statement. */
export const WRITE = defineStatement('step_write', writeSql());

/**
 * A job row the write changed: where it stands now, its file, and the status the guard locked it in (null
 * for a job the write did not lock there); null columns when the write changed no job.
 */
export interface WrittenRow {
  id: string | null;
  row_address: string | null;
  version: string | null;
  file_id: string | null;
  prior_status: JobStatus | null;
}

/**
 * The mutable columns but `status` whose values `after` sets anew, as the write's mask: bit `i` is
 * the column `CONTEXT_COLUMNS[i]`. A key undefined in `after` (of a state hydrated by
 * `rowToReadState`, not assigned by the machine) is left as it is.
 */
export function assignedColumns(before: JobState, after: JobState): number {
  let mask = 0;
  for (let i = 0; i < CONTEXT_COLUMNS.length; i++) {
    const key = CONTEXT_COLUMNS[i]![1];
    const value = after.context[key];
    if (value !== undefined && !sameValue(before.context[key], value)) mask |= 1 << i;
  }
  return mask;
}

// The mask of {@link assignedColumns} is a PostgreSQL integer: one bit per column, 31 at most.
if (CONTEXT_COLUMNS.length > 31) throw new Error('assignedColumns: more than 31 mutable job columns');

/**
 * One write statement's worth: its parameters (`WRITE_PARAMETERS`, then the batch's distinct
 * transition details, the count of jobs, whether the statement returns their new addresses, and
 * the assumptions it checks: none on the locked paths, see {@link unlockedWrite}).
 */
export interface PlannedWrite {
  params: unknown[];
  /** The jobs it writes: a later chunk that changes one of them again needs its new address. */
  jobIds: string[];
}

/** What {@link lockedWrite} and {@link unlockedWrite} compare with and where they find the rows. */
export interface WriteContext {
  /** Each job's state as last written; updated. */
  written: Map<string, JobState>;
  current: ReadonlyMap<string, JobState>;
  /** Each job's address and version (null for a job the write locks by id). */
  at: ReadonlyMap<string, { address: string | null; version: string | null }>;
}

/** An empty array per column of `part`. */
function columnsOf<P extends WritePart>(part: P): Record<keyof (typeof WRITE_PARAMETERS)[P], ArrayElement[]> {
  const out = {} as Record<string, ArrayElement[]>;
  for (const c of Object.keys(WRITE_PARAMETERS[part])) out[c] = [];
  return out as Record<keyof (typeof WRITE_PARAMETERS)[P], ArrayElement[]>;
}

/** The time {@link element} formatted last, and its text: most times of a batch are its clock. */
let lastTime = NaN;
let lastIso = '';

/**
 * A value as a typed array's element: times as ISO strings (the clock of an unlocked decision as
 * `now`), documents as JSON.
 */
function element(v: unknown): ArrayElement {
  if (v === null || v === undefined) return null;
  // PostgreSQL reads the time `now` as its transaction's clock.
  if (v === WRITE_CLOCK) return 'now';
  if (typeof v === 'string' || typeof v === 'number') return v;
  if (v instanceof Date) {
    if (v.getTime() !== lastTime) {
      lastTime = v.getTime();
      lastIso = v.toISOString();
    }
    return lastIso;
  }
  return JSON.stringify(v);
}

/**
 * The text columns whose values come from a small set, the same from job to job: statuses and
 * names ({@link arrayLiteral}'s `repeating`).
 */
const REPEATING = {
  objects: new Set(['bucket', 'created_by']),
  jobs: new Set([
    'status',
    'service_name',
    'service_version',
    'error_code',
    'result_schema_version',
    'result_bucket',
  ]),
  files: new Set(['status', 'error_code']),
  transitions: new Set(['from_status', 'to_status', 'event']),
} satisfies { [P in WritePart]: ReadonlySet<keyof (typeof WRITE_PARAMETERS)[P]> };

/**
 * Each part's arrays as array literals of their types, in the order of {@link WRITE_PARAMETERS};
 * an array of nulls only as null, which the statement reads the same (its functions unnest the
 * arrays side by side and give a missing element as null) without PostgreSQL parsing an element.
 * Each part has an array that holds no null (the objects' buckets, the jobs' statuses, the files'
 * and transitions' jobs), so its rows are still counted.
 */
function literalsOf(part: WritePart, columns: Record<string, ArrayElement[]>): Array<string | null> {
  const types = WRITE_PARAMETERS[part] as Record<string, string>;
  const repeating: ReadonlySet<string> = REPEATING[part];
  return Object.keys(types).map((c) => {
    const values = columns[c]!;
    return values.every((v) => v === null) ? null : arrayLiteral(types[c]!, values, repeating.has(c));
  });
}

/**
 * The write's parameters for `fx`: each touched job whose state changed or that has an effect, with
 * its status and the columns the machine assigned it since its last write (the mask `assigned`;
 * the other elements are null and the statement leaves those columns as they are); or null when
 * there is nothing to write.
 */
function writeParams(fx: Effects, ctx: WriteContext): PlannedWrite | null {
  const jobs = columnsOf('jobs');
  // The context columns' arrays by position (bit i of the mask is CONTEXT_COLUMNS[i]).
  const contextArrays = CONTEXT_COLUMNS.map(([column]) => jobs[column]);
  const jobIds: string[] = [];
  /** Each written job's place among the job rows, from 1: file changes and transitions name it so. */
  const places = new Map<string, number>();
  for (const id of fx.touched) {
    const after = ctx.current.get(id)!;
    const before = ctx.written.get(id)!;
    const assigned = assignedColumns(before, after);
    ctx.written.set(id, after);
    if (assigned === 0 && before.status === after.status && !fx.effected.has(id)) continue;
    const where = ctx.at.get(id)!;
    jobs.ctid.push(where.address);
    jobs.version.push(where.version);
    jobs.status.push(after.status);
    jobs.assigned.push(assigned);
    for (let i = 0; i < contextArrays.length; i++) {
      contextArrays[i]!.push(assigned & (1 << i) ? element(after.context[CONTEXT_COLUMNS[i]![1]]) : null);
    }
    // A registered result object: the statement resolves its id (a) and points the job at it (b).
    const object = fx.objects.get(id);
    jobs.result_bucket.push(object?.bucket ?? null);
    jobs.result_key.push(object?.key ?? null);
    jobIds.push(id);
    places.set(id, jobIds.length);
  }
  // A job with a file change or a transition has an effect, so it is among the rows written.
  const placeOf = (id: string): number => {
    const place = places.get(id);
    if (place === undefined) throw new Error(`job ${id} has an effect but no row in the write`);
    return place;
  };
  if (jobIds.length === 0 && fx.files.size === 0 && fx.transitions.length === 0 && fx.objects.size === 0)
    return null;
  // One insert row per (bucket, key), in a stable order: concurrent batches take the unique
  // index's locks in the same order. No two results of a batch register one object (the
  // decisions refuse the second), so no job is pointed at an object another job registered.
  const objects = columnsOf('objects');
  const sorted = [...fx.objects.values()].sort(byBucketAndKey);
  for (let i = 0; i < sorted.length; i++) {
    const o = sorted[i]!;
    const next = sorted[i + 1];
    if (next !== undefined && next.bucket === o.bucket && next.key === o.key)
      throw new Error(`two results of a batch register ${o.bucket}/${o.key}`);
    objects.bucket.push(o.bucket);
    objects.key.push(o.key);
    objects.created_by.push(o.createdBy);
  }
  const files = columnsOf('files');
  for (const f of fx.files.values()) {
    files.job.push(placeOf(f.job_id));
    files.status.push(f.status);
    files.error_code.push(f.error_code);
  }
  const transitions = columnsOf('transitions');
  // A batch's results share a few details (status, service, error code): each distinct document
  // goes once, and a row names its place, from 1. Consecutive rows mostly carry the same
  // document: the previous row's place is tried first.
  const details = new Map<string, number>();
  let previous: string | undefined;
  let previousPlace = 0;
  for (const t of fx.transitions) {
    transitions.job.push(placeOf(t.job_id));
    transitions.from_status.push(t.from_status);
    transitions.to_status.push(t.to_status);
    transitions.event.push(t.event);
    transitions.msg_id.push(t.msg_id);
    const detail = element(t.detail);
    if (detail === null) {
      transitions.detail.push(null);
      continue;
    }
    const text = String(detail);
    if (text !== previous) {
      let place = details.get(text);
      if (place === undefined) details.set(text, (place = details.size + 1));
      previous = text;
      previousPlace = place;
    }
    transitions.detail.push(previousPlace);
  }
  const parts: Record<WritePart, Record<string, ArrayElement[]>> = { objects, jobs, files, transitions };
  const params = WRITE_PARTS.flatMap((part) => literalsOf(part, parts[part]));
  const documents = details.size === 0 ? null : arrayLiteral('jsonb', [...details.keys()]);
  return { params: [...params, documents, jobIds.length], jobIds };
}

/**
 * A locked path's write for `fx`, or null when there is nothing to write: no assumptions, its
 * rows are locked and read already. `returnJobs`: the statement returns where its jobs stand now,
 * for a later chunk of the batch that changes them again.
 */
export function lockedWrite(fx: Effects, ctx: WriteContext, returnJobs: boolean): PlannedWrite | null {
  const w = writeParams(fx, ctx);
  return w && { ...w, params: [...w.params, returnJobs, null, null, null, null] };
}

/**
 * What the unlocked path's write checks of each job before it writes, one element per job row in
 * their order: the statuses it may be in ({@link statusBits}), the `target_service` it must have,
 * and the file id its result object's key names (null for a job without one), which must be the
 * job's.
 */
export interface Assumptions {
  statuses: number[];
  targets: string[];
  resultFiles: Array<string | null>;
}

/**
 * The unlocked path's write for `fx`, its job rows returned (their prior status is each outcome's
 * `from`) and `assumed` checked first; null when there is nothing to write.
 */
export function unlockedWrite(fx: Effects, ctx: WriteContext, assumed: Assumptions): PlannedWrite | null {
  const w = writeParams(fx, ctx);
  if (!w) return null;
  const params = [
    ...w.params,
    true,
    arrayLiteral('uuid', w.jobIds),
    arrayLiteral('integer', assumed.statuses),
    arrayLiteral('text', assumed.targets, true),
    assumed.resultFiles.every((f) => f === null) ? null : arrayLiteral('text', assumed.resultFiles),
  ];
  return { params, jobIds: w.jobIds };
}

/** Statuses as the write's assumptions give them: bit i for `JOB_STATUSES[i]`. */
export function statusBits(statuses: readonly JobStatus[]): number {
  let bits = 0;
  for (const s of statuses) bits |= 1 << JOB_STATUSES.indexOf(s);
  return bits;
}

function byBucketAndKey(a: { bucket: string; key: string }, b: { bucket: string; key: string }): number {
  if (a.bucket !== b.bucket) return a.bucket < b.bucket ? -1 : 1;
  return a.key === b.key ? 0 : a.key < b.key ? -1 : 1;
}
