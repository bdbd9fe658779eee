/**
 * Sample jobs and events for the generated state × event table: a plausible context for each
 * status and, for each event type, one variant per branch the machine tells apart.
 *
 * Pure: no I/O, no clock. Everything revolves around the fixed moment {@link SAMPLE_NOW}, so the
 * generated files are byte-for-byte reproducible.
 */
import {
  CORE_ERROR_CODE,
  type JobContext,
  type JobEvent,
  type PublishRetryPolicy,
} from '../../machines/index.js';

export const SAMPLE_NOW = new Date('2025-03-01T10:00:00.000Z');
export const SAMPLE_JOB_ID = '00000000-0000-4000-8000-000000000001';
export const SAMPLE_FILE_ID = '00000000-0000-4000-8000-000000000002';
/** The id a sample retry gives the next attempt. */
export const SAMPLE_NEXT_JOB_ID = '00000000-0000-4000-8000-000000000003';
export const SAMPLE_SERVICE = { name: 'tabular-parser', version: '1.4.2' } as const;
/** A service other than the sample job's `target_service`: its envelopes are rejected. */
export const SAMPLE_OTHER_SERVICE = { name: 'impostor', version: '6.6.6' } as const;
export const SAMPLE_REPLY_TIMEOUT_MS = 10 * 60_000;
export const SAMPLE_PUBLISH_POLICY: PublishRetryPolicy = {
  maxAttempts: 3,
  baseDelayMs: 1_000,
  maxDelayMs: 60_000,
};
export const SAMPLE_RESULT_S3 = {
  bucket: 'results',
  key: `results/${SAMPLE_FILE_ID}/${SAMPLE_JOB_ID}/result.json`,
} as const;

const MINUTE = 60_000;
const at = (ms: number) => new Date(SAMPLE_NOW.getTime() + ms);

/** A freshly created job: pending, due for publishing now, its file's current job. */
export function sampleBaseContext(overrides: Partial<JobContext> = {}): JobContext {
  return {
    jobId: SAMPLE_JOB_ID,
    fileId: SAMPLE_FILE_ID,
    attempt: 1,
    targetService: SAMPLE_SERVICE.name,
    fileIsCurrent: true,
    serviceName: null,
    serviceVersion: null,
    publishAttempts: 0,
    nextPublishAt: SAMPLE_NOW,
    publishedAt: null,
    replyDeadline: null,
    startedAt: null,
    finishedAt: null,
    metrics: null,
    errorCode: null,
    errorMessage: null,
    resultSchemaVersion: null,
    resultS3ObjectId: null,
    resultMsgId: null,
    ...overrides,
  };
}

/** A context for a job that reached `status` the usual way before {@link SAMPLE_NOW}. */
export function sampleContext(status: string): JobContext {
  const published: Partial<JobContext> = {
    publishAttempts: 1,
    nextPublishAt: null,
    publishedAt: at(-MINUTE),
    replyDeadline: at(-MINUTE + SAMPLE_REPLY_TIMEOUT_MS),
  };
  const processing = {
    ...published,
    startedAt: at(-MINUTE / 2),
    serviceName: SAMPLE_SERVICE.name,
    serviceVersion: SAMPLE_SERVICE.version,
  };
  const finished = { ...processing, finishedAt: at(-MINUTE / 6), resultMsgId: 'result-earlier' };
  const byStatus: Record<string, Partial<JobContext>> = {
    pending: {},
    published,
    processing,
    done: { ...finished, resultS3ObjectId: '41' },
    needs_check: { ...finished, resultS3ObjectId: '42' },
    error: { ...finished, errorCode: 'UNSUPPORTED_FORMAT', errorMessage: 'xls 95 is not supported' },
    timeout: {
      ...processing,
      finishedAt: at(-MINUTE / 6),
      errorCode: CORE_ERROR_CODE.TIMEOUT,
      errorMessage: 'no result before reply_deadline',
    },
    dlq: {
      publishAttempts: SAMPLE_PUBLISH_POLICY.maxAttempts,
      nextPublishAt: null,
      finishedAt: at(-MINUTE / 6),
      errorCode: CORE_ERROR_CODE.PUBLISH_FAILED,
      errorMessage: 'no JetStream ack',
    },
  };
  return sampleBaseContext(byStatus[status] ?? {});
}

