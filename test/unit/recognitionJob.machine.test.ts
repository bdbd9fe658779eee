/**
 * The lifecycle of a recognition job, as a table: what every event does in every state (docs/lifecycle.md).
 *
 * Each row names a state and an event variant and states the whole outcome: the decision, the next
 * status, the context fields the transition writes (the next context must equal the state's sample
 * context plus exactly these), the effects in order, and the reason when nothing changed. The
 * sample contexts and events are in workshop/machineSamples.ts.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  CORE_ERROR_CODE,
  FINAL_JOB_STATUSES,
  JOB_EVENT_TYPES,
  JOB_STATUSES,
  decide,
  decisionPath,
  hydrate,
  publishBackoffMs,
  recognitionJobMachine,
  type JobContext,
  type JobDecision,
  type JobEffect,
  type JobEffects,
  type JobEvent,
  type JobStatus,
  type NoChangeReason,
} from '../../machines/index.js';
import {
  ACK_MSG_ID,
  DONE_MSG_ID,
  ERROR_MSG_ID,
  EVENT_VARIANT_NAMES,
  FILE_ID,
  JOB_ID,
  NEEDS_CHECK_MSG_ID,
  NEXT_JOB_ID,
  NOW,
  OTHER_SERVICE,
  PUBLISH_ERROR,
  PUBLISH_RETRY_POLICY,
  REPLY_TIMEOUT_MS,
  RESULT_S3,
  SERVICE,
  SERVICE_ERROR,
  baseContext,
  contextIn,
  eventVariant,
  eventVariants,
  sampleEventsByKind,
  type EventVariantName,
} from '../../workshop/machineSamples.js';

// ---------------------------------------------------------------------------------------------
// The vocabulary of expectations
// ---------------------------------------------------------------------------------------------

interface Expected {
  decision: JobDecision['decision'];
  /** The next status; `undefined` means the job stays where it was. */
  to: JobStatus | undefined;
  /** The context fields the transition writes. */
  changes: Partial<JobContext>;
  effects: JobEffect[];
  reason: NoChangeReason | null;
}

/** The event is applied: the job moves to `to`, writes `changes` and returns `effects`. */
const applied = (to: JobStatus, changes: Partial<JobContext>, effects: JobEffect[]): Expected => ({
  decision: 'applied',
  to,
  changes,
  effects,
  reason: null,
});

/** The event changes nothing; the machine says why, so the shell can log and count it. */
const stays = (decision: JobEffects['noteNoChange']['decision'], reason: NoChangeReason): Expected => ({
  decision,
  to: undefined,
  changes: {},
  effects: [{ type: 'noteNoChange', params: { decision, reason } }],
  reason,
});

const fileStatus = (status: 'PROCESSING' | 'ERROR', errorCode: string | null = null): JobEffect => ({
  type: 'setFileStatus',
  params: { status, errorCode },
});
const logged = (
  event: JobEvent['type'],
  msgId: string | null,
  detail: Record<string, unknown> = {},
): JobEffect => ({ type: 'recordTransition', params: { event, msgId, detail } });
const resultObject: JobEffect = {
  type: 'registerResultObject',
  params: { bucket: RESULT_S3.bucket, key: RESULT_S3.key, createdBy: SERVICE.name },
};

const DEADLINE_PASSED_AT = eventVariant('DEADLINE_PASSED: reply_deadline passed').event.now;

