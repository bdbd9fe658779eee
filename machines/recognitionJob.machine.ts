/**
 * The lifecycle of one recognition job, as an XState v5 machine: the single source of truth for the
 * daemon, the database's legal-edge table and the statecharts. Pure: time enters as `event.now`,
 * and effects are named actions returned as data, which the shell (`src/step/`) turns into SQL in
 * the same transaction. An event is *applied* (`recordTransition`) or makes *no change*
 * (`noteNoChange`, with why); an envelope of another service is *rejected* first, in every state.
 * No `after` delays: the watchdog turns `reply_deadline` into `DEADLINE_PASSED` (docs/lifecycle.md).
 */
import { assign, enqueueActions, setup } from 'xstate';
import { CORE_ERROR_CODE, FILE_STATUS, type FileStatus } from './statuses.js';
import type {
  JobContext,
  JobEffects,
  JobEvent,
  NoChangeReason,
  PublishRetryPolicy,
} from './recognitionJob.types.js';

/** Delay before publish attempt `attempt + 1`, after `attempt` failures: exponential, capped. */
export function publishBackoffMs(failedAttempts: number, policy: PublishRetryPolicy): number {
  const exp = policy.baseDelayMs * 2 ** Math.max(0, failedAttempts - 1);
  return Math.min(exp, policy.maxDelayMs);
}

function addMs(at: Date, ms: number): Date {
  return new Date(at.getTime() + ms);
}

/**
 * An effect object for `enqueue`. xstate cannot type a reference to an action named in the same
 * `setup()` call from inside another one, so the cast lives here, once, behind a typed signature.
 */
function effect<K extends keyof JobEffects>(type: K, params: JobEffects[K]): never {
  return { type, params } as never;
}

function noChange(decision: JobEffects['noteNoChange']['decision'], reason: NoChangeReason) {
  return { type: 'noteNoChange' as const, params: { decision, reason } };
}

/** The effects of every applied transition: the log entry and, if still this job's, the file. */
function record(file: FileStatus | null = null) {
  return { type: 'recordAndSetFile' as const, params: { file } };
}

/** What the transition log keeps of an event, beyond its type and msg id. */
function transitionDetail(event: JobEvent, context: JobContext): Record<string, unknown> {
  switch (event.type) {
    case 'RETRY_REQUESTED':
      return {
        next_job_id: event.newJobId,
        next_attempt: context.attempt + 1,
        target_service: event.targetService ?? context.targetService,
      };
    case 'ENVELOPE_RESULT':
      return {
        status: event.status,
        service: event.service.name,
        ...(event.error ? { error_code: event.error.code } : {}),
      };
    case 'ENVELOPE_PROCESSING':
      return { service: event.service.name };
    case 'PUBLISH_FAILED':
      return { error: event.error };
    case 'DELIVERY_EXHAUSTED':
      return { deliveries: event.deliveries };
    default:
      return {};
  }
}

/**
 * The first candidate of every ack and result, in every state, final ones included: an envelope
 * whose `service.name` is not the job's `target_service` is not the answer of the service the job
 * was published to. It changes nothing, whatever the job's status, and the shell quarantines it.
 * NATS permissions decide who may publish on `recognition.result`, not what `service.name` a
 * payload carries; this guard is what binds an answer to its job's service.
 */
const fromAnotherService = {
  guard: 'isFromAnotherService',
  actions: noChange('rejected', 'service_mismatch'),
  description: "service.name is not the job's target_service: rejected (quarantined), nothing changes",
} as const;

/** A result envelope, from any non-final state: service check, duplicate check, then by reported status. */
const resultTransitions = [
  fromAnotherService,
  {
    guard: 'isSameResultMessage',
    actions: noChange('duplicate', 'same_msg_id'),
    description: 'the same result message again',
  },
  {
    guard: 'reportsDone',
    target: '#recognitionJob.done',
    actions: ['applyResult', 'registerResultObjectIfAny', record(FILE_STATUS.PROCESSING)],
    description:
      "the service reports done: register the result object; file PROCESSING (if still this job's)",
  },
  {
    guard: 'reportsNeedsCheck',
    target: '#recognitionJob.needs_check',
    actions: ['applyResult', 'registerResultObjectIfAny', record(FILE_STATUS.PROCESSING)],
    description:
      "the service reports needs_check: register the result object; file PROCESSING (if still this job's)",
  },
  {
    guard: 'reportsError',
    target: '#recognitionJob.error',
    actions: ['applyResult', record(FILE_STATUS.ERROR)],
    description:
      "the service reports an error: file ERROR with the service's error code (if still this job's)",
  },
] as const;

