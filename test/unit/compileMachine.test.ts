/**
 * The compiled decision table (machines/compileMachine.ts) against xstate's `transition()`.
 *
 * - `decide()` takes the compiled path for the lifecycle machine, and gives exactly what
 *   `decideWithXstate()` gives: for every status × every event type × every combination of the
 *   inputs the guards read (and the inputs the actions branch on), then for random jobs and events.
 * - The compiler refuses a machine that uses anything the table does not cover, and says why; what
 *   only shows at run time makes `transition` hand the event to xstate.
 */
import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  and,
  assign,
  createActor,
  createMachine,
  enqueueActions,
  not,
  raise,
  setup,
  stateIn,
  transition,
  type AnyActorScope,
  type AnyStateMachine,
  type EventObject,
} from 'xstate';
import { compileMachine, refusal } from '../../machines/compileMachine.js';
import {
  CONTEXT_THE_MACHINE_READS,
  JOB_EVENT_TYPES,
  JOB_STATUSES,
  RESULT_STATUSES,
  decide,
  decideWithXstate,
  decisionPath,
  recognitionJobMachine,
  type JobContext,
  type JobDecision,
  type JobEvent,
  type JobState,
} from '../../machines/index.js';
import {
  DONE_MSG_ID,
  NOW,
  OTHER_SERVICE,
  PUBLISH_RETRY_POLICY,
  SERVICE,
  contextIn,
  guardEventsOfType,
  sampleEventsByKind,
} from '../../workshop/machineSamples.js';

/** Both paths on one job and event: their decisions, or the errors they throw. */
function bothPaths(job: JobState, event: JobEvent): [unknown, unknown] {
  const attempt = (f: (j: JobState, e: JobEvent) => JobDecision) => {
    try {
      return f(job, event);
    } catch (e) {
      return { threw: String(e) };
    }
  };
  return [attempt(decide), attempt(decideWithXstate)];
}

/** `context` with only the keys the machine declares it reads: what the step hydrates. */
function readContext(context: JobContext): JobContext {
  const read: Partial<Record<keyof JobContext, unknown>> = {};
  for (const key of CONTEXT_THE_MACHINE_READS) read[key] = context[key];
  return read as JobContext;
}

/**
 * Where the decision on the read context differs from the one on the whole context, or null: the
 * same decision, effects and target, and a context that has every key the machine assigned, with
 * the value it assigned (a key it lacks is one the machine left as it was).
 */
function readContextMismatch(job: JobState, event: JobEvent): string | null {
  const attempt = (context: JobContext) => {
    try {
      return decide({ status: job.status, context }, event);
    } catch (e) {
      return { threw: String(e) };
    }
  };
  const whole = attempt(job.context);
  const read = attempt(readContext(job.context));
  if (!('context' in whole) || !('context' in read)) return isDeepStrictEqual(whole, read) ? null : 'threw';
  const { context: wholeAfter, ...wholeDecision } = whole;
  const { context: readAfter, ...readDecision } = read;
  if (!isDeepStrictEqual(wholeDecision, readDecision)) return 'decision';
  for (const key of Object.keys(wholeAfter) as Array<keyof JobContext>) {
    const expected = readAfter[key] === undefined ? job.context[key] : readAfter[key];
    if (!isDeepStrictEqual(wholeAfter[key], expected)) return key;
  }
  return null;
}

describe('the lifecycle machine', () => {
  it('is decided through the compiled table', () => {
    expect(decisionPath()).toEqual({ path: 'compiled' });
  });
});

// ---------------------------------------------------------------------------------------------
// Exhaustive: every status × event type × guard input
// ---------------------------------------------------------------------------------------------

const MINUTE = 60_000;
const at = (ms: number) => new Date(NOW.getTime() + ms);
const LAST = PUBLISH_RETRY_POLICY.maxAttempts;

/**
 * What the guards read of the context, each with every value that tells cases apart:
 * `fileIsCurrent` (fileIsCurrent, and recordAndSetFile's check), `resultMsgId` against the result's
 * msg id (isSameResultMessage), `publishAttempts + 1` against the policy's `maxAttempts`
 * (publishAttemptsExhausted: below, equal, above), `replyDeadline` against `now` (deadlinePassed:
 * none, before, equal, after).
 */
const CONTEXT_INPUTS = {
  fileIsCurrent: [true, false],
  resultMsgId: [null, DONE_MSG_ID, 'result:someone-else'],
  publishAttempts: [LAST - 2, LAST - 1, LAST],
  replyDeadline: [null, at(-MINUTE), NOW, at(MINUTE)],
} as const;