// The three results, from any state that accepts them (pending, published, processing).
const done = applied(
  'done',
  {
    serviceName: SERVICE.name,
    serviceVersion: SERVICE.version,
    finishedAt: NOW,
    metrics: { pages: 12, rows: 480 },
    errorCode: null,
    errorMessage: null,
    resultSchemaVersion: '2.1',
    resultMsgId: DONE_MSG_ID,
    nextPublishAt: null,
  },
  [
    resultObject,
    fileStatus('PROCESSING'),
    logged('ENVELOPE_RESULT', DONE_MSG_ID, { status: 'done', service: SERVICE.name }),
  ],
);
const needsCheck = applied(
  'needs_check',
  {
    serviceName: SERVICE.name,
    serviceVersion: SERVICE.version,
    finishedAt: NOW,
    metrics: { pages: 12, low_confidence_cells: 7 },
    errorCode: null,
    errorMessage: null,
    resultSchemaVersion: '2.1',
    resultMsgId: NEEDS_CHECK_MSG_ID,
    nextPublishAt: null,
  },
  [
    resultObject,
    fileStatus('PROCESSING'),
    logged('ENVELOPE_RESULT', NEEDS_CHECK_MSG_ID, { status: 'needs_check', service: SERVICE.name }),
  ],
);
const serviceError = applied(
  'error',
  {
    serviceName: SERVICE.name,
    serviceVersion: SERVICE.version,
    finishedAt: NOW,
    metrics: null,
    errorCode: SERVICE_ERROR.code,
    errorMessage: SERVICE_ERROR.message,
    resultSchemaVersion: null,
    resultMsgId: ERROR_MSG_ID,
    nextPublishAt: null,
  },
  [
    fileStatus('ERROR', SERVICE_ERROR.code),
    logged('ENVELOPE_RESULT', ERROR_MSG_ID, {
      status: 'error',
      service: SERVICE.name,
      error_code: SERVICE_ERROR.code,
    }),
  ],
);
const timedOut = applied(
  'timeout',
  {
    errorCode: CORE_ERROR_CODE.TIMEOUT,
    errorMessage: 'no result before reply_deadline',
    finishedAt: DEADLINE_PASSED_AT,
  },
  [fileStatus('ERROR', CORE_ERROR_CODE.TIMEOUT), logged('DEADLINE_PASSED', null)],
);

// ---------------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------------

/**
 * A row: the expected outcome, and, when it differs from "the same without the file's effects",
 * the outcome for a job that is not its file's current job.
 */
type Row = [state: JobStatus, variant: EventVariantName, expected: Expected, notCurrent?: Expected];

/** A failed job's retry: the next attempt for its file; the job itself keeps status and columns. */
const retried = applied(
  'error', // replaced by the row's own status
  { fileIsCurrent: false },
  [
    {
      type: 'createAttempt',
      params: {
        jobId: NEXT_JOB_ID,
        fileId: FILE_ID,
        attempt: 2,
        targetService: SERVICE.name,
        retryOf: JOB_ID,
      },
    },
    logged('RETRY_REQUESTED', null, {
      next_job_id: NEXT_JOB_ID,
      next_attempt: 2,
      target_service: SERVICE.name,
    }),
  ],
);

/**
 * The retry rows of a status: a failed one starts the next attempt while the file is its own; once
 * the file has a newer job (the variant's own context), nothing changes.
 */
const retryRows = (state: JobStatus): Row[] =>
  (['error', 'timeout', 'dlq'] as JobStatus[]).includes(state)
    ? [
        [
          state,
          "RETRY_REQUESTED: retry, the file still this job's",
          { ...retried, to: state },
          stays('ignored', 'file_not_current'),
        ],
        [state, 'RETRY_REQUESTED: retry, the file has a newer job', stays('ignored', 'file_not_current')],
      ]
    : [
        [state, "RETRY_REQUESTED: retry, the file still this job's", stays('ignored', 'not_failed')],
        [state, 'RETRY_REQUESTED: retry, the file has a newer job', stays('ignored', 'not_failed')],
      ];

/**
 * An ack or a result from a service other than the job's `target_service` is rejected in every
 * state, final ones included: checked before anything else, it changes nothing (the inbox
 * quarantines it).
 */
const fromAnotherServiceRows = (state: JobStatus): Row[] => [
  [
    state,
    "ENVELOPE_PROCESSING: ack from a service other than the job's target_service",
    stays('rejected', 'service_mismatch'),
  ],
  [
    state,
    "ENVELOPE_RESULT: result from a service other than the job's target_service",
    stays('rejected', 'service_mismatch'),
  ],
];

