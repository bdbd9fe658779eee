/**
 * Types of the recognition job machine: its context (the job row, camelCased) and its events.
 * Pure: no imports but the machine's own vocabulary.
 */
import type { FileStatus, JobStatus, ResultStatus } from './statuses.js';

/** Who the service says it is; copied into `service_name` / `service_version`. */
export interface ServiceInfo {
  name: string;
  version: string;
}

/** An object in S3, as a result envelope names it. */
export interface S3Pointer {
  bucket: string;
  key: string;
}

/**
 * The machine's context: every column of `recognition_job` but `status` (which is the state
 * value) and the bookkeeping timestamps, plus `fileIsCurrent`, read with the row so the machine
 * can decide whether the file is still this job's to change.
 */
export interface JobContext {
  jobId: string;
  fileId: string;
  attempt: number;
  targetService: string;
  /** `stored_file.current_recognition_job_id = jobId` when the row was locked. */
  fileIsCurrent: boolean;
  serviceName: string | null;
  serviceVersion: string | null;
  publishAttempts: number;
  nextPublishAt: Date | null;
  publishedAt: Date | null;
  replyDeadline: Date | null;
  startedAt: Date | null;
  finishedAt: Date | null;
  metrics: Record<string, unknown> | null;
  errorCode: string | null;
  errorMessage: string | null;
  resultSchemaVersion: string | null;
  /** Filled in by the shell after it executes `registerResultObject`; the machine never sets it. */
  resultS3ObjectId: string | null;
  resultMsgId: string | null;
}

/** Backoff policy for failed publishes, given with the event (configuration, not state). */
export interface PublishRetryPolicy {
  maxAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

/** Every event carries `now`: the database clock at the moment the job row was locked. */
interface Timed {
  now: Date;
}

/** JetStream acknowledged the job message. */
export interface PublishedEvent extends Timed {
  type: 'PUBLISHED';
  replyTimeoutMs: number;
}
/** Publishing the job message failed (no JetStream ack in time, or an error). */
export interface PublishFailedEvent extends Timed {
  type: 'PUBLISH_FAILED';
  error: string;
  policy: PublishRetryPolicy;
}
/** JetStream's max-deliveries advisory: no service took the job message. */
export interface DeliveryExhaustedEvent extends Timed {
  type: 'DELIVERY_EXHAUSTED';
  deliveries: number;
}
/** A `processing` envelope: the service acknowledged the job. */
export interface EnvelopeProcessingEvent extends Timed {
  type: 'ENVELOPE_PROCESSING';
  msgId: string | null;
  service: ServiceInfo;
}
/** A result envelope (`done`, `needs_check` or `error`); `msgId` is its `Nats-Msg-Id`. */
export interface EnvelopeResultEvent extends Timed {
  type: 'ENVELOPE_RESULT';
  msgId: string;
  status: ResultStatus;
  service: ServiceInfo;
  resultS3?: S3Pointer | undefined;
  resultSchemaVersion?: string | undefined;
  metrics?: Record<string, unknown> | undefined;
  error?: { code: string; message: string } | undefined;
}
/** The watchdog found `reply_deadline` in the past. */
export interface DeadlinePassedEvent extends Timed {
  type: 'DEADLINE_PASSED';
}
/**
 * An operator asked for a failed job to run again (`jobs retry`): a new job, the next attempt for
 * the same file. This job keeps its final status; the new one starts in `pending`.
 */
export interface RetryRequestedEvent extends Timed {
  type: 'RETRY_REQUESTED';
  /** The new attempt's id, chosen by the shell so that both jobs' transition rows can name each other. */
  newJobId: string;
  /** The service the new attempt is published to; this job's `target_service` when absent. */
  targetService?: string;
}

export type JobEvent =
  | PublishedEvent
  | PublishFailedEvent
  | DeliveryExhaustedEvent
  | EnvelopeProcessingEvent
  | EnvelopeResultEvent
  | DeadlinePassedEvent
  | RetryRequestedEvent;
export type JobEventType = JobEvent['type'];

type DistributiveOmit<T, K extends keyof never> = T extends unknown ? Omit<T, K> : never;
/** An event before it is timed: what a loop or a message builds; the step adds `now` from the database clock. */
export type JobEventInput = DistributiveOmit<JobEvent, 'now'>;

/** One event for one job, before it is timed: what the loops and the inbox hand the step. */
export interface StepItem {
  jobId: string;
  event: JobEventInput;
}

export const JOB_EVENT_TYPES = [
  'PUBLISHED',
  'PUBLISH_FAILED',
  'DELIVERY_EXHAUSTED',
  'ENVELOPE_PROCESSING',
  'ENVELOPE_RESULT',
  'DEADLINE_PASSED',
  'RETRY_REQUESTED',
] as const satisfies readonly JobEventType[];

/**
 * The `event` of the first transition row of a job created as the next attempt of a failed one:
 * `pending → pending`, its detail naming the job it retries. No transition of the machine writes
 * it (a job starts in `pending`); the step writes it with the job, as part of `createAttempt`.
 */
export const ATTEMPT_CREATED_EVENT = 'CREATED';

/**
 * What the step reports for one event. `rejected`: the event claims to come from a service other
 * than the job's `target_service`; it changes nothing, and the inbox quarantines it.
 */
export type Decision = 'applied' | 'duplicate' | 'ignored' | 'late' | 'rejected' | 'unknown_job';

/** Why an event changed nothing. */
export type NoChangeReason =
  | 'same_msg_id'
  | 'repeated_ack'
  | 'ack_not_accepted'
  | 'result_after_final'
  | 'deadline_not_passed'
  | 'not_accepted'
  | 'not_failed'
  | 'file_not_current'
  | 'service_mismatch';

/** The effects the machine returns as data; the shell turns each into SQL in the same transaction. */
export interface JobEffects {
  /** Change the file's status (only ever returned while the file's current job is this job). */
  setFileStatus: { status: FileStatus; errorCode: string | null };
  /** Register the result object in `s3_object` and point `result_s3_object_id` at it. */
  registerResultObject: { bucket: string; key: string; createdBy: string };
  /** Append a `recognition_job_transition` row. */
  recordTransition: { event: JobEventType; msgId: string | null; detail: Record<string, unknown> };
  /**
   * Create the next attempt for this job's file: a `pending` job `jobId` at `attempt`, published to
   * `targetService`; the file pointing at it (`QUEUED`, no error code); and its creation row
   * ({@link ATTEMPT_CREATED_EVENT}). Only ever returned while the file's current job is this job.
   */
  createAttempt: { jobId: string; fileId: string; attempt: number; targetService: string; retryOf: string };
  /** The event changed nothing; say why, so the shell can log and count it. */
  noteNoChange: { decision: Exclude<Decision, 'applied' | 'unknown_job'>; reason: NoChangeReason };
}
export type JobEffectType = keyof JobEffects;
/** Every effect the machine returns, for telling them apart from its internal actions. */
export const JOB_EFFECT_TYPES = [
  'setFileStatus',
  'registerResultObject',
  'recordTransition',
  'createAttempt',
  'noteNoChange',
] as const satisfies readonly JobEffectType[];
export type JobEffect = { [K in JobEffectType]: { type: K; params: JobEffects[K] } }[JobEffectType];

export type { JobStatus };