/** One event of a type, with what it presumes of the job (merged into the state's sample context). */
export interface EventVariant {
  /** Plain words, e.g. "result done"; unique within its event type. */
  name: string;
  event: JobEvent;
  context: Partial<JobContext>;
}

const DONE_MSG_ID = 'result-done-1';

/** The variants of each event type, one per branch the machine tells apart. */
export function eventVariants(): Record<JobEvent['type'], EventVariant[]> {
  const now = SAMPLE_NOW;
  const service = { ...SAMPLE_SERVICE };
  const done = {
    type: 'ENVELOPE_RESULT',
    now,
    msgId: DONE_MSG_ID,
    status: 'done',
    service,
    resultS3: { ...SAMPLE_RESULT_S3 },
    resultSchemaVersion: '2.1',
    metrics: { pages: 12 },
  } as const;
  const publishFailed = {
    type: 'PUBLISH_FAILED',
    now,
    error: 'no JetStream ack within 5000 ms',
    policy: SAMPLE_PUBLISH_POLICY,
  } as const;
  return {
    PUBLISHED: [
      {
        name: 'JetStream accepted the job message',
        event: { type: 'PUBLISHED', now, replyTimeoutMs: SAMPLE_REPLY_TIMEOUT_MS },
        context: {},
      },
    ],
    PUBLISH_FAILED: [
      { name: 'attempts left', event: publishFailed, context: { publishAttempts: 0 } },
      {
        name: 'the last allowed attempt',
        event: publishFailed,
        context: { publishAttempts: SAMPLE_PUBLISH_POLICY.maxAttempts - 1 },
      },
    ],
    DELIVERY_EXHAUSTED: [
      {
        name: 'max deliveries reached',
        event: { type: 'DELIVERY_EXHAUSTED', now, deliveries: 5 },
        context: {},
      },
    ],
    ENVELOPE_PROCESSING: [
      {
        name: 'ack (status processing)',
        event: { type: 'ENVELOPE_PROCESSING', now, msgId: 'ack-1', service },
        context: {},
      },
      {
        name: "ack from a service other than the job's target_service",
        event: {
          type: 'ENVELOPE_PROCESSING',
          now,
          msgId: 'ack-other-1',
          service: { ...SAMPLE_OTHER_SERVICE },
        },
        context: {},
      },
    ],
    ENVELOPE_RESULT: [
      { name: 'result done', event: done, context: {} },
      {
        name: 'result needs_check',
        event: { ...done, msgId: 'result-needs-check-1', status: 'needs_check' },
        context: {},
      },
      {
        name: 'result error',
        event: {
          type: 'ENVELOPE_RESULT',
          now,
          msgId: 'result-error-1',
          status: 'error',
          service,
          error: { code: 'UNSUPPORTED_FORMAT', message: 'xls 95 is not supported' },
        },
        context: {},
      },
      {
        name: 'the result already applied (same msg id)',
        event: done,
        context: { resultMsgId: DONE_MSG_ID },
      },
      {
        name: "result from a service other than the job's target_service",
        event: { ...done, msgId: 'result-other-1', service: { ...SAMPLE_OTHER_SERVICE } },
        context: {},
      },
    ],
    DEADLINE_PASSED: [
      {
        name: 'reply_deadline passed',
        event: { type: 'DEADLINE_PASSED', now: at(SAMPLE_REPLY_TIMEOUT_MS + MINUTE) },
        context: {},
      },
      { name: 'reply_deadline not yet passed', event: { type: 'DEADLINE_PASSED', now }, context: {} },
    ],
    RETRY_REQUESTED: [
      {
        name: "retry, the file still this job's",
        event: { type: 'RETRY_REQUESTED', now, newJobId: SAMPLE_NEXT_JOB_ID },
        context: {},
      },
      {
        name: 'retry, the file has a newer job',
        event: { type: 'RETRY_REQUESTED', now, newJobId: SAMPLE_NEXT_JOB_ID },
        context: { fileIsCurrent: false },
      },
    ],
  };
}
