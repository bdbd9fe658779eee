/**
 * Sample jobs and events for the recognition job machine: the one vocabulary of the generated
 * state × event table and the machine's table, path, grid and database tests. `contextIn` has a
 * context for every `JobStatus`, `eventVariantsByType` the variants of every `JobEventType`, so a new
 * status or event fails the typecheck here until it has its samples. Every sample is built around one
 * `now`, so the generated files are reproducible. Pure: no I/O, no clock.
 */
import {
  CORE_ERROR_CODE,
  JOB_EVENT_TYPES,
  RESULT_STATUSES,
  type JobContext,
  type JobEvent,
  type JobEventType,
  type JobStatus,
  type PublishRetryPolicy,
} from '../machines/index.js';

export const NOW = new Date('2025-03-01T10:00:00.000Z');
export const JOB_ID = '00000000-0000-4000-8000-000000000001';
export const FILE_ID = '00000000-0000-4000-8000-000000000002';
/** The id a sample retry gives the next attempt. */
export const NEXT_JOB_ID = '00000000-0000-4000-8000-000000000003';
export const SERVICE = { name: 'tabular-parser', version: '1.4.2' } as const;
/** A service other than the sample job's `target_service`: its envelopes are rejected. */
export const OTHER_SERVICE = { name: 'impostor', version: '6.6.6' } as const;
export const REPLY_TIMEOUT_MS = 10 * 60_000;
export const PUBLISH_RETRY_POLICY: PublishRetryPolicy = {
  maxAttempts: 3,
  baseDelayMs: 1_000,
  maxDelayMs: 60_000,
};

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

// ---------------------------------------------------------------------------------------------
// Jobs
// ---------------------------------------------------------------------------------------------

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

/**
 * A plausible context for a job that reached `status` the usual way, before `now`. The map is typed
 * by status, so a new status asks for its context here. A state the map does not name (a changed
 * copy of the machine in a test) gets the fresh job's context.
 */
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

// ---------------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------------

