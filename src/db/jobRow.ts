/**
 * The job row is the machine's state: `status` is the state value, the other columns are the
 * context. This is the one mapping between the two, in both directions.
 */
import {
  CONTEXT_THE_MACHINE_READS,
  contextOfReadKeys,
  type JobContext,
  type JobState,
} from '../../machines/index.js';
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

/** The columns of the context keys the machine cannot change. */
const FIXED_JOB_COLUMNS = {
  id: 'jobId',
  file_id: 'fileId',
  attempt: 'attempt',
  target_service: 'targetService',
} as const satisfies Partial<Record<keyof JobStateRow, keyof JobContext>>;

/** Each context key with its column (`fileIsCurrent` is the file's, not the job's). */
type ColumnOf = {
  [C in MutableJobColumn as (typeof MUTABLE_JOB_COLUMNS)[C] & string]: C;
} & { [C in keyof typeof FIXED_JOB_COLUMNS as (typeof FIXED_JOB_COLUMNS)[C]]: C };
const COLUMN_OF = Object.fromEntries(
  [...Object.entries(FIXED_JOB_COLUMNS), ...Object.entries(MUTABLE_JOB_COLUMNS)]
    .filter(([, key]) => key !== null)
    .map(([column, key]) => [key, column]),
) as ColumnOf;

type ReadKey = Exclude<(typeof CONTEXT_THE_MACHINE_READS)[number], 'fileIsCurrent'>;

/**
 * A time as the step reads it: milliseconds since the epoch, as the text of an `int8`. PostgreSQL
 * formats a `timestamptz` and the driver parses it back at a cost that shows in a batch's read;
 * an integer costs little either way ({@link timeOf} makes it a Date).
 */
export type EpochMs = string;

/** A column's value as the step reads it: times as {@link EpochMs}. */
type AsRead<T> = T extends Date ? EpochMs : T;

/**
 * The job columns a decision depends on: the status and the columns of the context the machine
 * reads, times as {@link EpochMs}.
 */
export type ReadJobRow = { [C in 'status' | ColumnOf[ReadKey]]: AsRead<JobStateRow[C]> };

/** A time read as {@link EpochMs}, as a Date. */
export function timeOf(ms: EpochMs): Date;
export function timeOf(ms: EpochMs | null): Date | null;
export function timeOf(ms: EpochMs | null): Date | null {
  return ms === null ? null : new Date(Number(ms));
}

/** (column, context key) of each column of the context the machine reads. */
const READ_CONTEXT_COLUMNS = CONTEXT_THE_MACHINE_READS.filter(
  (key): key is ReadKey => key !== 'fileIsCurrent',
).map((key) => [COLUMN_OF[key], key] as const);

/** {@link ReadJobRow}'s columns, for the step's SELECT lists. */
export const READ_JOB_COLUMNS: ReadonlyArray<keyof ReadJobRow> = [
  'status',
  ...READ_CONTEXT_COLUMNS.map(([column]) => column),
];

/**
 * Hydration input from the columns a decision depends on: the machine's context of the keys it
 * reads (`contextOfReadKeys`), every other key undefined. After a decision, a key with a value
 * that was undefined is one the machine assigned (`assignedColumns` in `src/step/write.ts`).
 */
export function rowToReadState(row: ReadJobRow, fileIsCurrent: boolean): JobState {
  const context = contextOfReadKeys({
    jobId: row.id,
    fileId: row.file_id,
    attempt: row.attempt,
    targetService: row.target_service,
    fileIsCurrent,
    publishAttempts: row.publish_attempts,
    replyDeadline: timeOf(row.reply_deadline),
    resultMsgId: row.result_msg_id,
  });
  return { status: row.status, context };
}

/** Whether two values of a context key are the same: times by their instant, documents by their JSON. */
export function sameValue(a: unknown, b: unknown): boolean {
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
    if (!sameValue(before.context[key], after.context[key])) diff[column] = after.context[key];
  }
  return diff;
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