/** Every final status answers every event alike: nothing changes, each case told apart (but a retry). */
const finalRows = (state: JobStatus): Row[] => [
  [state, 'PUBLISHED: JetStream accepted the job message', stays('ignored', 'not_accepted')],
  [state, 'PUBLISH_FAILED: attempts left', stays('ignored', 'not_accepted')],
  [state, 'PUBLISH_FAILED: the last allowed attempt', stays('ignored', 'not_accepted')],
  [state, 'DELIVERY_EXHAUSTED: max deliveries reached', stays('ignored', 'not_accepted')],
  [state, 'ENVELOPE_PROCESSING: ack (status processing)', stays('ignored', 'ack_not_accepted')],
  [state, 'ENVELOPE_RESULT: result done', stays('late', 'result_after_final')],
  [state, 'ENVELOPE_RESULT: result needs_check', stays('late', 'result_after_final')],
  [state, 'ENVELOPE_RESULT: result error', stays('late', 'result_after_final')],
  [state, 'ENVELOPE_RESULT: the result already applied (same msg id)', stays('duplicate', 'same_msg_id')],
  ...fromAnotherServiceRows(state),
  [state, 'DEADLINE_PASSED: reply_deadline passed', stays('ignored', 'not_accepted')],
  [state, 'DEADLINE_PASSED: reply_deadline not yet passed', stays('ignored', 'not_accepted')],
  ...retryRows(state),
];

