/**
 * Retries: the next attempt for failed jobs, inside the caller's transaction, through the machine.
 *   1. lock the jobs and their files (in job id order) and read the database clock;
 *   2. decide `RETRY_REQUESTED` for each with the pure `decide()` ({@link planRetries}): a failed
 *      job still its file's current one returns `createAttempt`, anything else a no-change note;
 *   3. one statement ({@link RETRY_WRITE}): the files moved, the new attempts inserted `pending`,
 *      both jobs' transition rows appended.
 * The retried jobs keep their status and columns: a job never leaves a final status.
 */
import { newId } from '../db/ids.js';
import {
  ATTEMPT_CREATED_EVENT,
  JOB_STATUS,
  decide,
  type Decision,
  type JobEffects,
  type JobEvent,
  type JobState,
  type JobStatus,
} from '../../machines/index.js';
import { changedColumns, rowToReadState, timeOf } from '../db/jobRow.js';
import { stepSqlOf, type StepTransaction } from './sql.js';
import { RETRY_LOCK, RETRY_WRITE, type RetryLockedRow } from './statements.js';

/** One job to retry. */
export interface RetryRequest {
  jobId: string;
  /** The service the next attempt is published to; the job's own when absent. */
  targetService?: string;
}

/** What came of one {@link RetryRequest}. */
export interface RetryOutcome {
  jobId: string;
  decision: Exclude<Decision, 'duplicate' | 'late'>;
  /** The job's status (unchanged by a retry); null for an unknown job. */
  status: JobStatus | null;
  fileId: string | null;
  /** The job the file pointed at when it was locked. */
  fileCurrentJobId: string | null;
  /** Why the job was not retried (`not_failed`, `file_not_current`), when it was not. */
  reason: string | null;
  /** The next attempt, when the job was retried. */
  next: JobEffects['createAttempt'] | null;
}

/** The retry write's parameters, or null when nothing is retried. */
export interface PlannedRetries {
  outcomes: RetryOutcome[];
  params: [attempts: string, transitions: string] | null;
}

/**
 * The decision, pure: decide `RETRY_REQUESTED` at `now` for each request against the locked `rows`, in
 * order (a job asked for twice is retried once: the first retry moves its file), and turn the
 * `createAttempt` effects into the write's parameters. `newJobId` names each next attempt.
 */
export function planRetries(
  rows: readonly RetryLockedRow[],
  requests: readonly RetryRequest[],
  newJobId: () => string,
): PlannedRetries {
  const current = new Map<string, { state: JobState; row: RetryLockedRow }>();
  for (const row of rows) current.set(row.id, { state: rowToReadState(row, row.file_is_current), row });
  const attempts: Array<Record<string, unknown>> = [];
  const transitions: Array<Record<string, unknown>> = [];
  const outcomes: RetryOutcome[] = [];
  for (const request of requests) {
    const found = current.get(request.jobId);
    if (!found) {
      outcomes.push({
        jobId: request.jobId,
        decision: 'unknown_job',
        status: null,
        fileId: null,
        fileCurrentJobId: null,
        reason: null,
        next: null,
      });
      continue;
    }
    const { state, row } = found;
    const event: JobEvent = {
      type: 'RETRY_REQUESTED',
      now: timeOf(row.db_now),
      newJobId: newJobId(),
      ...(request.targetService !== undefined ? { targetService: request.targetService } : {}),
    };
    const d = decide(state, event);
    const after: JobState = { status: d.to, context: d.context };
    // The machine keeps a retried job as it was; a changed column here would be a machine bug.
    const changed = Object.keys(changedColumns(state, after));
    if (changed.length > 0)
      throw new Error(`RETRY_REQUESTED changed ${changed.join(', ')} of job ${request.jobId}`);
    current.set(request.jobId, { state: after, row });
    const next = d.effects.find((e) => e.type === 'createAttempt')?.params ?? null;
    const record = d.effects.find((e) => e.type === 'recordTransition')?.params;
    if (d.decision === 'applied' && next && record) {
      attempts.push({
        id: next.jobId,
        file_id: next.fileId,
        attempt: next.attempt,
        target_service: next.targetService,
        retry_of: next.retryOf,
      });
      transitions.push(
        {
          seq: transitions.length,
          attempt_id: next.jobId,
          job_id: request.jobId,
          from_status: d.from,
          to_status: d.to,
          event: record.event,
          detail: record.detail,
        },
        {
          seq: transitions.length + 1,
          attempt_id: next.jobId,
          job_id: next.jobId,
          from_status: JOB_STATUS.pending,
          to_status: JOB_STATUS.pending,
          event: ATTEMPT_CREATED_EVENT,
          detail: { retry_of: next.retryOf, attempt: next.attempt, target_service: next.targetService },
        },
      );
    }
    outcomes.push({
      jobId: request.jobId,
      decision: d.decision === 'applied' ? 'applied' : 'ignored',
      status: d.from,
      fileId: row.file_id,
      fileCurrentJobId: row.file_current_job_id,
      reason: d.reason,
      next: d.decision === 'applied' ? next : null,
    });
  }
  return {
    outcomes,
    params: attempts.length > 0 ? [JSON.stringify(attempts), JSON.stringify(transitions)] : null,
  };
}

/**
 * Retry `requests` inside the caller's transaction `tx`: steps 1–3 above, one lock and at most one
 * write statement. Resolves with one outcome per request, in order. The caller commits; the new
 * attempts' insert wakes the publisher once it does (NOTIFY `recognition_job_created`).
 */
export async function applyRetries(
  tx: StepTransaction,
  requests: readonly RetryRequest[],
): Promise<RetryOutcome[]> {
  if (requests.length === 0) return [];
  const sql = stepSqlOf(tx);
  // 1. Lock the jobs and their files, in job id order.
  const ids = [...new Set(requests.map((r) => r.jobId))];
  const rows = await sql.query<RetryLockedRow>(RETRY_LOCK, [ids]);
  // 2. Decide.
  const plan = planRetries(rows, requests, newId);
  if (!plan.params) return plan.outcomes;
  // 3. Write; every planned attempt must be created (the files are locked: nothing moved them).
  const created = await sql.query<{ id: string }>(RETRY_WRITE, plan.params);
  const planned = plan.outcomes.filter((o) => o.next !== null).length;
  if (created.length !== planned)
    throw new Error(`retry created ${created.length} of ${planned} attempts: files moved under their lock`);
  return plan.outcomes;
}

/**
 * Steps 1–2 of {@link applyRetries} only: lock, decide, write nothing (`jobs retry --dry-run`).
 * The outcomes say what a retry would do right now; the next attempts' ids are never used.
 */
export async function previewRetries(
  tx: StepTransaction,
  requests: readonly RetryRequest[],
): Promise<RetryOutcome[]> {
  if (requests.length === 0) return [];
  const ids = [...new Set(requests.map((r) => r.jobId))];
  const rows = await stepSqlOf(tx).query<RetryLockedRow>(RETRY_LOCK, [ids]);
  return planRetries(rows, requests, newId).outcomes;
}
