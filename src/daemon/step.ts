/**
 * The step: the only place where a job's machine meets the database, and the only code that
 * ever updates a `recognition_job` row.
 *
 * For a batch of (job, event) items, inside the caller's transaction, in two statements for a
 * batch of up to {@link WRITE_CHUNK} items (one more write per further chunk):
 *   1. lock every job row of the batch (`SELECT … FOR UPDATE`, in id order so that concurrent
 *      batches never deadlock) and read the database clock;
 *   2. hydrate each machine from its row and apply the events in order with the pure `decide()`;
 *   3. write every effect in one statement (data-modifying CTEs, which see one snapshot and whose
 *      foreign keys are checked at its end):
 *      a. register the result objects (`s3_object`), one multi-row upsert;
 *      b. write the changed columns of every changed job, pointing results at their objects
 *         (found at the row address the lock read, not through the primary key);
 *      c. change the files that are still the jobs' current files;
 *      d. append the transition log, in the order the events were applied.
 * The caller commits; only then may it ack the messages the items came from. A large batch is
 * decided and written chunk by chunk, each chunk's write overlapping the next chunk's decisions.
 *
 * Both statements have a fixed text and take their batch as parameters (a uuid array, JSON
 * documents), so a driver that prepares statements by name ({@link StepSql}) parses and plans
 * each once per connection. Round trips per batch: BEGIN, lock, write, COMMIT.
 *
 * Two variants share steps 2–3: {@link applyPassedDeadlines} (the watchdog: step 1 is its due
 * query, locking with SKIP LOCKED) and {@link applyEventsOptimistic} (a few events of one job, no
 * transaction: step 1 reads without a lock, step 3 applies only at the versions read — two round
 * trips).
 */
import { CompiledQuery, type Transaction } from 'kysely';
import type { Kysely } from 'kysely';
import {
  decide,
  type JobDecision,
  type JobEffects,
  type JobEvent,
  type JobState,
} from '../../machines/index.js';
import {
  changedColumns,
  JOB_STATE_COLUMNS,
  rowToJobState,
  type JobStateRow,
  type MutableJobColumn,
} from '../db/jobRow.js';
import type { Database } from '../db/schema.js';

type DistributiveOmit<T, K extends keyof never> = T extends unknown ? Omit<T, K> : never;
/** An event as a loop builds it; the step adds `now` from the database clock. */
export type JobEventInput = DistributiveOmit<JobEvent, 'now'>;

/** One event for one job. */
export interface StepItem {
  jobId: string;
  event: JobEventInput;
}

/** What happened to one item. `unknown_job` when no job has that id. */
export type StepOutcome =
  | ({ jobId: string; event: JobEventInput['type'] } & Omit<JobDecision, 'context'> & { fileId: string })
  | {
      jobId: string;
      event: JobEventInput['type'];
      decision: 'unknown_job';
      from: null;
      to: null;
      effects: [];
      reason: null;
    };

/**
 * How the step sends SQL inside a transaction. `name` identifies `text` (same name, same text), so
 * an implementation may prepare the statement once per connection and reuse it (see
 * `pgStepSql`); the Kysely one sends it unprepared.
 */
export interface StepSql {
  query<R>(name: string, text: string, values: readonly unknown[]): Promise<R[]>;
}

/** A transaction the step can run in: Kysely's, or a {@link StepSql} over a connection in a transaction. */
export type StepTransaction = Transaction<Database> | StepSql;

function isStepSql(tx: StepTransaction): tx is StepSql {
  return typeof (tx as Partial<StepSql>).query === 'function';
}

/** The {@link StepSql} of a transaction: itself, or an adapter over a Kysely transaction. */
export function stepSqlOf(tx: StepTransaction): StepSql {
  if (isStepSql(tx)) return tx;
  return {
    async query<R>(_name: string, text: string, values: readonly unknown[]) {
      const { rows } = await tx.executeQuery(CompiledQuery.raw(text, [...values]));
      return rows as R[];
    },
  };
}