const TABLE: Row[] = [
  // pending: created, the job message not yet accepted by JetStream.
  [
    'pending',
    'PUBLISHED: JetStream accepted the job message',
    applied(
      'published',
      {
        publishAttempts: 1,
        publishedAt: NOW,
        replyDeadline: new Date(NOW.getTime() + REPLY_TIMEOUT_MS),
        nextPublishAt: null,
      },
      [logged('PUBLISHED', null)],
    ),
  ],
  [
    'pending',
    'PUBLISH_FAILED: attempts left', // the 2nd of 3 attempts failed: retry after 2 × base delay
    applied('pending', { publishAttempts: 2, nextPublishAt: new Date(NOW.getTime() + 2_000) }, [
      logged('PUBLISH_FAILED', null, { error: PUBLISH_ERROR }),
    ]),
  ],
  [
    'pending',
    'PUBLISH_FAILED: the last allowed attempt', // the 3rd of 3 attempts failed: dead letter
    applied(
      'dlq',
      {
        publishAttempts: 3,
        nextPublishAt: null,
        errorCode: CORE_ERROR_CODE.PUBLISH_FAILED,
        errorMessage: PUBLISH_ERROR,
        finishedAt: NOW,
      },
      [
        fileStatus('ERROR', CORE_ERROR_CODE.PUBLISH_FAILED),
        logged('PUBLISH_FAILED', null, { error: PUBLISH_ERROR }),
      ],
    ),
  ],
  ['pending', 'DELIVERY_EXHAUSTED: max deliveries reached', stays('ignored', 'not_accepted')],
  ['pending', 'ENVELOPE_PROCESSING: ack (status processing)', stays('ignored', 'ack_not_accepted')],
  // The job message went out but the publisher's commit was lost: the work was done, it counts.
  ['pending', 'ENVELOPE_RESULT: result done', done],
  ['pending', 'ENVELOPE_RESULT: result needs_check', needsCheck],
  ['pending', 'ENVELOPE_RESULT: result error', serviceError],
  ['pending', 'ENVELOPE_RESULT: the result already applied (same msg id)', stays('duplicate', 'same_msg_id')],
  ...fromAnotherServiceRows('pending'),
  ['pending', 'DEADLINE_PASSED: reply_deadline passed', stays('ignored', 'not_accepted')],
  ['pending', 'DEADLINE_PASSED: reply_deadline not yet passed', stays('ignored', 'not_accepted')],
  ...retryRows('pending'), // only a failed job is retried

  // published: in the stream, waiting for the service's ack.
  ['published', 'PUBLISHED: JetStream accepted the job message', stays('ignored', 'not_accepted')],
  ['published', 'PUBLISH_FAILED: attempts left', stays('ignored', 'not_accepted')],
  ['published', 'PUBLISH_FAILED: the last allowed attempt', stays('ignored', 'not_accepted')],
  [
    'published',
    'DELIVERY_EXHAUSTED: max deliveries reached',
    applied(
      'dlq',
      {
        errorCode: CORE_ERROR_CODE.MAX_DELIVERIES,
        errorMessage: 'the job message reached its maximum deliveries without being taken',
        finishedAt: NOW,
      },
      [
        fileStatus('ERROR', CORE_ERROR_CODE.MAX_DELIVERIES),
        logged('DELIVERY_EXHAUSTED', null, { deliveries: 5 }),
      ],
    ),
  ],
  [
    'published',
    'ENVELOPE_PROCESSING: ack (status processing)', // the service confirmed
    applied('processing', { startedAt: NOW, serviceName: SERVICE.name, serviceVersion: SERVICE.version }, [
      fileStatus('PROCESSING'),
      logged('ENVELOPE_PROCESSING', ACK_MSG_ID, { service: SERVICE.name }),
    ]),
  ],
  // The ack was lost or overtaken: the result is applied all the same.
  ['published', 'ENVELOPE_RESULT: result done', done],
  ['published', 'ENVELOPE_RESULT: result needs_check', needsCheck],
  ['published', 'ENVELOPE_RESULT: result error', serviceError],
  [
    'published',
    'ENVELOPE_RESULT: the result already applied (same msg id)',
    stays('duplicate', 'same_msg_id'),
  ],
  ...fromAnotherServiceRows('published'),
  ['published', 'DEADLINE_PASSED: reply_deadline passed', timedOut],
  ['published', 'DEADLINE_PASSED: reply_deadline not yet passed', stays('ignored', 'deadline_not_passed')],
  ...retryRows('published'),

  // processing: the service acked and is working.
  ['processing', 'PUBLISHED: JetStream accepted the job message', stays('ignored', 'not_accepted')],
  ['processing', 'PUBLISH_FAILED: attempts left', stays('ignored', 'not_accepted')],
  ['processing', 'PUBLISH_FAILED: the last allowed attempt', stays('ignored', 'not_accepted')],
  ['processing', 'DELIVERY_EXHAUSTED: max deliveries reached', stays('ignored', 'not_accepted')],
  ['processing', 'ENVELOPE_PROCESSING: ack (status processing)', stays('duplicate', 'repeated_ack')], // a repeated ack
  ['processing', 'ENVELOPE_RESULT: result done', done], // success
  ['processing', 'ENVELOPE_RESULT: result needs_check', needsCheck],
  ['processing', 'ENVELOPE_RESULT: result error', serviceError], // service error
  [
    'processing',
    'ENVELOPE_RESULT: the result already applied (same msg id)',
    stays('duplicate', 'same_msg_id'),
  ], // redelivery
  ...fromAnotherServiceRows('processing'),
  ['processing', 'DEADLINE_PASSED: reply_deadline passed', timedOut], // taken but never answered
  ['processing', 'DEADLINE_PASSED: reply_deadline not yet passed', stays('ignored', 'deadline_not_passed')],
  ...retryRows('processing'),

  // Final statuses are never left (docs/lifecycle.md); a result after one is logged, not applied; a
  // failed one may start the next attempt, a new job, and keeps its own status.
  ...FINAL_JOB_STATUSES.flatMap(finalRows),
];

/**
 * Runs one row: the state's sample context, with the case's overrides and then the variant's (a
 * variant that presumes a file with a newer job keeps it in both `fileIsCurrent` cases).
 */
function run(state: JobStatus, variantName: EventVariantName, overrides: Partial<JobContext> = {}) {
  const variant = eventVariant(variantName);
  const context = contextIn(state, { ...overrides, ...variant.context });
  return { context, event: variant.event, result: decide({ status: state, context }, variant.event) };
}