/** One sample event of each kind the machine tells apart, all at `now` but the deadline ones. */
export function sampleEventsByKind(now: Date = NOW) {
  const done = {
    type: 'ENVELOPE_RESULT',
    now,
    msgId: DONE_MSG_ID,
    status: 'done',
    service: { ...SERVICE },
    resultS3: { ...RESULT_S3 },
    resultSchemaVersion: '2.1',
    metrics: { pages: 12, rows: 480 },
  } as const;
  return {
    published: { type: 'PUBLISHED', now, replyTimeoutMs: REPLY_TIMEOUT_MS },
    publishFailed: { type: 'PUBLISH_FAILED', now, error: PUBLISH_ERROR, policy: PUBLISH_RETRY_POLICY },
    deliveryExhausted: { type: 'DELIVERY_EXHAUSTED', now, deliveries: 5 },
    ack: { type: 'ENVELOPE_PROCESSING', now, msgId: ACK_MSG_ID, service: { ...SERVICE } },
    otherServiceAck: {
      type: 'ENVELOPE_PROCESSING',
      now,
      msgId: OTHER_ACK_MSG_ID,
      service: { ...OTHER_SERVICE },
    },
    done,
    needsCheck: {
      ...done,
      msgId: NEEDS_CHECK_MSG_ID,
      status: 'needs_check',
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

/** An event of type `T` plus what it presumes of the job, merged over the state's sample context. */
interface VariantSample<T extends JobEventType> {
  event: Extract<JobEvent, { type: T }>;
  context: Partial<JobContext>;
}

/**
 * The variants of each event type, one per branch the machine tells apart, keyed by plain words
 * (shown in the generated table after the event type). `context` overrides the state's sample
 * context (e.g. how many publish attempts already failed), so a variant means the same in every
 * state. Typed by event type: a new event asks for its variants here.
 */
export function eventVariantsByType(now: Date = NOW) {
  const e = sampleEventsByKind(now);
  const last = PUBLISH_RETRY_POLICY.maxAttempts - 1;
  return {
    PUBLISHED: {
      'JetStream accepted the job message': { event: e.published, context: {} },
    },
    PUBLISH_FAILED: {
      'attempts left': { event: e.publishFailed, context: { publishAttempts: last - 1 } },
      'the last allowed attempt': { event: e.publishFailed, context: { publishAttempts: last } },
    },
    DELIVERY_EXHAUSTED: {
      'max deliveries reached': { event: e.deliveryExhausted, context: {} },
    },
    ENVELOPE_PROCESSING: {
      'ack (status processing)': { event: e.ack, context: {} },
      "ack from a service other than the job's target_service": { event: e.otherServiceAck, context: {} },
    },
    ENVELOPE_RESULT: {
      'result done': { event: e.done, context: {} },
      'result needs_check': { event: e.needsCheck, context: {} },
      'result error': { event: e.error, context: {} },
      'the result already applied (same msg id)': { event: e.done, context: { resultMsgId: DONE_MSG_ID } },
      "result from a service other than the job's target_service": {
        event: e.otherServiceError,
        context: {},
      },
    },
    DEADLINE_PASSED: {
      'reply_deadline passed': { event: e.deadlinePassed, context: {} },
      'reply_deadline not yet passed': { event: e.deadlineNotPassed, context: {} },
    },
    RETRY_REQUESTED: {
      "retry, the file still this job's": { event: e.retryRequested, context: {} },
      'retry, the file has a newer job': { event: e.retryRequested, context: { fileIsCurrent: false } },
    },
  } satisfies { [T in JobEventType]: Record<string, VariantSample<T>> };
}

type VariantsByType = ReturnType<typeof eventVariantsByType>;

/** `TYPE: plain words`, e.g. `PUBLISH_FAILED: attempts left`. */
export type EventVariantName = {
  [T in JobEventType]: `${T}: ${keyof VariantsByType[T] & string}`;
}[JobEventType];

/** One variant of one event type. */
export interface EventVariant {
  name: EventVariantName;
  type: JobEventType;
  /** The plain words of the name, unique within its event type. */
  label: string;
  event: JobEvent;
  context: Partial<JobContext>;
}

/** Every event variant, event types in `JOB_EVENT_TYPES` order. */
export function eventVariants(now: Date = NOW): EventVariant[] {
  const byType = eventVariantsByType(now);
  return JOB_EVENT_TYPES.flatMap((type) =>
    Object.entries(byType[type]).map(([label, v]: [string, VariantSample<typeof type>]): EventVariant => ({
      name: `${type}: ${label}` as EventVariantName,
      type,
      label,
      event: v.event,
      context: v.context,
    })),
  );
}

/** The names of every event variant, in `eventVariants` order. */
export const EVENT_VARIANT_NAMES: readonly EventVariantName[] = eventVariants().map((v) => v.name);

/** The variant named `name`. */
export function eventVariant(name: EventVariantName, now: Date = NOW): EventVariant {
  const variant = eventVariants(now).find((v) => v.name === name);
  if (!variant) throw new Error(`no event variant named ${name}`);
  return variant;
}

/** The distinct events of the variants, in their order: the alphabet of the model-based paths. */
export function sampleEvents(now: Date = NOW): JobEvent[] {
  return [...new Set(eventVariants(now).map((v) => v.event))];
}

/**
 * Per event type, every variant the guards and actions tell apart: the service against
 * `target_service` (isFromAnotherService), the reported status (reportsDone, reportsNeedsCheck,
 * reportsError), and what the actions branch on (a result object or not, an error or not, an ack
 * msg id or none, a retry's service or the job's). The result's msg id is `DONE_MSG_ID`, so the
 * context's `resultMsgId` makes it the same message or another.
 */
export function guardEventsOfType(type: JobEventType, now: Date = NOW): JobEvent[] {
  const e = sampleEventsByKind(now);
  const services = [{ ...SERVICE }, { ...OTHER_SERVICE }];
  switch (type) {
    case 'PUBLISHED':
      return [e.published];
    case 'PUBLISH_FAILED':
      return [e.publishFailed];
    case 'DELIVERY_EXHAUSTED':
      return [e.deliveryExhausted];
    case 'ENVELOPE_PROCESSING':
      return services.flatMap((service) => [
        { ...e.ack, service },
        { ...e.ack, service, msgId: null },
      ]);
    case 'ENVELOPE_RESULT':
      return services.flatMap((service) =>
        RESULT_STATUSES.flatMap((status) =>
          [true, false].flatMap((withS3) =>
            [true, false].map((withError): JobEvent => ({
              type: 'ENVELOPE_RESULT',
              now,
              msgId: DONE_MSG_ID,
              status,
              service,
              ...(withS3 ? { resultS3: { bucket: 'results', key: 'r.json' } } : {}),
              ...(withError ? { error: { code: 'E_PARSE', message: 'broken' } } : {}),
              metrics: { pages: 1 },
              resultSchemaVersion: '2.1',
            })),
          ),
        ),
      );
    case 'DEADLINE_PASSED':
      return [{ type: 'DEADLINE_PASSED', now }];
    case 'RETRY_REQUESTED':
      return [e.retryRequested, { ...e.retryRequested, targetService: OTHER_SERVICE.name }];
  }
}
