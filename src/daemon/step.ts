/**
 * The step: the only place where a job's machine meets the database, and the only code that
 * ever updates a `recognition_job` row.
 *
 * For a batch of (job, event) items, inside the caller's transaction, in a handful of statements
 * whatever the batch size:
 *   1. lock every job row of the batch (`SELECT … FOR UPDATE`, in id order so that concurrent
 *      batches never deadlock) and read the database clock;
 *   2. hydrate each machine from its row and apply the events in order with the pure `decide()`;
 *   3. register the result objects (`s3_object`), one multi-row upsert;
 *   4. write the changed columns of every changed job, one statement;
 *   5. change the files that are still the jobs' current files, one statement;
 *   6. append the transition log, one statement.
 * The caller commits; only then may it ack the messages the items came from.
 */
import { sql, type Kysely, type Transaction } from 'kysely';
import {
  decide,
  type JobDecision,
  type JobEffects,
  type JobEvent,
  type JobState,
  type JobStatus,
} from '../../machines/index.js';
import { changedColumns, rowToJobState, type MutableJobColumn } from '../db/jobRow.js';
import type { Database, JobRow } from '../db/schema.js';

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
  | { jobId: string; event: JobEventInput['type']; decision: 'unknown_job'; from: null; to: null; effects: []; reason: null };

type LockedRow = JobRow & { file_is_current: boolean; db_now: Date };

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
  result_s3_object_id: `(e->>'result_s3_object_id')::bigint`,
  result_msg_id: `e->>'result_msg_id'`,
};

/** Step 4's SET list: a column changes only when the JSON element `e` names it. */
const SET_CHANGED_COLUMNS = sql.raw(
  Object.entries(COLUMN_SQL)
    .map(([col, expr]) => `${col} = CASE WHEN e ? '${col}' THEN ${expr} ELSE j.${col} END`)
    .join(', '),
);

/**
 * Apply `items` in order, inside the caller's transaction `tx`. Several items may name the same
 * job: they are applied one after the other, as the stream delivered them. Runs a fixed number of
 * statements whatever the batch size.
 */