const withoutFileEffects = (effects: JobEffect[]) => effects.filter((e) => e.type !== 'setFileStatus');

describe('recognition job lifecycle, every (state × event)', () => {
  // The table runs through the compiled decision table (compileMachine.test.ts holds it equal to xstate's).
  it('is decided through the compiled table', () => {
    expect(decisionPath()).toEqual({ path: 'compiled' });
  });

  // A job that is no longer its file's current job does everything the same, but never touches the file.
  describe.each([true, false])('fileIsCurrent = %s', (fileIsCurrent) => {
    it.each(TABLE)('%s × %s', (state, variantName, asCurrent, notCurrent) => {
      const { context, result } = run(state, variantName, { fileIsCurrent });
      const expected = !fileIsCurrent && notCurrent ? notCurrent : asCurrent;

      expect(result.decision).toBe(expected.decision);
      expect(result.from).toBe(state);
      expect(result.to).toBe(expected.to ?? state);
      expect(result.context).toEqual({ ...context, ...expected.changes });
      expect(result.effects).toEqual(fileIsCurrent ? expected.effects : withoutFileEffects(expected.effects));
      expect(result.reason).toBe(expected.reason);
    });
  });

  it('covers every state with every event variant, and every event type', () => {
    const pairs = TABLE.map(([state, variant]) => `${state} × ${variant}`);
    expect(new Set(pairs).size).toBe(pairs.length);
    expect(pairs.sort()).toEqual(
      JOB_STATUSES.flatMap((state) => EVENT_VARIANT_NAMES.map((variant) => `${state} × ${variant}`)).sort(),
    );
    expect(new Set(eventVariants().map((v) => v.event.type))).toEqual(new Set(JOB_EVENT_TYPES));
  });

  it('registers a result object only for a result that names one, and applies it alike without', () => {
    let applied = 0;
    for (const [state, variantName, expected] of TABLE) {
      const { context, event } = run(state, variantName);
      if (event.type !== 'ENVELOPE_RESULT' || !event.resultS3 || expected.decision !== 'applied') continue;
      applied++;
      const result = decide({ status: state, context }, { ...event, resultS3: undefined });
      expect(result.to).toBe(expected.to);
      expect(result.context).toEqual({ ...context, ...expected.changes });
      expect(result.effects).toEqual(expected.effects.filter((e) => e.type !== 'registerResultObject'));
    }
    expect(applied).toBeGreaterThan(0);
  });
});

describe("the service check: only the job's target_service answers it", () => {
  const envelopes = (service: { name: string; version: string }) => {
    const e = sampleEventsByKind();
    return [
      { ...e.ack, service },
      { ...e.done, service },
      { ...e.needsCheck, service },
      { ...e.error, service },
    ] satisfies JobEvent[];
  };
  const cases = JOB_STATUSES.flatMap((status) =>
    [true, false].map((matching) => [status, matching] as const),
  );

  it.each(cases)('in %s, service matching target_service = %s', (status, matching) => {
    const context = contextIn(status);
    const service = matching ? { ...SERVICE } : { ...OTHER_SERVICE };
    for (const event of envelopes(service)) {
      const result = decide({ status, context }, event);
      if (matching) {
        expect(result.decision).not.toBe('rejected');
        continue;
      }
      expect(result).toEqual({
        decision: 'rejected',
        from: status,
        to: status,
        context,
        effects: [{ type: 'noteNoChange', params: { decision: 'rejected', reason: 'service_mismatch' } }],
        reason: 'service_mismatch',
      });
    }
  });

  it('is checked first: a result from another service carrying the applied msg id is rejected, not a duplicate', () => {
    for (const status of FINAL_JOB_STATUSES) {
      const context = contextIn(status, { resultMsgId: DONE_MSG_ID });
      const event = { ...sampleEventsByKind().done, service: { ...OTHER_SERVICE } };
      expect(decide({ status, context }, event).decision).toBe('rejected');
      expect(decide({ status, context }, { ...event, service: { ...SERVICE } }).decision).toBe('duplicate');
    }
  });

  it('compares the name exactly: case, spaces and the version do not make another service the target', () => {
    const context = contextIn('published');
    const ack = sampleEventsByKind().ack;
    for (const name of ['Tabular-Parser', 'tabular-parser ', ' tabular-parser', 'tabular_parser', ''])
      expect(
        decide({ status: 'published', context }, { ...ack, service: { name, version: '1' } }).decision,
      ).toBe('rejected');
    expect(
      decide({ status: 'published', context }, { ...ack, service: { name: SERVICE.name, version: 'any' } })
        .decision,
    ).toBe('applied');
  });

  it("follows the job's own target_service, not a fixed name", () => {
    const context = contextIn('published', { targetService: OTHER_SERVICE.name });
    const ack = sampleEventsByKind().ack;
    expect(decide({ status: 'published', context }, ack).decision).toBe('rejected');
    expect(decide({ status: 'published', context }, { ...ack, service: { ...OTHER_SERVICE } }).decision).toBe(
      'applied',
    );
  });
});

