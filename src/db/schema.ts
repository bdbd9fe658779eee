/**
 * The typed Kysely view of the database the migrations create. Column names are contracts
 * (docs/lifecycle.md, "The data model"): never rename them.
 */
import type { ColumnType, Generated, Insertable, Selectable } from 'kysely';
import type {
  AuditAction,
  BucketRole,
  FileStatus,
  JobStatus,
  QuarantineReason,
} from '../../machines/index.js';

/** A timestamptz written by the database clock (`now()` default) and read as a Date. */
type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;
/** bigint: node-postgres returns int8 as a string to keep precision. */
type BigIntId = string;
type BigIntRef = ColumnType<string, string | number, string | number>;

export interface S3ObjectTable {
  id: Generated<BigIntId>;
  bucket: string;
  key: string;
  bucket_role: BucketRole;
  created_by: string;
  created_at: Timestamp;
}

export interface StoredFileTable {
  id: Generated<string>;
  s3_object_id: BigIntRef;
  original_name: string;
  status: Generated<FileStatus>;
  error_code: string | null;
  current_recognition_job_id: string | null;
  created_at: Timestamp;
  updated_at: Timestamp;
}

export interface RecognitionJobTable {
  id: Generated<string>;
  file_id: string;
  attempt: number;
  target_service: string;
  status: Generated<JobStatus>;
  service_name: string | null;
  service_version: string | null;
  publish_attempts: Generated<number>;
  next_publish_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  published_at: Date | null;
  reply_deadline: Date | null;
  started_at: Date | null;
  finished_at: Date | null;
  metrics: ColumnType<Record<string, unknown> | null, string | null, string | null>;
  error_code: string | null;
  error_message: string | null;
  result_schema_version: string | null;
  result_s3_object_id: BigIntRef | null;
  result_msg_id: string | null;
  /** W3C `traceparent` the job's trace continues from (migration 0006); null: none. */
  trace_parent: string | null;
  /** W3C `tracestate` that goes with `trace_parent`. */
  trace_state: string | null;
  created_at: Timestamp;
  updated_at: Timestamp;
}

export interface RecognitionJobTransitionTable {
  id: Generated<BigIntId>;
  job_id: string;
  from_status: JobStatus;
  to_status: JobStatus;
  event: string;
  msg_id: string | null;
  at: Timestamp;
  detail: ColumnType<Record<string, unknown>, string, string>;
}

export interface InboxQuarantineTable {
  id: Generated<BigIntId>;
  stream: string | null;
  stream_seq: BigIntRef | null;
  subject: string;
  msg_id: string | null;
  job_id: string | null;
  reason: QuarantineReason;
  details: ColumnType<unknown, string | null, string | null>;
  payload: Buffer;
  headers: ColumnType<Record<string, string[]>, string, string>;
  received_at: Timestamp;
  replayed_at: Date | null;
  replay_outcome: string | null;
}

export interface RecognitionAuditTable {
  id: Generated<BigIntId>;
  at: Timestamp;
  actor: string;
  via: 'cli' | 'console';
  action: AuditAction;
  selection: ColumnType<Record<string, unknown>, string, string>;
  affected: number;
  outcome: ColumnType<Record<string, unknown>, string | undefined, string>;
  note: string | null;
}

export interface RecognitionJobEdgeTable {
  from_status: JobStatus;
  to_status: JobStatus;
}

/** The database, table by table. */
export interface Database {
  s3_object: S3ObjectTable;
  stored_file: StoredFileTable;
  recognition_job: RecognitionJobTable;
  recognition_job_transition: RecognitionJobTransitionTable;
  inbox_quarantine: InboxQuarantineTable;
  recognition_job_edge: RecognitionJobEdgeTable;
  recognition_audit: RecognitionAuditTable;
}

/** The trace columns: a row built in code for the machine (samples, scenarios) may leave them out. */
type JobTraceColumns = 'trace_parent' | 'trace_state';
export type JobRow = Omit<Selectable<RecognitionJobTable>, JobTraceColumns> &
  Partial<Pick<Selectable<RecognitionJobTable>, JobTraceColumns>>;
export type FileRow = Selectable<StoredFileTable>;
export type S3ObjectRow = Selectable<S3ObjectTable>;
export type TransitionRow = Selectable<RecognitionJobTransitionTable>;
export type QuarantineRow = Selectable<InboxQuarantineTable>;
export type NewQuarantine = Insertable<InboxQuarantineTable>;
export type AuditRow = Selectable<RecognitionAuditTable>;