/** Events a final state answers: nothing changes, but each is told apart for logs and counters. */
const finalStateHandlers = {
  ENVELOPE_RESULT: [
    fromAnotherService,
    {
      guard: 'isSameResultMessage',
      actions: noChange('duplicate', 'same_msg_id'),
      description: 'the applied result again',
    },
    {
      actions: noChange('late', 'result_after_final'),
      description: 'a result after a final status: logged at warn, not applied',
    },
  ],
  ENVELOPE_PROCESSING: [
    fromAnotherService,
    {
      actions: noChange('ignored', 'ack_not_accepted'),
      description: 'an ack after a final status',
    },
  ],
} as const;

/**
 * The action that returns `createAttempt`: the statecharts find the transitions that start the
 * next attempt by it (and draw where that attempt starts).
 */
export const NEXT_ATTEMPT_ACTION = 'createNextAttempt';

/**
 * A failed job's answer to a retry: while its file is still its own, the next attempt (a new job,
 * `attempt + 1`, starting in `pending`) and the file moved to it; this job keeps its status.
 */
const retryTransitions = [
  {
    guard: 'fileIsCurrent',
    actions: [NEXT_ATTEMPT_ACTION, 'applyRetried', record()],
    description:
      'retry: a new job, attempt + 1, starts in pending and the file (QUEUED) points at it; this job keeps its status',
  },
  {
    actions: noChange('ignored', 'file_not_current'),
    description: 'the file already has a newer job: not retried',
  },
] as const;

/** A final state; a failed one (`error`, `timeout`, `dlq`) also takes a retry. */
function finalState(description: string, { failed }: { failed: boolean }) {
  return {
    tags: ['final'],
    description,
    on: failed ? { ...finalStateHandlers, RETRY_REQUESTED: [...retryTransitions] } : finalStateHandlers,
  };
}

const deadlineTransitions = [
  {
    guard: 'deadlinePassed',
    target: '#recognitionJob.timeout',
    actions: ['applyTimeout', record(FILE_STATUS.ERROR)],
    description: 'reply_deadline passed: file ERROR with TIMEOUT',
  },
  { actions: noChange('ignored', 'deadline_not_passed'), description: 'reply_deadline not yet passed' },
] as const;

/**
 * The context its guards and actions read: a decision depends on these and on the event only, so
 * the step hydrates the machine from their columns alone and writes back only what the machine
 * assigns. A guard or action that reads another key must add it here; the equivalence test
 * (`test/unit/compileMachine.test.ts`) fails until it does.
 */
export const CONTEXT_THE_MACHINE_READS = [
  'jobId',
  'fileId',
  'attempt',
  'targetService',
  'fileIsCurrent',
  'publishAttempts',
  'replyDeadline',
  'resultMsgId',
] as const satisfies ReadonlyArray<keyof JobContext>;