describe('publish backoff', () => {
  const policy = { maxAttempts: 20, baseDelayMs: 1_000, maxDelayMs: 60_000 };

  it('doubles with every failed attempt and stops at the cap', () => {
    const delays = Array.from({ length: 10 }, (_, i) => publishBackoffMs(i + 1, policy));
    expect(delays).toEqual([1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000, 60_000]);
  });

  it('is never above the cap and never shrinks as failures accumulate', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 200 }),
        fc.integer({ min: 1, max: 10_000 }),
        fc.integer({ min: 0, max: 1_000_000 }),
        (failed, baseDelayMs, extra) => {
          const p = { maxAttempts: 1_000, baseDelayMs, maxDelayMs: baseDelayMs + extra };
          const delay = publishBackoffMs(failed, p);
          expect(delay).toBeGreaterThanOrEqual(baseDelayMs);
          expect(delay).toBeLessThanOrEqual(p.maxDelayMs);
          expect(publishBackoffMs(failed + 1, p)).toBeGreaterThanOrEqual(delay);
        },
      ),
    );
  });

  it('schedules the next publish attempt at now + the backoff of the failures so far', () => {
    let job = { status: 'pending' as JobStatus, context: baseContext() };
    const event = { type: 'PUBLISH_FAILED', now: NOW, error: PUBLISH_ERROR, policy } as const;
    const scheduled: number[] = [];
    for (let i = 0; i < 9; i++) {
      const result = decide(job, event);
      expect(result.to).toBe('pending');
      scheduled.push(result.context.nextPublishAt!.getTime() - NOW.getTime());
      job = { status: result.to, context: result.context };
    }
    expect(scheduled).toEqual([1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000]);
    expect(job.context.publishAttempts).toBe(9);
  });

  it('sends the job to dlq exactly when the failed attempt is the last allowed one', () => {
    let job = { status: 'pending' as JobStatus, context: baseContext() };
    const event = eventVariant('PUBLISH_FAILED: attempts left').event;
    const statuses: JobStatus[] = [];
    for (let i = 0; i < PUBLISH_RETRY_POLICY.maxAttempts; i++) {
      const result = decide(job, event);
      statuses.push(result.to);
      job = { status: result.to, context: result.context };
    }
    expect(statuses).toEqual(['pending', 'pending', 'dlq']);
  });
});

