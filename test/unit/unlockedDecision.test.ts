/**
 * Unlocked decisions (machines/unlockedDecision.ts) against xstate's `transition()`: wherever the
 * write accepts a job (its status among the expected ones, its service the envelope's, no result
 * msg id, its file pointing at it), the unlocked decision is the machine's decision on that job,
 * but for `from`, which the write takes from the row; and the columns it writes are the ones the
 * machine assigns, to the values it assigns, the clock being the database's.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  CONTEXT_THE_MACHINE_READS,
  JOB_STATUSES,
  RESULT_STATUSES,
  WRITE_CLOCK,
  decide,
  decideUnlocked,
  decideWithXstate,
  deriveUnlockedKinds,
  unlockedKinds,
  sameDecision,
  type JobContext,
  type JobDecision,
  type JobEvent,
  type JobEventInput,
  type JobStatus,
} from '../../machines/index.js';
import { CONTEXT_COLUMNS } from '../../src/db/jobRow.js';
import { assignedColumns } from '../../src/step/write.js';
import { DONE_MSG_ID, NOW, SERVICE, contextIn, guardEventsOfType } from '../../workshop/machineSamples.js';

const MINUTE = 60_000;
const at = (ms: number) => new Date(NOW.getTime() + ms);

/** `context` with only the keys the machine declares it reads: what the locked path hydrates. */
function readContext(context: JobContext): JobContext {
  const read: Partial<Record<keyof JobContext, unknown>> = {};
  for (const key of CONTEXT_THE_MACHINE_READS) read[key] = context[key];
  return read as JobContext;
}

/** Every ack and result the guards and actions tell apart, without their clock. */
function envelopes(): JobEventInput[] {
  return (['ENVELOPE_PROCESSING', 'ENVELOPE_RESULT'] as const).flatMap((type) =>
    guardEventsOfType(type).map(({ now: _now, ...input }) => input as JobEventInput),
  );
}

/** Every value of what the guards read, with the keys an unlocked decision does not know varied too. */
function contextsFor(status: JobStatus): JobContext[] {
  const out: JobContext[] = [];
  for (const fileIsCurrent of [true, false])
    for (const resultMsgId of [null, DONE_MSG_ID, 'result:someone-else'])
      for (const publishAttempts of [0, 2, 5])
        for (const replyDeadline of [null, at(-MINUTE), NOW, at(MINUTE)])
          for (const attempt of [1, 3])
            out.push({
              ...contextIn(status, { fileIsCurrent, resultMsgId, publishAttempts, replyDeadline }),
              attempt,
            });
  return out;
}

/** Whether the write accepts the job for `event`'s unlocked decision. */
function accepts(
  statuses: readonly JobStatus[],
  status: JobStatus,
  context: JobContext,
  event: JobEventInput,
) {
  return (
    statuses.includes(status) &&
    'service' in event &&
    context.targetService === event.service.name &&
    context.resultMsgId === null &&
    context.fileIsCurrent
  );
}

/**
 * Where the unlocked decision differs from the machine's on the job, or null: the decision, its
 * target, effects and reason (`from` aside), and every mutable column, assigned or not and to what
 * (the unlocked decision's clock standing for the event's).
 */
function mismatch(status: JobStatus, context: JobContext, input: JobEventInput): string | null {
  const expected = decideUnlocked(input)!;
  const event = { now: NOW, ...input } as JobEvent;
  const before = { status, context: readContext(context) };
  const real = decideWithXstate(before, event);
  const withoutContext = (d: JobDecision) => ({ ...d, context: {} as JobContext });
  if (!sameDecision(withoutContext(expected.decision), withoutContext(real), WRITE_CLOCK, NOW))
    return 'decision';
  const expectedAfter = { status: expected.decision.to, context: expected.decision.context };
  const realAfter = { status: real.to, context: real.context };
  // The write sets exactly the assigned columns: the same ones, to the same values.
  const assigned = assignedColumns(expected.assumed, expectedAfter);
  if (assigned !== assignedColumns(before, realAfter)) return 'assigned';
  for (const [i, [column, key]] of CONTEXT_COLUMNS.entries()) {
    if ((assigned & (1 << i)) === 0) continue;
    const e = expectedAfter.context[key];
    const r = realAfter.context[key];
    if (e === WRITE_CLOCK ? r !== NOW : JSON.stringify(e) !== JSON.stringify(r)) return column;
  }
  return null;
}