export async function applyEvents(tx: Transaction<Database>, items: readonly StepItem[]): Promise<StepOutcome[]> {
  if (items.length === 0) return [];
  // 1. Lock the rows, in id order.
  const ids = [...new Set(items.map((i) => i.jobId))].sort();
  const { rows } = await sql<LockedRow>`
    SELECT j.*, (f.current_recognition_job_id IS NOT DISTINCT FROM j.id) AS file_is_current,
           date_trunc('milliseconds', now()) AS db_now
    FROM recognition_job j JOIN stored_file f ON f.id = j.file_id
    WHERE j.id = ANY(${ids}::uuid[])
    ORDER BY j.id
    FOR UPDATE OF j`.execute(tx);
  const original = new Map<string, JobState>();
  const current = new Map<string, JobState>();
  let now: Date | undefined;
  for (const row of rows) {
    now = row.db_now;
    const state = rowToJobState(row, row.file_is_current);
    original.set(row.id, state);
    current.set(row.id, state);
  }

  // 2. Decide, in order.
  const outcomes: StepOutcome[] = [];
  const objects: Array<{ jobId: string } & JobEffects['registerResultObject']> = [];
  const files = new Map<string, { file_id: string; job_id: string; status: string; error_code: string | null }>();
  const transitions: Array<Record<string, unknown>> = [];
  for (const item of items) {
    const state = current.get(item.jobId);
    if (!state || !now) {
      outcomes.push({ jobId: item.jobId, event: item.event.type, decision: 'unknown_job', from: null, to: null, effects: [], reason: null });
      continue;
    }
    const d = decide(state, { ...item.event, now } as JobEvent);
    current.set(item.jobId, { status: d.to, context: d.context });
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
      if (effect.type === 'registerResultObject') objects.push({ jobId: item.jobId, ...effect.params });
      else if (effect.type === 'setFileStatus') {
        // The last change of a file within the batch wins, as it would one event at a time.
        files.set(state.context.fileId, {
          file_id: state.context.fileId,
          job_id: item.jobId,
          status: effect.params.status,
          error_code: effect.params.errorCode,
        });
      } else if (effect.type === 'recordTransition') {
        transitions.push({
          seq: transitions.length,
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

  // 3. Register result objects; point their jobs at them.
  if (objects.length > 0) {
    const unique = [...new Map(objects.map((o) => [`${o.bucket}\u0000${o.key}`, o])).values()].sort((a, b) =>
      a.bucket === b.bucket ? (a.key < b.key ? -1 : 1) : a.bucket < b.bucket ? -1 : 1,
    );
    const { rows: ids } = await sql<{ id: string; bucket: string; key: string }>`
      INSERT INTO s3_object (bucket, key, bucket_role, created_by)
      SELECT o.bucket, o.key, 'results', o.created_by
      FROM jsonb_to_recordset(${JSON.stringify(unique.map((o) => ({ bucket: o.bucket, key: o.key, created_by: o.createdBy })))}::jsonb)
        AS o(bucket text, key text, created_by text)
      ON CONFLICT (bucket, key) DO UPDATE SET bucket = EXCLUDED.bucket
      RETURNING id, bucket, key`.execute(tx);
    const byKey = new Map(ids.map((r) => [`${r.bucket}\u0000${r.key}`, r.id]));
    for (const o of objects) {
      const state = current.get(o.jobId)!;
      current.set(o.jobId, {
        status: state.status,
        context: { ...state.context, resultS3ObjectId: byKey.get(`${o.bucket}\u0000${o.key}`) ?? null },
      });
    }
  }

  // 4. Write the changed columns of the changed jobs.
  const changes: Array<Record<string, unknown>> = [];
  for (const [id, after] of current) {
    const diff = changedColumns(original.get(id)!, after);
    if (Object.keys(diff).length > 0) changes.push({ id, ...diff });
  }
  if (changes.length > 0) {
    await sql`
      UPDATE recognition_job AS j SET ${SET_CHANGED_COLUMNS}, updated_at = now()
      FROM jsonb_array_elements(${JSON.stringify(changes)}::jsonb) AS e
      WHERE j.id = (e->>'id')::uuid`.execute(tx);
  }

  // 5. Change the files still pointing at their jobs (the guard is repeated in SQL on purpose).
  if (files.size > 0) {
    await sql`
      UPDATE stored_file AS f SET status = v.status, error_code = v.error_code, updated_at = now()
      FROM jsonb_to_recordset(${JSON.stringify([...files.values()])}::jsonb)
        AS v(file_id uuid, job_id uuid, status text, error_code text)
      WHERE f.id = v.file_id AND f.current_recognition_job_id = v.job_id
        AND (f.status, f.error_code) IS DISTINCT FROM (v.status, v.error_code)`.execute(tx);
  }

  // 6. Append the transition log, in the order the events were applied.
  if (transitions.length > 0) {
    await sql`
      INSERT INTO recognition_job_transition (job_id, from_status, to_status, event, msg_id, detail)
      SELECT t.job_id, t.from_status, t.to_status, t.event, t.msg_id, COALESCE(t.detail, '{}')
      FROM jsonb_to_recordset(${JSON.stringify(transitions)}::jsonb)
        AS t(seq integer, job_id uuid, from_status text, to_status text, event text, msg_id text, detail jsonb)
      ORDER BY t.seq`.execute(tx);
  }
  return outcomes;
}

/** Convenience for one event: its own transaction, committed before it returns. */
export async function step(db: Kysely<Database>, jobId: string, event: JobEventInput): Promise<StepOutcome> {
  const [outcome] = await db.transaction().execute((tx) => applyEvents(tx, [{ jobId, event }]));
  return outcome!;
}
