/**
 * The closed vocabularies of the lifecycle, shared by the machine, the migrations' CHECK
 * constraints and the tests. Pure: no imports.
 */

/** A closed vocabulary: an object naming each value by itself, so `JOB_STATUS.done` is `'done'`. */
function vocabulary<const T extends string>(values: readonly T[]): { readonly [K in T]: K } {
  return Object.fromEntries(values.map((v) => [v, v])) as { readonly [K in T]: K };
}

/** `recognition_job.status`: the machine's state values. */
export const JOB_STATUS = vocabulary([
  ...['pending', 'published', 'processing'],
  ...['done', 'needs_check', 'error', 'timeout', 'dlq'],
] as const);
export type JobStatus = keyof typeof JOB_STATUS;
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
export const FILE_STATUS = vocabulary(['UPLOADED', 'QUEUED', 'PROCESSING', 'ERROR', 'DONE']);
export type FileStatus = keyof typeof FILE_STATUS;
export const FILE_STATUSES = Object.values(FILE_STATUS) as readonly FileStatus[];

/** Statuses a service may report in a result envelope. */
export const ENVELOPE_STATUS = vocabulary(['processing', 'done', 'needs_check', 'error']);
export type EnvelopeStatus = keyof typeof ENVELOPE_STATUS;
export const RESULT_STATUSES = ['done', 'needs_check', 'error'] as const satisfies readonly EnvelopeStatus[];
export type ResultStatus = (typeof RESULT_STATUSES)[number];

/** `s3_object.bucket_role`. */
export const BUCKET_ROLE = vocabulary(['uploads', 'results']);
export type BucketRole = keyof typeof BUCKET_ROLE;
export const BUCKET_ROLES = Object.values(BUCKET_ROLE) as readonly BucketRole[];

/**
 * `inbox_quarantine.reason`: why a message can never be applied, whatever the retries.
 * `SERVICE_MISMATCH`: an ack or result whose `service.name` is not the job's `target_service`.
 * `RESULT_OBJECT_NOT_OWNED`: a result whose `result_s3` is not the job's own object: outside the
 * results bucket or the job's prefix `results/<file_id>/<job_id>/`, or an object `s3_object`
 * already holds.
 */
export const QUARANTINE_REASON = vocabulary([
  ...['INVALID_JSON', 'SCHEMA_INVALID', 'MISSING_MSG_ID', 'UNKNOWN_JOB', 'PAYLOAD_TOO_LARGE'],
  ...['SERVICE_MISMATCH', 'RESULT_OBJECT_NOT_OWNED'],
] as const);
export type QuarantineReason = keyof typeof QUARANTINE_REASON;
export const QUARANTINE_REASONS = Object.values(QUARANTINE_REASON) as readonly QuarantineReason[];

/** `recognition_job.error_code` values the core itself writes (services bring their own codes). */
export const CORE_ERROR_CODE = vocabulary(['TIMEOUT', 'PUBLISH_FAILED', 'MAX_DELIVERIES']);
export type CoreErrorCode = keyof typeof CORE_ERROR_CODE;

/** `recognition_audit.action`: the operator actions the audit log records. */
export const AUDIT_ACTIONS = ['jobs retry', 'quarantine replay', 'quarantine purge', 'inbox replay'] as const;
export type AuditAction = (typeof AUDIT_ACTIONS)[number];