describe('unlocked decisions', () => {
  it('are derived for an ack (in published) and for each result (in pending, published and processing)', () => {
    expect(Object.fromEntries(unlockedKinds())).toEqual({
      ENVELOPE_PROCESSING: ['published'],
      'ENVELOPE_RESULT:done': ['pending', 'published', 'processing'],
      'ENVELOPE_RESULT:needs_check': ['pending', 'published', 'processing'],
      'ENVELOPE_RESULT:error': ['pending', 'published', 'processing'],
    });
  });

  it("equal the machine's decision wherever the write accepts the job: every status × envelope × guard input", () => {
    const mismatches: string[] = [];
    let accepted = 0;
    let refused = 0;
    for (const input of envelopes()) {
      const expected = decideUnlocked(input);
      expect(expected, input.type).toBeDefined();
      for (const status of JOB_STATUSES)
        for (const context of contextsFor(status)) {
          if (!accepts(expected!.statuses, status, context, input)) {
            refused++;
            continue;
          }
          accepted++;
          const where = mismatch(status, context, input);
          if (where) mismatches.push(`${status} × ${input.type} (${JSON.stringify(context)}): ${where}`);
        }
    }
    expect(mismatches).toEqual([]);
    expect(accepted).toBeGreaterThan(100);
    expect(refused).toBeGreaterThan(accepted);
  });

  it("equal the machine's decision for random accepted jobs and envelopes", () => {
    const date = fc.date({ min: at(-60 * MINUTE), max: at(60 * MINUTE), noInvalidDate: true });
    const service = fc.record({ name: fc.constantFrom(SERVICE.name, 'ocr'), version: fc.string() });
    const input: fc.Arbitrary<JobEventInput> = fc.oneof(
      fc.record({
        type: fc.constant('ENVELOPE_PROCESSING' as const),
        msgId: fc.option(fc.string(), { nil: null }),
        service,
      }),
      fc.record(
        {
          type: fc.constant('ENVELOPE_RESULT' as const),
          msgId: fc.string(),
          status: fc.constantFrom(...RESULT_STATUSES),
          service,
          resultS3: fc.record({ bucket: fc.string(), key: fc.string() }),
          resultSchemaVersion: fc.string(),
          metrics: fc.dictionary(fc.string(), fc.integer(), { maxKeys: 2 }),
          error: fc.record({ code: fc.string(), message: fc.string() }),
        },
        { requiredKeys: ['type', 'msgId', 'status', 'service'] },
      ),
    );
    const unknown = fc.record({
      jobId: fc.uuid(),
      fileId: fc.uuid(),
      attempt: fc.integer({ min: 1, max: 5 }),
      publishAttempts: fc.integer({ min: 0, max: 6 }),
      replyDeadline: fc.option(date, { nil: null }),
    });
    fc.assert(
      fc.property(input, fc.constantFrom(...JOB_STATUSES), unknown, (ev, status, keys) => {
        const expected = decideUnlocked(ev)!;
        fc.pre(expected.statuses.includes(status));
        const context = {
          ...contextIn(status, { fileIsCurrent: true, resultMsgId: null }),
          ...keys,
          targetService: (ev as { service: { name: string } }).service.name,
        };
        expect(mismatch(status, context, ev)).toBeNull();
      }),
      { seed: 20261204, numRuns: 1_000 },
    );
  });

  it('leave out a kind whose decision depends on a key they do not assume, and say why', () => {
    // A machine whose results finish differently from the second attempt on.
    const byAttempt = (job: Parameters<typeof decide>[0], event: JobEvent) => {
      const d = decide(job, event);
      return event.type === 'ENVELOPE_RESULT' && job.context.attempt > 1 ? { ...d, to: 'error' as const } : d;
    };
    const kinds = deriveUnlockedKinds(byAttempt);
    expect(kinds.get('ENVELOPE_PROCESSING')).toEqual(['published']);
    for (const status of ['done', 'needs_check'])
      expect(kinds.get(`ENVELOPE_RESULT:${status}`)).toMatch(/depends on a key it does not assume/);
    // An error result ends in error either way.
    expect(kinds.get('ENVELOPE_RESULT:error')).toEqual(['pending', 'published', 'processing']);
    // A machine that copies the clock into a time of its own making.
    const clockMath = (job: Parameters<typeof decide>[0], event: JobEvent) => {
      const d = decide(job, event);
      return event.type === 'ENVELOPE_PROCESSING'
        ? { ...d, context: { ...d.context, startedAt: new Date(event.now.getTime() + 1) } }
        : d;
    };
    expect(deriveUnlockedKinds(clockMath).get('ENVELOPE_PROCESSING')).toMatch(/depends on a key/);
    // A machine that logs the clock in a transition's detail, which the write would not turn into
    // the database's.
    const clockInDetail = (job: Parameters<typeof decide>[0], event: JobEvent) => {
      const d = decide(job, event);
      return {
        ...d,
        effects: d.effects.map((e) =>
          e.type === 'recordTransition' ? { ...e, params: { ...e.params, detail: { at: event.now } } } : e,
        ),
      };
    };
    expect(deriveUnlockedKinds(clockInDetail).get('ENVELOPE_PROCESSING')).toBe('its effects carry the clock');
  });

  it('leave out every kind when the machine reads a key they neither assume nor vary', () => {
    const kinds = deriveUnlockedKinds(decide, [...CONTEXT_THE_MACHINE_READS, 'serviceName']);
    for (const reason of kinds.values())
      expect(reason).toBe('the machine reads serviceName, which it neither assumes nor varies');
  });

  it('leave the assumed job every envelope of a service shares as it was', () => {
    // The shared job is not frozen (a decision copies its context, and V8 copies a frozen object
    // slowly): no decision may change it.
    const inputs = envelopes().filter((input) => decideUnlocked(input) !== undefined);
    expect(inputs.length).toBeGreaterThan(0);
    const before = new Map(
      inputs.map((input) => {
        const { assumed } = decideUnlocked(input)!;
        return [assumed, structuredClone(assumed)];
      }),
    );
    for (let round = 0; round < 3; round++)
      for (const input of inputs) {
        const { assumed, decision } = decideUnlocked(input)!;
        expect(decision.context).not.toBe(assumed.context);
        expect(before.has(assumed)).toBe(true);
      }
    for (const [assumed, copy] of before) expect(assumed).toStrictEqual(copy);
  });

  it('have none for events that are not acks or results', () => {
    expect(decideUnlocked({ type: 'DEADLINE_PASSED' })).toBeUndefined();
    expect(decideUnlocked({ type: 'PUBLISHED', replyTimeoutMs: 1000 })).toBeUndefined();
  });
});
