/**
 * Sample contexts and events for the recognition job machine: one deterministic vocabulary shared
 * by the table test, the model-based path test and the model-against-database test.
 *
 * Time is data: every sample is built around one `now` (default `NOW`). A job in these samples was
 * published one minute before `now`, so its `reply_deadline` is `now + 9 min`; the "deadline
 * passed" sample comes `REPLY_TIMEOUT_MS + 1 min` after `now`, later than any deadline a sample
 * job can have, and the "deadline not passed" sample comes at `now`, earlier than any.
 * Pure: no I/O, no clock.
 */
import {
  CORE_ERROR_CODE,
  type JobContext,
  type JobEvent,
  type JobEventType,
  type JobStatus,
} from '../../machines/index.js';
import {
  SAMPLE_FILE_ID as FILE_ID,
  SAMPLE_JOB_ID as JOB_ID,
  SAMPLE_NOW as NOW,
  SAMPLE_NEXT_JOB_ID as NEXT_JOB_ID,
  SAMPLE_OTHER_SERVICE as OTHER_SERVICE,
  SAMPLE_PUBLISH_POLICY as PUBLISH_RETRY_POLICY,
  SAMPLE_REPLY_TIMEOUT_MS as REPLY_TIMEOUT_MS,
  SAMPLE_SERVICE as SERVICE,
} from '../../workshop/statecharts/samples.js';

/**
 * The constants are the statecharts' samples (`workshop/statecharts/samples.ts`), under the names the
 * tests read: one set of sample jobs for the generated charts and the tests.
 */
export {
  SAMPLE_NOW as NOW,
  SAMPLE_JOB_ID as JOB_ID,
  SAMPLE_FILE_ID as FILE_ID,
  SAMPLE_NEXT_JOB_ID as NEXT_JOB_ID,
  SAMPLE_SERVICE as SERVICE,
  SAMPLE_OTHER_SERVICE as OTHER_SERVICE,
  SAMPLE_REPLY_TIMEOUT_MS as REPLY_TIMEOUT_MS,
  SAMPLE_PUBLISH_POLICY as PUBLISH_RETRY_POLICY,
} from '../../workshop/statecharts/samples.js';

export const ACK_MSG_ID = `ack:${JOB_ID}:1`;
export const DONE_MSG_ID = `result:${JOB_ID}:done`;
export const NEEDS_CHECK_MSG_ID = `result:${JOB_ID}:needs_check`;
export const ERROR_MSG_ID = `result:${JOB_ID}:error`;
export const OTHER_ACK_MSG_ID = `ack:${JOB_ID}:impostor`;
export const OTHER_RESULT_MSG_ID = `result:${JOB_ID}:impostor`;
/** The result that finished a job in the sample `done`/`needs_check`/`error` contexts. */
export const EARLIER_RESULT_MSG_ID = `result:${JOB_ID}:earlier`;

export const PUBLISH_ERROR = 'no JetStream ack within 5000 ms';
export const RESULT_S3 = { bucket: 'arm-ka', key: `results/${FILE_ID}/${JOB_ID}/result.json` } as const;
export const SERVICE_ERROR = { code: 'UNSUPPORTED_FORMAT', message: 'xls 95 is not supported' } as const;

const MINUTE = 60_000;
const at = (base: Date, ms: number): Date => new Date(base.getTime() + ms);

