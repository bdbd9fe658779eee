/**
 * The job row is the machine's state: `status` is the state value, the other columns are the
 * context. This is the one mapping between the two, in both directions.
 */
import type { JobContext, JobState } from '../../machines/index.js';
import type { JobRow } from './schema.js';

/** Columns the machine may change, with the context key each comes from. */
export const MUTABLE_JOB_COLUMNS = {
  status: null,
  service_name: 'serviceName',
  service_version: 'serviceVersion',
  publish_attempts: 'publishAttempts',
  next_publish_at: 'nextPublishAt',
  published_at: 'publishedAt',
  reply_deadline: 'replyDeadline',
  started_at: 'startedAt',
  finished_at: 'finishedAt',
  metrics: 'metrics',
  error_code: 'errorCode',
  error_message: 'errorMessage',
  result_schema_version: 'resultSchemaVersion',
  result_s3_object_id: 'resultS3ObjectId',
  result_msg_id: 'resultMsgId',
} as const satisfies Record<string, keyof JobContext | null>;
export type MutableJobColumn = keyof typeof MUTABLE_JOB_COLUMNS;

/** The columns a job's state is made of: every column but the bookkeeping timestamps. */
export type JobStateRow = Omit<JobRow, 'created_at' | 'updated_at'>;

/** {@link JobStateRow}'s columns, for SELECT lists (reading fewer timestamps is cheaper). */
export const JOB_STATE_COLUMNS = [
  'id',
  'file_id',
  'attempt',
  'target_service',
  'status',
  ...(Object.keys(MUTABLE_JOB_COLUMNS).filter((c) => c !== 'status') as Exclude<
    MutableJobColumn,
    'status'
  >[]),
] as const satisfies ReadonlyArray<keyof JobStateRow>;

/** Hydration input from a row (plus whether the file's current job is this one). */
export function rowToJobState(row: JobStateRow, fileIsCurrent: boolean): JobState {
  return {
    status: row.status,
    context: {
      jobId: row.id,
      fileId: row.file_id,
      attempt: row.attempt,
      targetService: row.target_service,
      fileIsCurrent,
      serviceName: row.service_name,
      serviceVersion: row.service_version,
      publishAttempts: row.publish_attempts,
      nextPublishAt: row.next_publish_at,
      publishedAt: row.published_at,
      replyDeadline: row.reply_deadline,
      startedAt: row.started_at,
      finishedAt: row.finished_at,
      metrics: row.metrics,
      errorCode: row.error_code,
      errorMessage: row.error_message,
      resultSchemaVersion: row.result_schema_version,
      resultS3ObjectId: row.result_s3_object_id,
      resultMsgId: row.result_msg_id,
    },
  };
}

function same(a: unknown, b: unknown): boolean {
  if (a instanceof Date && b instanceof Date) return a.getTime() === b.getTime();
  if (a !== null && b !== null && typeof a === 'object' && typeof b === 'object') {
    return JSON.stringify(a) === JSON.stringify(b);
  }
  return a === b;
}

/** The columns whose values differ between two states of a job, with their new values. */
export function changedColumns(
  before: JobState,
  after: JobState,
): Partial<Record<MutableJobColumn, unknown>> {
  const diff: Partial<Record<MutableJobColumn, unknown>> = {};
  if (before.status !== after.status) diff.status = after.status;
  for (const [column, key] of CONTEXT_COLUMNS) {
    if (!same(before.context[key], after.context[key])) diff[column] = after.context[key];
  }
  return diff;
}

/** Whether any mutable column differs between two states of a job. */
export function stateChanged(before: JobState, after: JobState): boolean {
  if (before.status !== after.status) return true;
  for (const [, key] of CONTEXT_COLUMNS) if (!same(before.context[key], after.context[key])) return true;
  return false;
}

/** (column, context key) of every mutable column but `status`, in column order, computed once. */
export const CONTEXT_COLUMNS = Object.entries(MUTABLE_JOB_COLUMNS).filter(
  (
    e,
  ): e is [
    Exclude<MutableJobColumn, 'status'>,
    Exclude<(typeof MUTABLE_JOB_COLUMNS)[MutableJobColumn], null>,
  ] => e[1] !== null,
);