/** The machine. Hydrate with `recognitionJobMachine.resolveState({ value: status, context })`. */
export const recognitionJobMachine = setup({
  types: {
    context: {} as JobContext,
    events: {} as JobEvent,
    input: {} as JobContext,
  },
  guards: {
    fileIsCurrent: ({ context }) => context.fileIsCurrent,
    isFromAnotherService: ({ context, event }) =>
      (event.type === 'ENVELOPE_PROCESSING' || event.type === 'ENVELOPE_RESULT') &&
      event.service.name !== context.targetService,
    isSameResultMessage: ({ context, event }) =>
      event.type === 'ENVELOPE_RESULT' && context.resultMsgId !== null && context.resultMsgId === event.msgId,
    reportsDone: ({ event }) => event.type === 'ENVELOPE_RESULT' && event.status === 'done',
    reportsNeedsCheck: ({ event }) => event.type === 'ENVELOPE_RESULT' && event.status === 'needs_check',
    reportsError: ({ event }) => event.type === 'ENVELOPE_RESULT' && event.status === 'error',
    publishAttemptsExhausted: ({ context, event }) =>
      event.type === 'PUBLISH_FAILED' && context.publishAttempts + 1 >= event.policy.maxAttempts,
    deadlinePassed: ({ context, event }) =>
      context.replyDeadline !== null && context.replyDeadline.getTime() < event.now.getTime(),
  },
  actions: {
    // Context changes (pure assigns).
    applyPublished: assign(({ context, event }) =>
      event.type === 'PUBLISHED'
        ? {
            publishAttempts: context.publishAttempts + 1,
            publishedAt: event.now,
            replyDeadline: addMs(event.now, event.replyTimeoutMs),
            nextPublishAt: null,
          }
        : {},
    ),
    applyPublishRetry: assign(({ context, event }) => {
      if (event.type !== 'PUBLISH_FAILED') return {};
      const attempts = context.publishAttempts + 1;
      return {
        publishAttempts: attempts,
        nextPublishAt: addMs(event.now, publishBackoffMs(attempts, event.policy)),
      };
    }),
    applyPublishExhausted: assign(({ context, event }) => ({
      publishAttempts: context.publishAttempts + 1,
      nextPublishAt: null,
      errorCode: CORE_ERROR_CODE.PUBLISH_FAILED,
      errorMessage: event.type === 'PUBLISH_FAILED' ? event.error : null,
      finishedAt: event.now,
    })),
    applyDeliveryExhausted: assign(({ event }) => ({
      errorCode: CORE_ERROR_CODE.MAX_DELIVERIES,
      errorMessage: 'the job message reached its maximum deliveries without being taken',
      finishedAt: event.now,
    })),
    applyAck: assign(({ event }) =>
      event.type === 'ENVELOPE_PROCESSING'
        ? { startedAt: event.now, serviceName: event.service.name, serviceVersion: event.service.version }
        : {},
    ),
    applyResult: assign(({ event }) =>
      event.type === 'ENVELOPE_RESULT'
        ? {
            serviceName: event.service.name,
            serviceVersion: event.service.version,
            finishedAt: event.now,
            metrics: event.metrics ?? null,
            errorCode: event.error?.code ?? null,
            errorMessage: event.error?.message ?? null,
            resultSchemaVersion: event.resultSchemaVersion ?? null,
            resultMsgId: event.msgId,
            // A result can finish a job still `pending` (its publish commit was lost): no more publishing.
            nextPublishAt: null,
          }
        : {},
    ),
    // The file now points at the next attempt: later events of this batch see it so.
    applyRetried: assign({ fileIsCurrent: false }),
    applyTimeout: assign(({ event }) => ({
      errorCode: CORE_ERROR_CODE.TIMEOUT,
      errorMessage: 'no result before reply_deadline',
      finishedAt: event.now,
    })),
    // Effects, returned as data by transition() and executed by the shell, never here.
    registerResultObjectIfAny: enqueueActions(({ event, enqueue }) => {
      if (event.type === 'ENVELOPE_RESULT' && event.resultS3) {
        enqueue(
          effect('registerResultObject', {
            bucket: event.resultS3.bucket,
            key: event.resultS3.key,
            createdBy: event.service.name,
          }),
        );
      }
    }),
    [NEXT_ATTEMPT_ACTION]: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'RETRY_REQUESTED') return;
      enqueue(
        effect('createAttempt', {
          jobId: event.newJobId,
          fileId: context.fileId,
          attempt: context.attempt + 1,
          targetService: event.targetService ?? context.targetService,
          retryOf: context.jobId,
        }),
      );
    }),
    recordAndSetFile: enqueueActions(
      ({ context, event, enqueue, check }, params: { file: FileStatus | null }) => {
        if (params.file !== null && check('fileIsCurrent' as never)) {
          const errorCode = params.file === FILE_STATUS.ERROR ? context.errorCode : null;
          enqueue(effect('setFileStatus', { status: params.file, errorCode }));
        }
        enqueue(
          effect('recordTransition', {
            event: event.type,
            msgId: 'msgId' in event ? event.msgId : null,
            detail: transitionDetail(event, context),
          }),
        );
      },
    ),
    setFileStatus: (_, _params: JobEffects['setFileStatus']) => {},
    registerResultObject: (_, _params: JobEffects['registerResultObject']) => {},
    createAttempt: (_, _params: JobEffects['createAttempt']) => {},
    recordTransition: (_, _params: JobEffects['recordTransition']) => {},
    noteNoChange: (_, _params: JobEffects['noteNoChange']) => {},
  },
}).createMachine({
  id: 'recognitionJob',
  description: 'One attempt to recognise one stored file by an external recognition service.',
  context: ({ input }) => input,
  initial: 'pending',
  // Whatever a state does not handle changes nothing; it is still reported.
  on: {
    PUBLISHED: { actions: noChange('ignored', 'not_accepted'), description: 'not waiting to be published' },
    PUBLISH_FAILED: {
      actions: noChange('ignored', 'not_accepted'),
      description: 'not waiting to be published',
    },
    DELIVERY_EXHAUSTED: {
      actions: noChange('ignored', 'not_accepted'),
      description: 'not waiting for delivery',
    },
    DEADLINE_PASSED: { actions: noChange('ignored', 'not_accepted'), description: 'not waiting for a reply' },
    ENVELOPE_PROCESSING: [
      fromAnotherService,
      {
        actions: noChange('ignored', 'ack_not_accepted'),
        description: 'an ack the status does not take',
      },
    ],
    RETRY_REQUESTED: {
      actions: noChange('ignored', 'not_failed'),
      description: 'only a failed job (error, timeout, dlq) is retried',
    },
  },
  states: {
    pending: {
      description: 'Created; the publisher has not yet had JetStream accept the job message.',
      on: {
        PUBLISHED: {
          target: 'published',
          description: 'JetStream accepted the job message: reply_deadline = now + REPLY_TIMEOUT_MS',
          actions: ['applyPublished', record()],
        },
        PUBLISH_FAILED: [
          {
            guard: 'publishAttemptsExhausted',
            target: 'dlq',
            description: "the last allowed attempt failed: dead letter, file ERROR (if still this job's)",
            actions: ['applyPublishExhausted', record(FILE_STATUS.ERROR)],
          },
          {
            description: 'attempts left: retry after an exponential backoff',
            actions: ['applyPublishRetry', record()],
          },
        ],
        ENVELOPE_RESULT: [...resultTransitions],
      },
    },
    published: {
      description: 'The job message is in the stream; waiting for the service to ack it.',
      on: {
        ENVELOPE_PROCESSING: [
          fromAnotherService,
          {
            target: 'processing',
            description:
              "the service acked: started_at, service name and version; file PROCESSING (if still this job's)",
            actions: ['applyAck', record(FILE_STATUS.PROCESSING)],
          },
        ],
        ENVELOPE_RESULT: [...resultTransitions],
        DELIVERY_EXHAUSTED: {
          target: 'dlq',
          description: 'no service took the job message (JetStream max deliveries): dead letter, file ERROR',
          actions: ['applyDeliveryExhausted', record(FILE_STATUS.ERROR)],
        },
        DEADLINE_PASSED: [...deadlineTransitions],
      },
    },
    processing: {
      description: 'The service acked the job and is working on it.',
      on: {
        ENVELOPE_PROCESSING: [
          fromAnotherService,
          {
            actions: noChange('duplicate', 'repeated_ack'),
            description: 'a repeated ack',
          },
        ],
        ENVELOPE_RESULT: [...resultTransitions],
        DEADLINE_PASSED: [...deadlineTransitions],
      },
    },
    done: finalState('Recognised; the mapping loop reads the result. The file stays PROCESSING.', {
      failed: false,
    }),
    needs_check: finalState(
      'Recognised with doubts; the mapping loop reads the result. The file stays PROCESSING.',
      { failed: false },
    ),
    error: finalState('The service could not recognise the file. The file is ERROR until a retry.', {
      failed: true,
    }),
    timeout: finalState('No result before reply_deadline. The file is ERROR (TIMEOUT) until a retry.', {
      failed: true,
    }),
    dlq: finalState('The job message could not be delivered. The file is ERROR until a retry.', {
      failed: true,
    }),
  },
});

export type RecognitionJobMachine = typeof recognitionJobMachine;