/** A freshly created job (`pending`, due for publishing at `now`), as `jobs create` inserts it. */
export function baseContext(overrides: Partial<JobContext> = {}, now: Date = NOW): JobContext {
  return {
    jobId: JOB_ID,
    fileId: FILE_ID,
    attempt: 1,
    targetService: SERVICE.name,
    fileIsCurrent: true,
    serviceName: null,
    serviceVersion: null,
    publishAttempts: 0,
    nextPublishAt: now,
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

/** A plausible context for a job that reached `status` the usual way, before `now`. */
export function contextIn(
  status: JobStatus,
  overrides: Partial<JobContext> = {},
  now: Date = NOW,
): JobContext {
  const publishedAt = at(now, -MINUTE);
  const published: Partial<JobContext> = {
    publishAttempts: 1,
    nextPublishAt: null,
    publishedAt,
    replyDeadline: at(publishedAt, REPLY_TIMEOUT_MS),
  };
  const processing: Partial<JobContext> = {
    ...published,
    startedAt: at(now, -MINUTE / 2),
    serviceName: SERVICE.name,
    serviceVersion: SERVICE.version,
  };
  const finishedAt = at(now, -MINUTE / 6);
  const byStatus: Record<JobStatus, Partial<JobContext>> = {
    pending: {},
    published,
    processing,
    done: {
      ...processing,
      finishedAt,
      metrics: { pages: 3 },
      resultSchemaVersion: '2.1',
      resultS3ObjectId: '41',
      resultMsgId: EARLIER_RESULT_MSG_ID,
    },
    needs_check: {
      ...processing,
      finishedAt,
      metrics: { pages: 3, low_confidence_cells: 7 },
      resultSchemaVersion: '2.1',
      resultS3ObjectId: '42',
      resultMsgId: EARLIER_RESULT_MSG_ID,
    },
    error: {
      ...processing,
      finishedAt,
      errorCode: SERVICE_ERROR.code,
      errorMessage: SERVICE_ERROR.message,
      resultMsgId: EARLIER_RESULT_MSG_ID,
    },
    timeout: {
      ...processing,
      finishedAt,
      errorCode: CORE_ERROR_CODE.TIMEOUT,
      errorMessage: 'no result before reply_deadline',
    },
    dlq: {
      publishAttempts: PUBLISH_RETRY_POLICY.maxAttempts,
      nextPublishAt: null,
      finishedAt,
      errorCode: CORE_ERROR_CODE.PUBLISH_FAILED,
      errorMessage: PUBLISH_ERROR,
    },
  };
  return baseContext({ ...byStatus[status], ...overrides }, now);
}

/** One sample event of each kind the machine tells apart, all at `now` but the deadline ones. */
export function sampleEventsByKind(now: Date = NOW) {
  return {
    published: { type: 'PUBLISHED', now, replyTimeoutMs: REPLY_TIMEOUT_MS },
    publishFailed: { type: 'PUBLISH_FAILED', now, error: PUBLISH_ERROR, policy: PUBLISH_RETRY_POLICY },
    deliveryExhausted: { type: 'DELIVERY_EXHAUSTED', now, deliveries: 5 },
    ack: { type: 'ENVELOPE_PROCESSING', now, msgId: ACK_MSG_ID, service: { ...SERVICE } },
    done: {
      type: 'ENVELOPE_RESULT',
      now,
      msgId: DONE_MSG_ID,
      status: 'done',
      service: { ...SERVICE },
      resultS3: { ...RESULT_S3 },
      resultSchemaVersion: '2.1',
      metrics: { pages: 12, rows: 480 },
    },
    needsCheck: {
      type: 'ENVELOPE_RESULT',
      now,
      msgId: NEEDS_CHECK_MSG_ID,
      status: 'needs_check',
      service: { ...SERVICE },
      metrics: { pages: 12, low_confidence_cells: 7 },
    },
    error: {
      type: 'ENVELOPE_RESULT',
      now,
      msgId: ERROR_MSG_ID,
      status: 'error',
      service: { ...SERVICE },
      error: { ...SERVICE_ERROR },
    },
    otherServiceAck: {
      type: 'ENVELOPE_PROCESSING',
      now,
      msgId: OTHER_ACK_MSG_ID,
      service: { ...OTHER_SERVICE },
    },
    otherServiceError: {
      type: 'ENVELOPE_RESULT',
      now,
      msgId: OTHER_RESULT_MSG_ID,
      status: 'error',
      service: { ...OTHER_SERVICE },
      error: { code: 'HIJACKED', message: 'not the service the job was published to' },
    },
    deadlinePassed: { type: 'DEADLINE_PASSED', now: at(now, REPLY_TIMEOUT_MS + MINUTE) },
    deadlineNotPassed: { type: 'DEADLINE_PASSED', now },
    retryRequested: { type: 'RETRY_REQUESTED', now, newJobId: NEXT_JOB_ID },
  } as const satisfies Record<string, JobEvent>;
}

/** The distinct sample events, in a fixed order: the alphabet of the model-based paths. */
export function sampleEvents(now: Date = NOW): JobEvent[] {
  return Object.values(sampleEventsByKind(now));
}

/** Names of the event variants of the (state × event) table. */
export const EVENT_VARIANT_NAMES = [
  'PUBLISHED',
  'PUBLISH_FAILED, attempts left',
  'PUBLISH_FAILED, last attempt',
  'DELIVERY_EXHAUSTED',
  'ENVELOPE_PROCESSING',
  'ENVELOPE_RESULT done, with result_s3',
  'ENVELOPE_RESULT needs_check, without result_s3',
  'ENVELOPE_RESULT error',
  'ENVELOPE_RESULT, msg id already applied',
  'ENVELOPE_PROCESSING, from another service',
  'ENVELOPE_RESULT, from another service',
  'DEADLINE_PASSED, deadline passed',
  'DEADLINE_PASSED, deadline not passed',
  'RETRY_REQUESTED',
] as const;
export type EventVariantName = (typeof EVENT_VARIANT_NAMES)[number];

/**
 * An event plus what it presumes of the job: `context` overrides the state's sample context
 * (e.g. how many publish attempts already failed), so the variant means the same in every state.
 */
export interface EventVariant {
  name: EventVariantName;
  event: JobEvent;
  context: Partial<JobContext>;
}

/** Every event variant the machine tells apart, in `EVENT_VARIANT_NAMES` order. */
export function eventVariants(now: Date = NOW): EventVariant[] {
  const e = sampleEventsByKind(now);
  const last = PUBLISH_RETRY_POLICY.maxAttempts - 1;
  const variants: EventVariant[] = [
    { name: 'PUBLISHED', event: e.published, context: {} },
    { name: 'PUBLISH_FAILED, attempts left', event: e.publishFailed, context: { publishAttempts: last - 1 } },
    { name: 'PUBLISH_FAILED, last attempt', event: e.publishFailed, context: { publishAttempts: last } },
    { name: 'DELIVERY_EXHAUSTED', event: e.deliveryExhausted, context: {} },
    { name: 'ENVELOPE_PROCESSING', event: e.ack, context: {} },
    { name: 'ENVELOPE_RESULT done, with result_s3', event: e.done, context: {} },
    { name: 'ENVELOPE_RESULT needs_check, without result_s3', event: e.needsCheck, context: {} },
    { name: 'ENVELOPE_RESULT error', event: e.error, context: {} },
    { name: 'ENVELOPE_RESULT, msg id already applied', event: e.done, context: { resultMsgId: DONE_MSG_ID } },
    { name: 'ENVELOPE_PROCESSING, from another service', event: e.otherServiceAck, context: {} },
    { name: 'ENVELOPE_RESULT, from another service', event: e.otherServiceError, context: {} },
    { name: 'DEADLINE_PASSED, deadline passed', event: e.deadlinePassed, context: {} },
    { name: 'DEADLINE_PASSED, deadline not passed', event: e.deadlineNotPassed, context: {} },
    { name: 'RETRY_REQUESTED', event: e.retryRequested, context: {} },
  ];
  return variants;
}

/** The variant named `name`. */
export function eventVariant(name: EventVariantName, now: Date = NOW): EventVariant {
  const variant = eventVariants(now).find((v) => v.name === name);
  if (!variant) throw new Error(`no event variant named ${name}`);
  return variant;
}

/** The event types the samples cover (for "every event type is covered" checks). */
export function sampleEventTypes(now: Date = NOW): Set<JobEventType> {
  return new Set(sampleEvents(now).map((e) => e.type));
}