/** Every combination of the context inputs, over the status's sample context. */
function contextsFor(status: (typeof JOB_STATUSES)[number]): JobContext[] {
  const contexts: JobContext[] = [];
  for (const fileIsCurrent of CONTEXT_INPUTS.fileIsCurrent)
    for (const resultMsgId of CONTEXT_INPUTS.resultMsgId)
      for (const publishAttempts of CONTEXT_INPUTS.publishAttempts)
        for (const replyDeadline of CONTEXT_INPUTS.replyDeadline)
          contexts.push(contextIn(status, { fileIsCurrent, resultMsgId, publishAttempts, replyDeadline }));
  return contexts;
}

describe('compiled and xstate decisions are equal', () => {
  it('for every status × event type × guard input', () => {
    const mismatches: string[] = [];
    const pairs = new Set<string>();
    const guardResults = new Map<string, Set<boolean>>();
    const guards = recognitionJobMachine.implementations.guards as Record<
      string,
      (args: { context: JobContext; event: JobEvent }) => boolean
    >;
    let cases = 0;
    for (const status of JOB_STATUSES) {
      for (const type of JOB_EVENT_TYPES) {
        for (const event of guardEventsOfType(type)) {
          for (const context of contextsFor(status)) {
            cases++;
            pairs.add(`${status} × ${type}`);
            for (const [name, guard] of Object.entries(guards)) {
              if (!guardResults.has(name)) guardResults.set(name, new Set());
              guardResults.get(name)!.add(guard({ context, event }));
            }
            const [compiled, xstate] = bothPaths({ status, context }, event);
            if (!isDeepStrictEqual(compiled, xstate) && mismatches.length < 5)
              mismatches.push(JSON.stringify({ status, context, event, compiled, xstate }));
            const unread = readContextMismatch({ status, context }, event);
            if (unread !== null && mismatches.length < 5)
              mismatches.push(JSON.stringify({ status, context, event, readContextDiffersIn: unread }));
          }
        }
      }
    }
    expect(mismatches).toEqual([]);
    // The grid is what it claims: every pair, and every guard both ways.
    expect(pairs.size).toBe(JOB_STATUSES.length * JOB_EVENT_TYPES.length);
    for (const [name, results] of guardResults)
      expect([name, [...results].sort()]).toEqual([name, [false, true]]);
    expect(cases).toBeGreaterThan(10_000);
  });

  it('for random jobs and events', () => {
    const date = fc.date({ min: at(-60 * MINUTE), max: at(60 * MINUTE), noInvalidDate: true });
    const serviceName = fc.constantFrom(SERVICE.name, OTHER_SERVICE.name);
    const msgId = fc.constantFrom('result:1', 'result:2', DONE_MSG_ID);
    const context = fc.record({
      jobId: fc.uuid(),
      fileId: fc.uuid(),
      attempt: fc.integer({ min: 1, max: 5 }),
      targetService: serviceName,
      fileIsCurrent: fc.boolean(),
      serviceName: fc.option(serviceName, { nil: null }),
      serviceVersion: fc.option(fc.string(), { nil: null }),
      publishAttempts: fc.integer({ min: 0, max: 6 }),
      nextPublishAt: fc.option(date, { nil: null }),
      publishedAt: fc.option(date, { nil: null }),
      replyDeadline: fc.option(date, { nil: null }),
      startedAt: fc.option(date, { nil: null }),
      finishedAt: fc.option(date, { nil: null }),
      metrics: fc.option(fc.dictionary(fc.string(), fc.integer(), { maxKeys: 2 }), { nil: null }),
      errorCode: fc.option(fc.string(), { nil: null }),
      errorMessage: fc.option(fc.string(), { nil: null }),
      resultSchemaVersion: fc.option(fc.string(), { nil: null }),
      resultS3ObjectId: fc.option(fc.string(), { nil: null }),
      resultMsgId: fc.option(msgId, { nil: null }),
    }) satisfies fc.Arbitrary<JobContext>;
    const service = fc.record({ name: serviceName, version: fc.string() });
    const event: fc.Arbitrary<JobEvent> = fc.oneof(
      fc.record({
        type: fc.constant('PUBLISHED' as const),
        now: date,
        replyTimeoutMs: fc.integer({ min: 1, max: 1e9 }),
      }),
      fc.record({
        type: fc.constant('PUBLISH_FAILED' as const),
        now: date,
        error: fc.string(),
        policy: fc.record({
          maxAttempts: fc.integer({ min: 1, max: 6 }),
          baseDelayMs: fc.integer({ min: 1, max: 1e6 }),
          maxDelayMs: fc.integer({ min: 1, max: 1e7 }),
        }),
      }),
      fc.record({ type: fc.constant('DELIVERY_EXHAUSTED' as const), now: date, deliveries: fc.nat() }),
      fc.record({
        type: fc.constant('ENVELOPE_PROCESSING' as const),
        now: date,
        msgId: fc.option(msgId, { nil: null }),
        service,
      }),
      fc.record(
        {
          type: fc.constant('ENVELOPE_RESULT' as const),
          now: date,
          msgId,
          status: fc.constantFrom(...RESULT_STATUSES),
          service,
          resultS3: fc.record({ bucket: fc.string(), key: fc.string() }),
          resultSchemaVersion: fc.string(),
          metrics: fc.dictionary(fc.string(), fc.integer(), { maxKeys: 2 }),
          error: fc.record({ code: fc.string(), message: fc.string() }),
        },
        { requiredKeys: ['type', 'now', 'msgId', 'status', 'service'] },
      ),
      fc.record({ type: fc.constant('DEADLINE_PASSED' as const), now: date }),
      fc.record(
        {
          type: fc.constant('RETRY_REQUESTED' as const),
          now: date,
          newJobId: fc.uuid(),
          targetService: serviceName,
        },
        { requiredKeys: ['type', 'now', 'newJobId'] },
      ),
    );
    fc.assert(
      fc.property(fc.constantFrom(...JOB_STATUSES), context, event, (status, ctx, ev) => {
        const [compiled, xstate] = bothPaths({ status, context: ctx }, ev);
        expect(compiled).toStrictEqual(xstate);
        expect(readContextMismatch({ status, context: ctx }, ev)).toBeNull();
      }),
      { seed: 20250815, numRuns: 2_000 },
    );
  });
});

