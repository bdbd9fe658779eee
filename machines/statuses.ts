/**
 * The closed vocabularies of the lifecycle, shared by the machine, the migrations' CHECK
 * constraints and the tests. Pure: no imports.
 */

/** `recognition_job.status`: the machine's state values. */
export const JOB_STATUS = {
  pending: 'pending',
  published: 'published',
  processing: 'processing',
  done: 'done',
  needs_check: 'needs_check',
  error: 'error',
  timeout: 'timeout',
  dlq: 'dlq',
} as const;
export type JobStatus = (typeof JOB_STATUS)[keyof typeof JOB_STATUS];
export const JOB_STATUSES = Object.values(JOB_STATUS) as readonly JobStatus[];

/** Statuses a job never leaves. */
export const FINAL_JOB_STATUSES = [
  JOB_STATUS.done,
  JOB_STATUS.needs_check,
  JOB_STATUS.error,
  JOB_STATUS.timeout,
  JOB_STATUS.dlq,
] as const satisfies readonly JobStatus[];
export type FinalJobStatus = (typeof FINAL_JOB_STATUSES)[number];

/** Final statuses of a job that failed: the ones a retry (a new job, the next attempt) starts from. */
export const FAILED_JOB_STATUSES = [
  JOB_STATUS.error,
  JOB_STATUS.timeout,
  JOB_STATUS.dlq,
] as const satisfies readonly FinalJobStatus[];
export type FailedJobStatus = (typeof FAILED_JOB_STATUSES)[number];

export function isFinalStatus(status: JobStatus): status is FinalJobStatus {
  return (FINAL_JOB_STATUSES as readonly JobStatus[]).includes(status);
}

/** `stored_file.status`. `DONE` belongs to the mapping loop; this project never sets it. */
export const FILE_STATUS = {
  UPLOADED: 'UPLOADED',
  QUEUED: 'QUEUED',
  PROCESSING: 'PROCESSING',
  ERROR: 'ERROR',
  DONE: 'DONE',
} as const;
export type FileStatus = (typeof FILE_STATUS)[keyof typeof FILE_STATUS];
export const FILE_STATUSES = Object.values(FILE_STATUS) as readonly FileStatus[];

/** Statuses a service may report in a result envelope. */
export const ENVELOPE_STATUS = {
  processing: 'processing',
  done: 'done',
  needs_check: 'needs_check',
  error: 'error',
} as const;
export type EnvelopeStatus = (typeof ENVELOPE_STATUS)[keyof typeof ENVELOPE_STATUS];
export const RESULT_STATUSES = ['done', 'needs_check', 'error'] as const satisfies readonly EnvelopeStatus[];
export type ResultStatus = (typeof RESULT_STATUSES)[number];

/** `s3_object.bucket_role`. */
export const BUCKET_ROLE = { uploads: 'uploads', results: 'results' } as const;
export type BucketRole = (typeof BUCKET_ROLE)[keyof typeof BUCKET_ROLE];
export const BUCKET_ROLES = Object.values(BUCKET_ROLE) as readonly BucketRole[];

/** `inbox_quarantine.reason`: why a message can never be applied, whatever the retries. */
export const QUARANTINE_REASON = {
  INVALID_JSON: 'INVALID_JSON',
  SCHEMA_INVALID: 'SCHEMA_INVALID',
  MISSING_MSG_ID: 'MISSING_MSG_ID',
  UNKNOWN_JOB: 'UNKNOWN_JOB',
  PAYLOAD_TOO_LARGE: 'PAYLOAD_TOO_LARGE',
  /** An ack or result whose `service.name` is not the job's `target_service`. */
  SERVICE_MISMATCH: 'SERVICE_MISMATCH',
  /**
   * A result whose `result_s3` is not the job's own object: outside the results bucket or the
   * job's prefix `results/<file_id>/<job_id>/`, or an object `s3_object` already holds.
   */
  RESULT_OBJECT_NOT_OWNED: 'RESULT_OBJECT_NOT_OWNED',
} as const;
export type QuarantineReason = (typeof QUARANTINE_REASON)[keyof typeof QUARANTINE_REASON];
export const QUARANTINE_REASONS = Object.values(QUARANTINE_REASON) as readonly QuarantineReason[];

/** `recognition_job.error_code` values the core itself writes (services bring their own codes). */
export const CORE_ERROR_CODE = {
  TIMEOUT: 'TIMEOUT',
  PUBLISH_FAILED: 'PUBLISH_FAILED',
  MAX_DELIVERIES: 'MAX_DELIVERIES',
} as const;
export type CoreErrorCode = (typeof CORE_ERROR_CODE)[keyof typeof CORE_ERROR_CODE];