describe('hydrate', () => {
  it.each(JOB_STATUSES)('accepts %s and keeps the context as given', (status) => {
    const context = contextIn(status);
    const snapshot = hydrate({ status, context });
    expect(snapshot.value).toBe(status);
    expect(snapshot.context).toEqual(context);
  });

  it.each(JOB_STATUSES)("in %s is exactly what the machine's resolveState makes", (status) => {
    const context = contextIn(status);
    const snapshot = hydrate({ status, context });
    const resolved = recognitionJobMachine.resolveState({ value: status, context });
    expect(snapshot).toEqual(resolved);
    expect(snapshot.status).toBe(resolved.status);
    expect(snapshot.context).toBe(context);
  });

  it('throws for a status the machine does not know', () => {
    expect(() => hydrate({ status: 'cancelled' as JobStatus, context: baseContext() })).toThrow(
      /unknown recognition_job status: cancelled/,
    );
  });

  it('round-trips: what decide returns is what hydrate accepts again, unchanged', () => {
    for (const fileIsCurrent of [true, false]) {
      for (const [state, variantName] of TABLE) {
        const { result } = run(state, variantName, { fileIsCurrent });
        const snapshot = hydrate({ status: result.to, context: result.context });
        expect(snapshot.value).toBe(result.to);
        expect(snapshot.context).toEqual(result.context);
      }
    }
  });

  it('round-trips an applied result: delivered again, it is a duplicate and changes nothing', () => {
    for (const [state, variantName, expected] of TABLE) {
      if (expected.decision !== 'applied' || !variantName.startsWith('ENVELOPE_RESULT')) continue;
      const { event, result } = run(state, variantName);
      const again = decide({ status: result.to, context: result.context }, event);
      expect(again).toEqual({
        decision: 'duplicate',
        from: result.to,
        to: result.to,
        context: result.context,
        effects: [{ type: 'noteNoChange', params: { decision: 'duplicate', reason: 'same_msg_id' } }],
        reason: 'same_msg_id',
      });
    }
  });
});

describe('final statuses', () => {
  const arbitraryEvent: fc.Arbitrary<JobEvent> = (() => {
    const now = fc.date({ min: new Date('2020-01-01Z'), max: new Date('2030-01-01Z'), noInvalidDate: true });
    const service = fc.record({ name: fc.constantFrom('tabular-parser', 'ocr'), version: fc.string() });
    const msgId = fc.oneof(fc.string(), fc.constantFrom(DONE_MSG_ID, ERROR_MSG_ID, NEEDS_CHECK_MSG_ID));
    return fc.oneof(
      fc.record({
        type: fc.constant('PUBLISHED' as const),
        now,
        replyTimeoutMs: fc.integer({ min: 1, max: 1e9 }),
      }),
      fc.record({
        type: fc.constant('PUBLISH_FAILED' as const),
        now,
        error: fc.string(),
        policy: fc.record({
          maxAttempts: fc.integer({ min: 1, max: 10 }),
          baseDelayMs: fc.integer({ min: 1, max: 1e6 }),
          maxDelayMs: fc.integer({ min: 1, max: 1e7 }),
        }),
      }),
      fc.record({ type: fc.constant('DELIVERY_EXHAUSTED' as const), now, deliveries: fc.nat() }),
      fc.record({ type: fc.constant('ENVELOPE_PROCESSING' as const), now, msgId: fc.option(msgId), service }),
      fc.record(
        {
          type: fc.constant('ENVELOPE_RESULT' as const),
          now,
          msgId,
          status: fc.constantFrom('done' as const, 'needs_check' as const, 'error' as const),
          service,
          resultS3: fc.record({ bucket: fc.string(), key: fc.string() }),
          error: fc.record({ code: fc.string(), message: fc.string() }),
        },
        { requiredKeys: ['type', 'now', 'msgId', 'status', 'service'] },
      ),
      fc.record({ type: fc.constant('DEADLINE_PASSED' as const), now }),
    );
  })();

  it('are never left, whatever the events, and nothing but a no-change note comes out', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...FINAL_JOB_STATUSES),
        fc.boolean(),
        fc.array(arbitraryEvent, { minLength: 1, maxLength: 8 }),
        (status, fileIsCurrent, events) => {
          const context = contextIn(status, { fileIsCurrent });
          let job = { status: status as JobStatus, context };
          for (const event of events) {
            const result = decide(job, event);
            expect(result.decision).not.toBe('applied');
            expect(result.to).toBe(status);
            expect(result.context).toEqual(context);
            expect(result.effects.map((e) => e.type)).toEqual(['noteNoChange']);
            job = { status: result.to, context: result.context };
          }
        },
      ),
    );
  });
});