/** A pg client (or anything with its `query({ name, text, values })`): named, i.e. prepared, statements. */
export interface PgQueryable {
  query<R>(config: { name: string; text: string; values: unknown[] }): Promise<{ rows: R[] }>;
}

/**
 * A {@link StepSql} over a pg client that is inside a transaction: every statement is a named
 * (prepared) one, parsed and planned once per connection.
 */
export function pgStepSql(client: PgQueryable): StepSql {
  return {
    async query<R>(name: string, text: string, values: readonly unknown[]) {
      const { rows } = await client.query<R>({ name, text, values: values as unknown[] });
      return rows;
    },
  };
}

/** A job's row as the step reads it: its state, whether its file points at it, the database clock. */
export type StepRow = JobStateRow & { file_is_current: boolean; db_now: Date };
/**
 * A row read under this transaction's lock, with its address (`ctid`): nobody else can move a
 * locked row, so the write finds it there without a search of the primary key.
 */
export type LockedRow = StepRow & { row_address: string };
/** A locked row whose file is locked too, with the file's address. */
export type LockedWithFileRow = LockedRow & { file_address: string };

/** {@link StepRow}'s columns. */
const LOCKED_COLUMNS = `${JOB_STATE_COLUMNS.map((c) => `j.${c}`).join(', ')},
         (f.current_recognition_job_id IS NOT DISTINCT FROM j.id) AS file_is_current,
         date_trunc('milliseconds', now()) AS db_now`;

/**
 * Step 1. `unnest` drives the join, so the planner looks each id up in the primary key whatever
 * the batch and table sizes (`id = ANY(…)` lets it pick a sequential scan on a small table, which
 * then costs more than the whole rest of the batch).
 */
export const LOCK_SQL = `
  SELECT ${LOCKED_COLUMNS}, j.ctid::text AS row_address
  FROM unnest($1::uuid[]) AS k(id)
  JOIN recognition_job j ON j.id = k.id
  JOIN stored_file f ON f.id = j.file_id
  ORDER BY j.id
  FOR UPDATE OF j`;

/**
 * Step 1 of the unlocked path ({@link applyEventsOptimistic}): the job's row, not locked, with its
 * version — `xmin`, the transaction that wrote this version of the row; any later update changes
 * it. One job, a scalar parameter: with an array, PostgreSQL planned the statement anew at every
 * execution (its custom plan for one element looks cheaper than the generic plan's guess of ten),
 * which cost more than running it (pg_prepared_statements: 0 generic, 6 000 custom plans).
 */
const READ_SQL = `
  SELECT ${LOCKED_COLUMNS}, j.xmin::text AS version
  FROM recognition_job j
  JOIN stored_file f ON f.id = j.file_id
  WHERE j.id = $1::uuid`;

/**
 * The unlocked path's check of a decision that writes nothing: the rows' current versions,
 * `FOR SHARE` so that it waits for a transaction holding one of them and then sees what that
 * committed (the lock ends with the statement). A write needs no such check — its version guard
 * waits for the holder too — but a decision with nothing to write would otherwise stand on a row
 * that is about to change: the publisher holds a job's lock while its message goes out, so the
 * service's ack can arrive before `published` commits, and a job still read as `pending` would
 * have its ack ignored for good.
 */
const CONFIRM_SQL = `
  SELECT j.id, j.xmin::text AS version
  FROM recognition_job j
  WHERE j.id = $1::uuid
  FOR SHARE OF j`;

/**
 * The watchdog's lock: due jobs (`published`/`processing` with a passed `reply_deadline`), served
 * by the partial index `recognition_job_reply_deadline_due_idx`, `$1` at most, skipping locked
 * rows (so no lock is ever waited for, and no order is needed against deadlocks). Same columns as
 * {@link LOCK_SQL}. Oldest deadline first; {@link DUE_LOCK_NEWEST_SQL} is the same from the other
 * end of the index. The jobs' files are locked too, so that the write finds them at their
 * addresses as well; a job whose file another transaction holds is skipped with it, and the
 * watchdog still never waits.
 *
 * The database clock is truncated to milliseconds because the machine's guard compares JavaScript
 * Dates (milliseconds) with the same truncated clock: a deadline of 12:00:00.0004 would be due in
 * SQL at 12:00:00.0007 but not in JS, and such a row would come back in every batch forever.
 */