// ---------------------------------------------------------------------------------------------
// What the compiler refuses, and what it hands to xstate at run time
// ---------------------------------------------------------------------------------------------

/** An inert scope for the test machines: their actions get a `self` and a `system`, nothing runs. */
const scope = (() => {
  const self = createActor(createMachine({}));
  return { self, system: self.system } as unknown as AnyActorScope;
})();

/** A flat machine the table covers, extended by `extra` (the feature under test). */
function flat(extra: { root?: object; a?: object; on?: object; states?: object } = {}): AnyStateMachine {
  const machine = setup({
    guards: { yes: () => true },
    actions: { effect: () => {} },
  }).createMachine({
    id: 'm',
    initial: 'a',
    context: { n: 0 },
    ...extra.root,
    states: {
      a: { on: { GO: { target: 'b', actions: 'effect' }, ...extra.on }, ...extra.a },
      b: {},
      ...extra.states,
    },
  } as never);
  return machine as unknown as AnyStateMachine;
}

/** What xstate's own `transition()` makes of `event` in `value`, in the shape of a compiled transition result. */
function xstateStep(machine: AnyStateMachine, value: string, context: object, event: EventObject) {
  const [next, actions] = transition(machine, machine.resolveState({ value, context }), event);
  return {
    value: next.value,
    context: next.context,
    actions: actions.map(({ type, params }) => ({ type, params })),
  };
}