export const DUE_LOCK_SQL = dueLockSql('ASC');

/**
 * The due lock from the newest passed deadline back: a second worker of a sweep takes its batches
 * from this end of the index, so neither worker's scan has to step over the rows the other holds
 * (SKIP LOCKED visits each of them, row and lock manager, before skipping it) until they meet.
 */
const DUE_LOCK_NEWEST_SQL = dueLockSql('DESC');

function dueLockSql(order: 'ASC' | 'DESC'): string {
  return `
  SELECT ${LOCKED_COLUMNS}, j.ctid::text AS row_address, f.ctid::text AS file_address
  FROM recognition_job j
  JOIN stored_file f ON f.id = j.file_id
  WHERE j.status IN ('published', 'processing')
    AND j.reply_deadline < date_trunc('milliseconds', now())
  ORDER BY j.reply_deadline ${order}
  LIMIT $1
  FOR UPDATE OF j, f SKIP LOCKED`;
}

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
 * How step 3 finds the jobs it updates:
 * - `address`: at the row address each element of $2 carries (`ctid`, read with the row's lock
 *   in this transaction, so the row is still there): no search of the primary key;
 * - `id`: by id, for a chunk naming a job that an earlier write of the same batch has already
 *   moved (an update writes a new row version elsewhere);
 * - `guarded`: by id, and only at the `version` (xmin) each element carries, the job having been
 *   read without a lock; $5 says how many must be updated: anything else aborts the statement
 *   (`recognition_job_versions_checked`, migration 0003).
 */
type WriteMode = 'address' | 'id' | 'guarded';

/**
 * Step 3: $1 objects, $2 job changes, $3 file changes, $4 transitions (JSON arrays, maybe empty).
 * `files`: how the file changes find their files, by id or (files locked by this transaction, as
 * the watchdog's are) by the address each element of $3 carries.
 */
function writeSql(mode: WriteMode, files: 'id' | 'address' = 'id'): string {
  const guarded = mode === 'guarded';
  // By address: the batch's addresses as an array make the planner fetch exactly those rows (a Tid
  // Scan) and hash them against the elements, whatever it guesses of the batch's size and the
  // table's (alone, the join condition lost to a sequential scan on a table of a few thousand
  // rows). No second condition on the row (its id): it made the planner expect one row out of the
  // join, and join the result objects to it by a nested loop over every object for every job —
  // quadratic, half the inbox's speed.
  const findJobs =
    mode === 'address'
      ? `WHERE j.ctid = (e->>'ctid')::tid
      AND j.ctid = ANY (ARRAY(SELECT (x->>'ctid')::tid FROM jsonb_array_elements($2::jsonb) AS x))`
      : `WHERE j.id = (e->>'id')::uuid
      -- Redundant with the join, on purpose: it makes the planner reach the jobs through the
      -- primary key, whatever it guesses of the batch's size (a generic plan guesses 100 rows
      -- and would hash-join them against a sequential scan of a small-to-medium table).
      AND j.id = ANY (ARRAY(SELECT (x->>'id')::uuid FROM jsonb_array_elements($2::jsonb) AS x))`;
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
    ${findJobs}${
      guarded
        ? `
      AND j.xmin::text = e->>'version'
    RETURNING j.id`
        : ''
    }
  ),
  file AS (
    -- The guard is repeated in SQL on purpose: only files still pointing at their jobs change.
    UPDATE stored_file AS f SET status = v.status, error_code = v.error_code, updated_at = now()
    FROM jsonb_to_recordset($3::jsonb) AS v(file_id uuid, job_id uuid, status text, error_code text${files === 'address' ? ', ctid tid' : ''})
    WHERE ${
      files === 'address'
        ? `f.ctid = v.ctid AND f.current_recognition_job_id = v.job_id
      AND f.ctid = ANY (ARRAY(SELECT x.ctid FROM jsonb_to_recordset($3::jsonb) AS x(ctid tid)))`
        : `f.id = v.file_id AND f.current_recognition_job_id = v.job_id
      AND f.id = ANY (ARRAY(SELECT x.file_id FROM jsonb_to_recordset($3::jsonb) AS x(file_id uuid)))`
    }
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
  ${guarded ? `SELECT recognition_job_versions_checked((SELECT count(*) FROM job), $5::integer) AS written` : `SELECT 1 AS written`}`;
}

export const WRITE_SQL = writeSql('address');
/** The write of a batch whose files are locked too (the watchdog's): jobs and files by address. */
export const WRITE_LOCKED_FILES_SQL = writeSql('address', 'address');
const WRITE_BY_ID_SQL = writeSql('id');
const GUARDED_WRITE_SQL = writeSql('guarded');

/** Statement names: the text's version is part of the name, so a changed text is prepared anew. */
const LOCK_NAME = 'rc_step_lock_v4';
const DUE_LOCK_NAME = 'rc_step_due_lock_v4';
const DUE_LOCK_NEWEST_NAME = 'rc_step_due_lock_newest_v2';
const WRITE_NAME = 'rc_step_write_v3';
const WRITE_BY_ID_NAME = 'rc_step_write_by_id_v1';
const WRITE_LOCKED_FILES_NAME = 'rc_step_write_locked_files_v1';
const READ_NAME = 'rc_step_read_v4';
const CONFIRM_NAME = 'rc_step_confirm_v2';
const GUARDED_WRITE_NAME = 'rc_step_guarded_write_v1';

/**
 * Events decided per write statement. A batch larger than this (the watchdog's) is written in
 * chunks, each sent as soon as it is decided, so PostgreSQL writes one chunk while the next is
 * being decided: the two cores work side by side instead of in turn. Small enough to overlap
 * well, large enough that per-statement costs stay negligible; the inbox's batches fit in one.
 */
const WRITE_CHUNK = 250;

/** Let pending I/O run (a chunk's write goes out, the previous one's reply comes in). */
const yieldToIo = () => new Promise<void>((resolve) => setImmediate(resolve));

/** The effects of a run of decided events, as rows for the write statement. */
interface Effects {
  objects: Map<string, { jobId: string } & JobEffects['registerResultObject']>;
  files: Map<string, { file_id: string; job_id: string; status: string; error_code: string | null }>;
  transitions: Array<Record<string, unknown>>;
  /** Jobs an event was decided for in this run. */
  touched: Set<string>;
  /** Jobs with an effect to write (an object, a file change, a transition) in this run. */
  effected: Set<string>;
}

/** Step 2 for `items`: decide each in order against `current` (updated), appending to `outcomes`. */
function decideAll(
  items: readonly StepItem[],
  current: Map<string, JobState>,
  now: Date | undefined,
  outcomes: StepOutcome[],
): Effects {
  const fx: Effects = {
    objects: new Map(),
    files: new Map(),
    transitions: [],
    touched: new Set(),
    effected: new Set(),
  };
  for (const item of items) {
    const state = current.get(item.jobId);
    if (!state || !now) {
      outcomes.push({
        jobId: item.jobId,
        event: item.event.type,
        decision: 'unknown_job',
        from: null,
        to: null,
        effects: [],
        reason: null,
      });
      continue;
    }
    const d = decide(state, { ...item.event, now } as JobEvent);
    current.set(item.jobId, { status: d.to, context: d.context });
    fx.touched.add(item.jobId);
    outcomes.push({
      jobId: item.jobId,
      fileId: state.context.fileId,
      event: item.event.type,
      decision: d.decision,
      from: d.from,
      to: d.to,
      effects: d.effects,
      reason: d.reason,
    });
    for (const effect of d.effects) {
      if (effect.type !== 'noteNoChange') fx.effected.add(item.jobId);
      if (effect.type === 'registerResultObject')
        fx.objects.set(item.jobId, { jobId: item.jobId, ...effect.params });
      else if (effect.type === 'setFileStatus') {
        // The last change of a file within the batch wins, as it would one event at a time.
        fx.files.set(state.context.fileId, {
          file_id: state.context.fileId,
          job_id: item.jobId,
          status: effect.params.status,
          error_code: effect.params.errorCode,
        });
      } else if (effect.type === 'recordTransition') {
        fx.transitions.push({
          seq: fx.transitions.length,
          job_id: item.jobId,
          from_status: d.from,
          to_status: d.to,
          event: effect.params.event,
          msg_id: effect.params.msgId,
          detail: effect.params.detail,
        });
      }
    }
  }
  return fx;
}

/** Where a batch's locked rows are, and which of them its earlier writes have moved. */
interface Addresses {
  /** Job id → address, for a chunk that finds its jobs by address. */
  jobs: ReadonlyMap<string, string> | undefined;
  /** File id → address, for a chunk that finds its files by address too. */
  files: ReadonlyMap<string, string> | undefined;
  /** Jobs and files an earlier write of the batch has (or may have) moved. */
  moved: Set<string>;
}

/**
 * Step 3's parameters for `fx`: the changed columns of each touched job against what was last
 * written for it (`written`, updated), or null when there is nothing to write. Job and file
 * changes carry their rows' addresses when `at` has them; every row they change is added to
 * `at.moved`.
 */
function writeParams(
  fx: Effects,
  written: Map<string, JobState>,
  current: Map<string, JobState>,
  versions: ReadonlyMap<string, string> | undefined,
  at: Addresses,
): string[] | null {
  const changes: Array<Record<string, unknown>> = [];
  for (const id of fx.touched) {
    const after = current.get(id)!;
    const diff: Record<string, unknown> = changedColumns(written.get(id)!, after);
    // A registered result object: the statement resolves its id (3a) and points the job at it (3b).
    const object = fx.objects.get(id);
    if (object) diff['result_object'] = { bucket: object.bucket, key: object.key };
    const changed = Object.keys(diff).length > 0;
    // Guarded: every job with something to write is checked at the version it was read at.
    if (versions) {
      if (changed || fx.effected.has(id)) changes.push({ id, version: versions.get(id), ...diff });
    } else if (changed) {
      changes.push(at.jobs ? { id, ctid: at.jobs.get(id), ...diff } : { id, ...diff });
      at.moved.add(id);
    }
    written.set(id, after);
  }
  for (const fileId of fx.files.keys()) at.moved.add(fileId);
  if (changes.length === 0 && fx.files.size === 0 && fx.transitions.length === 0 && fx.objects.size === 0)
    return null;
  // One upsert row per (bucket, key), in a stable order: a row is never affected twice, and
  // concurrent batches take the unique index's locks in the same order.
  const unique = [
    ...new Map([...fx.objects.values()].map((o) => [`${o.bucket}\u0000${o.key}`, o])).values(),
  ].sort((a, b) => (a.bucket === b.bucket ? (a.key < b.key ? -1 : 1) : a.bucket < b.bucket ? -1 : 1));
  return [
    JSON.stringify(unique.map((o) => ({ bucket: o.bucket, key: o.key, created_by: o.createdBy }))),
    JSON.stringify(changes),
    JSON.stringify(
      [...fx.files.values()].map((f) => (at.files ? { ...f, ctid: at.files.get(f.file_id) } : f)),
    ),
    JSON.stringify(fx.transitions),
    ...(versions ? [String(changes.length)] : []),
  ];
}

/**
 * Apply `items` in order, inside the caller's transaction `tx`. Several items may name the same
 * job: they are applied one after the other, as the stream delivered them. Runs one lock and one
 * write statement per {@link WRITE_CHUNK} items (the write only when something changes).
 */
export async function applyEvents(tx: StepTransaction, items: readonly StepItem[]): Promise<StepOutcome[]> {
  if (items.length === 0) return [];
  const db = stepSqlOf(tx);
  // 1. Lock the rows, in id order.
  const ids = [...new Set(items.map((i) => i.jobId))];
  const rows = await db.query<LockedRow>(LOCK_NAME, LOCK_SQL, [ids]);
  return decideAndWrite(db, items, { locked: 'jobs', rows });
}

/**
 * The watchdog's batch, in one statement fewer: lock up to `limit` jobs whose reply deadline has
 * passed (oldest first, or `newest` first for a sweep's second worker; skipping rows another
 * transaction holds — several instances sweep side by side, and a job whose result is being
 * applied right now is left to it) and apply `DEADLINE_PASSED` to each. The machine still decides:
 * a job it declines is reported, not changed.
 */
export async function applyPassedDeadlines(
  tx: StepTransaction,
  limit: number,
  from: 'oldest' | 'newest' = 'oldest',
): Promise<StepOutcome[]> {
  const db = stepSqlOf(tx);
  const rows =
    from === 'oldest'
      ? await db.query<LockedWithFileRow>(DUE_LOCK_NAME, DUE_LOCK_SQL, [limit])
      : await db.query<LockedWithFileRow>(DUE_LOCK_NEWEST_NAME, DUE_LOCK_NEWEST_SQL, [limit]);
  const items = rows.map((r): StepItem => ({ jobId: r.id, event: { type: 'DEADLINE_PASSED' } }));
  return decideAndWrite(db, items, { locked: 'jobs and files', rows });
}

/**
 * The unlocked path, for a few events of one job (the inbox's batches of one job): two autocommit
 * statements instead of BEGIN, lock, write, COMMIT — half the round trips.
 *
 * 1. read the job's row and version (`xmin`), without locking it;
 * 2. decide, as the locked path does;
 * 3. write everything in one statement that updates each job only at the version it read, and
 *    aborts as a whole when any job was changed in between (a serialization failure, raised by
 *    `recognition_job_versions_checked`). Then read again and decide anew, a few times.
 *    A decision that writes nothing is confirmed instead ({@link CONFIRM_SQL}): the versions
 *    read are still current once any transaction holding the rows has finished.
 *
 * One statement is one transaction: the outcome is exactly that of the locked path run at the
 * moment of the write. Resolves with `null` when this path cannot finish the work — the events name
 * more than one job, the job does not exist (the caller quarantines in a transaction), more events
 * than one write holds, or the row kept changing — and the caller then runs the locked path;
 * nothing has been written.
 * A decision that writes nothing (a duplicate, a late result) costs the read and the check.
 */
export async function applyEventsOptimistic(
  sql: StepSql,
  items: readonly StepItem[],
): Promise<StepOutcome[] | null> {
  if (items.length === 0) return [];
  if (items.length > WRITE_CHUNK) return null;
  const jobId = items[0]!.jobId;
  if (items.some((i) => i.jobId !== jobId)) return null;
  for (let attempt = 1; attempt <= OPTIMISTIC_ATTEMPTS; attempt++) {
    const rows = await sql.query<StepRow & { version: string }>(READ_NAME, READ_SQL, [jobId]);
    if (rows.length === 0) return null;
    const versions = new Map(rows.map((r) => [r.id, r.version]));
    const sent = { write: false };
    let outcomes: StepOutcome[];
    try {
      outcomes = await decideAndWrite(sql, items, { locked: false, rows, versions, sent });
    } catch (err) {
      if ((err as { code?: unknown }).code !== SERIALIZATION_FAILURE) throw err;
      continue;
    }
    if (sent.write) return outcomes;
    // Nothing written: the decision stands only if no transaction was changing the rows.
    const now = await sql.query<{ id: string; version: string }>(CONFIRM_NAME, CONFIRM_SQL, [jobId]);
    if (now.length === 1 && versions.get(jobId) === now[0]!.version) return outcomes;
  }
  return null;
}

/** Reads of the unlocked path before it hands the work to the locked one. */
const OPTIMISTIC_ATTEMPTS = 3;
const SERIALIZATION_FAILURE = '40001';

/**
 * How the rows of a batch were read: locked by this transaction (their files too, for the
 * watchdog), or without a lock at `versions` (the unlocked path: one guarded statement, so at
 * most {@link WRITE_CHUNK} items; `sent` says whether it was sent).
 */
type Reading =
  | { locked: 'jobs'; rows: readonly LockedRow[] }
  | { locked: 'jobs and files'; rows: readonly LockedWithFileRow[] }
  | {
      locked: false;
      rows: readonly StepRow[];
      versions: ReadonlyMap<string, string>;
      sent: { write: boolean };
    };

/** Steps 2–3 for `items`, against the rows `read`. */
async function decideAndWrite(
  db: StepSql,
  items: readonly StepItem[],
  read: Reading,
): Promise<StepOutcome[]> {
  const written = new Map<string, JobState>();
  const current = new Map<string, JobState>();
  let now: Date | undefined;
  for (const row of read.rows) {
    now = row.db_now;
    const state = rowToJobState(row, row.file_is_current);
    written.set(row.id, state);
    current.set(row.id, state);
  }
  const versions = read.locked === false ? read.versions : undefined;
  // Locked rows stay at their address until this batch updates them (`moved`).
  const jobAddresses =
    read.locked !== false ? new Map(read.rows.map((r) => [r.id, r.row_address])) : undefined;
  const fileAddresses =
    read.locked === 'jobs and files' ? new Map(read.rows.map((r) => [r.file_id, r.file_address])) : undefined;
  const moved = new Set<string>();
  const notMoved = (ids: Iterable<string>) => moved.size === 0 || ![...ids].some((id) => moved.has(id));

  // 2–3. Decide a chunk in order and send its write; decide the next chunk while PostgreSQL
  //      writes this one. One statement at a time on the connection: a chunk's write is sent
  //      only once the previous one has succeeded.
  const outcomes: StepOutcome[] = [];
  let writing: Promise<unknown> | undefined;
  for (let start = 0; start < items.length; start += WRITE_CHUNK) {
    const fx = decideAll(items.slice(start, start + WRITE_CHUNK), current, now, outcomes);
    // A row an earlier chunk updated has moved: such a chunk finds its rows by id.
    const jobsAt = jobAddresses !== undefined && notMoved(fx.touched);
    const filesAt = jobsAt && fileAddresses !== undefined && notMoved(fx.files.keys());
    const params = writeParams(fx, written, current, versions, {
      jobs: jobsAt ? jobAddresses : undefined,
      files: filesAt ? fileAddresses : undefined,
      moved,
    });
    if (writing) await writing;
    if (!params) continue;
    writing = versions
      ? db.query(GUARDED_WRITE_NAME, GUARDED_WRITE_SQL, params)
      : filesAt
        ? db.query(WRITE_LOCKED_FILES_NAME, WRITE_LOCKED_FILES_SQL, params)
        : jobsAt
          ? db.query(WRITE_NAME, WRITE_SQL, params)
          : db.query(WRITE_BY_ID_NAME, WRITE_BY_ID_SQL, params);
    if (read.locked === false) read.sent.write = true;
    if (start + WRITE_CHUNK < items.length) {
      // Let the statement go out before deciding the next chunk; its failure is awaited above.
      writing.catch(() => undefined);
      await yieldToIo();
    }
  }
  if (writing) await writing;
  return outcomes;
}

/** Convenience for one event: its own transaction, committed before it returns. */
export async function step(db: Kysely<Database>, jobId: string, event: JobEventInput): Promise<StepOutcome> {
  const [outcome] = await db.transaction().execute((tx) => applyEvents(tx, [{ jobId, event }]));
  return outcome!;
}