describe('compileMachine', () => {
  it('covers a flat machine with guards, assign, enqueueActions and named actions', () => {
    expect(refusal(flat())).toBeUndefined();
    expect(refusal(recognitionJobMachine)).toBeUndefined();
  });

  const refused: Array<[string, AnyStateMachine, RegExp]> = [
    ['an entry action', flat({ a: { entry: 'effect' } }), /state m\.a has entry/],
    ['an exit action', flat({ a: { exit: 'effect' } }), /state m\.a has exit/],
    ['a root entry action', flat({ root: { entry: 'effect' } }), /state m has entry/],
    ['an always transition', flat({ a: { always: { target: 'b', guard: 'yes' } } }), /has always/],
    ['a delayed transition', flat({ a: { after: { 1000: 'b' } } }), /has after/],
    ['an invoked actor', flat({ a: { invoke: { src: 'child' } } }), /has invoke/],
    [
      'a nested state',
      flat({ a: { initial: 'x', states: { x: {} } } }),
      /state m\.a is compound, not atomic/,
    ],
    [
      'a parallel root',
      createMachine({ type: 'parallel', states: { a: {}, b: {} } }),
      /the root is parallel/,
    ],
    ['a history state', flat({ states: { h: { type: 'history' } } }), /is history/],
    ['a final state', flat({ states: { b: { type: 'final' } } }), /is final/],
    ['a wildcard transition', flat({ on: { '*': { actions: 'effect' } } }), /wildcard transition \(\*\)/],
    ['a raise action', flat({ on: { PING: { actions: raise({ type: 'GO' }) } } }), /xstate\.raise action/],
    ['an unimplemented guard', flat({ on: { PING: { guard: 'nope', actions: 'effect' } } }), /'nope'/],
    [
      'an unimplemented guard inside and()',
      flat({ on: { PING: { guard: and(['yes', 'nope']), actions: 'effect' } } }),
      /'nope'/,
    ],
    [
      'a stateIn guard',
      flat({ on: { PING: { guard: stateIn('b'), actions: 'effect' } } }),
      /built-in other than and, or, not/,
    ],
    [
      'a lifecycle whose ack raises an event',
      recognitionJobMachine.provide({ actions: { applyAck: raise({ type: 'PUBLISHED' }) as never } }),
      /ENVELOPE_PROCESSING has a xstate\.raise action/,
    ],
  ];
  it.each(refused)('refuses %s, saying why', (_what, machine, why) => {
    const compiled = compileMachine(machine, scope);
    expect(compiled.path).toBe('xstate');
    expect(compiled.path === 'xstate' && compiled.reason).toMatch(why);
  });

  it('accepts guards composed with and/not and gives what xstate gives', () => {
    const machine = recognitionJobMachine.provide({
      guards: {
        fileIsCurrent: and([not('isFromAnotherService'), ({ context }) => context.fileIsCurrent]) as never,
      },
    });
    const compiled = compileMachine(machine, scope);
    if (compiled.path !== 'compiled') throw new Error(compiled.reason);
    const event = sampleEventsByKind().retryRequested;
    for (const fileIsCurrent of [true, false]) {
      const context = contextIn('error', { fileIsCurrent });
      const step = compiled.transition('error', context, event);
      expect(step?.actions.map((a) => a.type)).toEqual(
        fileIsCurrent ? ['createAttempt', 'recordTransition'] : ['noteNoChange'],
      );
      expect(step).toStrictEqual(xstateStep(machine, 'error', context, event));
    }
  });

  it('hands to xstate what it meets at run time: an enqueued raise, a spawn, a failing guard, an xstate event, an unknown state', () => {
    const machine = setup({ actions: { effect: () => {} } }).createMachine({
      id: 'm',
      initial: 'a',
      context: { n: 0 },
      states: {
        a: {
          on: {
            RAISE: { actions: enqueueActions(({ enqueue }) => enqueue.raise({ type: 'GO' })) },
            SPAWN: {
              actions: assign(({ spawn }) => ({ n: spawn(createMachine({})) ? 1 : 0 })),
            },
            FAIL: {
              guard: () => {
                throw new Error('broken guard');
              },
              actions: 'effect',
            },
            COUNT: {
              target: 'b',
              actions: [
                assign(({ context }) => ({ n: (context.n as number) + 1 })),
                enqueueActions(({ enqueue, check }) => {
                  if (check(({ context }) => context.n === 1)) enqueue({ type: 'effect', params: { n: 1 } });
                  enqueue.assign({ n: 2 });
                }),
              ],
            },
          },
        },
        b: {},
      },
    });
    const compiled = compileMachine(machine, scope);
    if (compiled.path !== 'compiled') throw new Error(compiled.reason);
    expect(compiled.transition('a', { n: 0 }, { type: 'RAISE' })).toBeUndefined();
    expect(compiled.transition('a', { n: 0 }, { type: 'SPAWN' })).toBeUndefined();
    // xstate then throws its own error, naming the guard's transition.
    expect(compiled.transition('a', { n: 0 }, { type: 'FAIL' })).toBeUndefined();
    expect(() => xstateStep(machine, 'a', { n: 0 }, { type: 'FAIL' })).toThrow(
      /Unable to evaluate guard.*broken guard/s,
    );
    expect(compiled.transition('a', { n: 0 }, { type: 'xstate.stop' })).toBeUndefined();
    expect(compiled.transition('nowhere', { n: 0 }, { type: 'COUNT' })).toBeUndefined();
    // What it covers, it takes as xstate does: assign, then a check of the assigned context,
    // an enqueued named action with its params, an enqueued assign; and nothing where nothing matches.
    const counted = compiled.transition('a', { n: 0 }, { type: 'COUNT' });
    expect(counted).toEqual({
      value: 'b',
      context: { n: 2 },
      actions: [{ type: 'effect', params: { n: 1 } }],
    });
    expect(counted).toStrictEqual(xstateStep(machine, 'a', { n: 0 }, { type: 'COUNT' }));
    expect(compiled.transition('b', { n: 0 }, { type: 'COUNT' })).toStrictEqual(
      xstateStep(machine, 'b', { n: 0 }, { type: 'COUNT' }),
    );
  });
});
