/**
 * Property-based tests (fast-check, fixed seed, at least 1 000 cases each).
 *
 * The machine: random event sequences from a freshly created job (`pending`), with msg ids drawn
 * from a small pool so that repeats and second results with new ids are common, a clock that only
 * moves forward so that deadlines pass, and earlier results sent again at random points. (The
 * table-driven tests of recognitionJob.machine.test.ts pin every single state × event pair and
 * "final statuses are never left" from sample final contexts; here whole histories are random.)
 *
 * The decoder: test/unit/decodeEnvelope.test.ts already throws random bytes, random JSON values
 * and mutated valid envelopes at it (never throws, always an envelope or a reason). Here, exact
 * properties on top: arbitrary strings (any unicode, lone surrogates, SQL metacharacters) in every
 * string field are kept verbatim unless PostgreSQL could not store them; the size limit and the
 * nesting limit hold to the byte and to the level; decoding is deterministic and leaves its input
 * alone.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  FAILED_JOB_STATUSES,
  FILE_STATUS,
  decide,
  decisionPath,
  isFinalStatus,
  type JobContext,
  type JobEvent,
  type JobStatus,
  type ServiceInfo,
} from '../../machines/index.js';
import { LEGAL_EDGES_0002 } from '../../src/db/migrations/0002_legal_edges.js';
import { MAX_JSON_DEPTH, decodeEnvelope } from '../../src/messages/decodeEnvelope.js';
import { pathProblem, type Step } from '../chaos/invariants.js';
import { NOW, REPLY_TIMEOUT_MS, baseContext } from '../../workshop/machineSamples.js';

const SETTINGS = { seed: 20250815, numRuns: 1_000 } as const;

// ---------------------------------------------------------------------------------------------
// The machine
// ---------------------------------------------------------------------------------------------

/** One thing that happens to a job; `dt` moves the database clock forward (ms). */
type Command =
  | { kind: 'published'; dt: number; replyTimeoutMs: number }
  | { kind: 'publish_failed'; dt: number; maxAttempts: number }
  | { kind: 'delivery_exhausted'; dt: number; deliveries: number }
  | { kind: 'ack'; dt: number; msgId: string | null; service: ServiceInfo }
  | {
      kind: 'result';
      dt: number;
      msgId: string;
      status: 'done' | 'needs_check' | 'error';
      withS3: boolean;
      service: ServiceInfo;
    }
  | { kind: 'deadline'; dt: number }
  /** Send one of the earlier result events again, exactly (a redelivery). */
  | { kind: 'resend'; dt: number; pick: number }
  /** An operator retries the job (`jobs retry`). */
  | { kind: 'retry'; dt: number };

const dt = fc.integer({ min: 0, max: 2 * REPLY_TIMEOUT_MS });
const service = fc.record({
  name: fc.constantFrom('tabular-parser', 'ocr'),
  version: fc.constantFrom('1.0', '2.3.1'),
});
/** A small pool: the same msg id comes back often, a new one just as often. */
const msgId = fc.constantFrom('result:1', 'result:2', 'result:3', 'ack:1');

const command: fc.Arbitrary<Command> = fc.oneof(
  fc.record({
    kind: fc.constant('published' as const),
    dt,
    replyTimeoutMs: fc.integer({ min: 1, max: 2 * REPLY_TIMEOUT_MS }),
  }),
  fc.record({
    kind: fc.constant('publish_failed' as const),
    dt,
    maxAttempts: fc.integer({ min: 1, max: 5 }),
  }),
  fc.record({
    kind: fc.constant('delivery_exhausted' as const),
    dt,
    deliveries: fc.integer({ min: 1, max: 10 }),
  }),
  fc.record({ kind: fc.constant('ack' as const), dt, msgId: fc.option(msgId, { nil: null }), service }),
  fc.record({
    kind: fc.constant('result' as const),
    dt,
    msgId,
    status: fc.constantFrom('done' as const, 'needs_check' as const, 'error' as const),
    withS3: fc.boolean(),
    service,
  }),
  fc.record({ kind: fc.constant('deadline' as const), dt }),
  fc.record({ kind: fc.constant('resend' as const), dt, pick: fc.nat() }),
  fc.record({ kind: fc.constant('retry' as const), dt }),
);

const history = fc.record({
  fileIsCurrent: fc.boolean(),
  commands: fc.array(command, { minLength: 1, maxLength: 25 }),
});

/** One applied event and what came of it. */
interface Applied {
  event: JobEvent;
  before: { status: JobStatus; context: JobContext };
  result: ReturnType<typeof decide>;
  /** Whether the event is an earlier result sent again. */
  resent: boolean;
}

/** Play `commands` against a new job, through the pure `decide()`. */
function play(
  fileIsCurrent: boolean,
  commands: Command[],
): { log: Applied[]; final: { status: JobStatus; context: JobContext } } {
  let job: { status: JobStatus; context: JobContext } = {
    status: 'pending',
    context: baseContext({ fileIsCurrent }),
  };
  let now = NOW.getTime();
  const results: JobEvent[] = [];
  const log: Applied[] = [];
  for (const c of commands) {
    now += c.dt;
    const at = new Date(now);
    let event: JobEvent;
    let resent = false;
    switch (c.kind) {
      case 'published':
        event = { type: 'PUBLISHED', now: at, replyTimeoutMs: c.replyTimeoutMs };
        break;
      case 'publish_failed':
        event = {
          type: 'PUBLISH_FAILED',
          now: at,
          error: 'no JetStream ack',
          policy: { maxAttempts: c.maxAttempts, baseDelayMs: 1_000, maxDelayMs: 60_000 },
        };
        break;
      case 'delivery_exhausted':
        event = { type: 'DELIVERY_EXHAUSTED', now: at, deliveries: c.deliveries };
        break;
      case 'ack':
        event = { type: 'ENVELOPE_PROCESSING', now: at, msgId: c.msgId, service: c.service };
        break;
      case 'result':
        event = {
          type: 'ENVELOPE_RESULT',
          now: at,
          msgId: c.msgId,
          status: c.status,
          service: c.service,
          ...(c.status === 'error' ? { error: { code: 'E_PARSE', message: `failed (${c.msgId})` } } : {}),
          ...(c.status !== 'error' && c.withS3
            ? { resultS3: { bucket: 'arm-ka', key: `results/${c.msgId}.json` } }
            : {}),
          metrics: { from: c.msgId },
        };
        results.push(event);
        break;
      case 'deadline':
        event = { type: 'DEADLINE_PASSED', now: at };
        break;
      case 'retry':
        event = { type: 'RETRY_REQUESTED', now: at, newJobId: '7c2d9e4a-1b3f-4a5c-8d6e-9f0a1b2c3d44' };
        break;
      case 'resend': {
        const earlier = results[c.pick % Math.max(1, results.length)];
        if (!earlier) continue;
        event = { ...earlier, now: at };
        resent = true;
        break;
      }
    }
    const result = decide(job, event);
    log.push({ event, before: job, result, resent });
    job = { status: result.to, context: result.context };
  }
  return { log, final: job };
}

describe('the machine under random histories (from pending)', () => {
  // The histories run through the compiled decision table (compileMachine.test.ts holds it equal to xstate's).
  it('are decided through the compiled table', () => {
    expect(decisionPath()).toEqual({ path: 'compiled' });
  });

  it('a final status is never left, and nothing after it is applied but one retry of a failed job, which keeps it', () => {
    let retries = 0;
    fc.assert(
      fc.property(history, ({ fileIsCurrent, commands }) => {
        const { log } = play(fileIsCurrent, commands);
        for (const { event, before, result } of log) {
          if (!isFinalStatus(before.status)) continue;
          expect(result.to).toBe(before.status);
          const startsAttempt =
            event.type === 'RETRY_REQUESTED' &&
            (FAILED_JOB_STATUSES as readonly string[]).includes(before.status) &&
            before.context.fileIsCurrent;
          if (startsAttempt) {
            retries++;
            // The next attempt is a new job; this one only stops being its file's current job.
            expect(result.decision).toBe('applied');
            expect(result.context).toEqual({ ...before.context, fileIsCurrent: false });
            expect(result.effects.map((e) => e.type)).toEqual(['createAttempt', 'recordTransition']);
            continue;
          }
          expect(result.decision).not.toBe('applied');
          expect(result.context).toEqual(before.context);
        }
      }),
      SETTINGS,
    );
    expect(retries).toBeGreaterThan(50);
  });

  it('only a failed job that is its file’s current job starts a next attempt, at attempt + 1, for its file', () => {
    fc.assert(
      fc.property(history, ({ fileIsCurrent, commands }) => {
        for (const { before, result } of play(fileIsCurrent, commands).log) {
          const next = result.effects.filter((e) => e.type === 'createAttempt');
          if (next.length === 0) continue;
          expect(FAILED_JOB_STATUSES).toContain(before.status);
          expect(before.context.fileIsCurrent).toBe(true);
          expect(next.map((e) => e.params)).toEqual([
            expect.objectContaining({
              fileId: before.context.fileId,
              attempt: before.context.attempt + 1,
              retryOf: before.context.jobId,
            }),
          ]);
        }
      }),
      SETTINGS,
    );
  });

  it('an applied result sent again with the same msg id is a duplicate: nothing changes, whenever it comes', () => {
    let resentApplied = 0;
    fc.assert(
      fc.property(history, ({ fileIsCurrent, commands }) => {
        const { log } = play(fileIsCurrent, commands);
        let appliedResultMsgId: string | null = null;
        for (const { event, before, result, resent } of log) {
          if (resent) {
            // Any earlier result again: the job already holds a result or is final, so no change.
            expect(result.decision).not.toBe('applied');
            expect(result.to).toBe(before.status);
            expect(result.context).toEqual(before.context);
          }
          if (
            event.type === 'ENVELOPE_RESULT' &&
            event.service.name === before.context.targetService &&
            appliedResultMsgId !== null &&
            event.msgId === appliedResultMsgId
          ) {
            if (resent) resentApplied++;
            expect(result.decision).toBe('duplicate');
            expect(result.reason).toBe('same_msg_id');
            expect(result.effects).toEqual([
              { type: 'noteNoChange', params: { decision: 'duplicate', reason: 'same_msg_id' } },
            ]);
            expect(result.context).toEqual(before.context);
          }
          if (event.type === 'ENVELOPE_RESULT' && result.decision === 'applied')
            appliedResultMsgId = event.msgId;
        }
      }),
      SETTINGS,
    );
    // The generator does reach the interesting case, often.
    expect(resentApplied).toBeGreaterThan(100);
  });

  it("an ack or result from a service other than target_service is rejected whatever the job's status, changing nothing; the target's never is", () => {
    const rejectedIn = new Set<JobStatus>();
    fc.assert(
      fc.property(history, ({ fileIsCurrent, commands }) => {
        for (const { event, before, result } of play(fileIsCurrent, commands).log) {
          const envelope = event.type === 'ENVELOPE_PROCESSING' || event.type === 'ENVELOPE_RESULT';
          const foreign = envelope && event.service.name !== before.context.targetService;
          expect(result.decision === 'rejected').toBe(foreign);
          if (!foreign) continue;
          rejectedIn.add(before.status);
          expect(result.reason).toBe('service_mismatch');
          expect(result.to).toBe(before.status);
          expect(result.context).toEqual(before.context);
          expect(result.effects).toEqual([
            { type: 'noteNoChange', params: { decision: 'rejected', reason: 'service_mismatch' } },
          ]);
        }
      }),
      SETTINGS,
    );
    // Random histories reach every non-final status and some final ones with a foreign envelope.
    expect([...rejectedIn]).toEqual(expect.arrayContaining(['pending', 'published', 'processing', 'done']));
  });

  it('the transition log (recordTransition effects) is always a path of the machine from pending, ending at the status', () => {
    const legalInDb = new Set(LEGAL_EDGES_0002.map(([from, to]) => `${from}>${to}`));
    let finals = 0;
    fc.assert(
      fc.property(history, ({ fileIsCurrent, commands }) => {
        const { log, final } = play(fileIsCurrent, commands);
        const steps: Step[] = [];
        for (const { event, result } of log) {
          const records = result.effects.filter((e) => e.type === 'recordTransition');
          // Exactly one log entry per applied event, none otherwise.
          expect(records).toHaveLength(result.decision === 'applied' ? 1 : 0);
          for (const r of records) {
            expect(r.params.event).toBe(event.type);
            steps.push({ from: result.from, event: r.params.event, to: result.to });
            // The database's trigger (a frozen copy of the edges) accepts every status change.
            if (result.from !== result.to) expect(legalInDb.has(`${result.from}>${result.to}`)).toBe(true);
          }
        }
        expect(pathProblem(steps, final.status)).toBeNull();
        if (isFinalStatus(final.status)) finals++;
      }),
      SETTINGS,
    );
    expect(finals).toBeGreaterThan(SETTINGS.numRuns / 4);
  });

  it('a decision other than applied changes neither status nor context; its one effect is the note', () => {
    fc.assert(
      fc.property(history, ({ fileIsCurrent, commands }) => {
        for (const { before, result } of play(fileIsCurrent, commands).log) {
          if (result.decision === 'applied') continue;
          expect(result.to).toBe(before.status);
          expect(result.context).toEqual(before.context);
          expect(result.effects.map((e) => e.type)).toEqual(['noteNoChange']);
        }
      }),
      SETTINGS,
    );
  });

  it("a job that is not its file's current job never touches the file; a current one sets only what its status implies", () => {
    fc.assert(
      fc.property(history, ({ fileIsCurrent, commands }) => {
        for (const { result } of play(fileIsCurrent, commands).log) {
          const files = result.effects.filter((e) => e.type === 'setFileStatus');
          if (!fileIsCurrent) {
            expect(files).toEqual([]);
            continue;
          }
          for (const f of files) {
            const expected = ['done', 'needs_check', 'processing'].includes(result.to)
              ? FILE_STATUS.PROCESSING
              : FILE_STATUS.ERROR;
            expect(f.params.status).toBe(expected);
            expect(f.params.errorCode).toBe(expected === FILE_STATUS.ERROR ? result.context.errorCode : null);
          }
        }
      }),
      SETTINGS,
    );
  });
});

describe('the path checker the chaos harness shares (it must refuse what is not a path)', () => {
  const step = (from: string, event: string, to: string): Step => ({ from, event, to });
  const ok: Array<[string, Step[], string]> = [
    ['no transition yet', [], 'pending'],
    [
      'publish retries keep pending',
      [step('pending', 'PUBLISH_FAILED', 'pending'), step('pending', 'PUBLISHED', 'published')],
      'published',
    ],
    [
      'a result before its ack',
      [step('pending', 'PUBLISHED', 'published'), step('published', 'ENVELOPE_RESULT', 'done')],
      'done',
    ],
    ['a result for a job still pending', [step('pending', 'ENVELOPE_RESULT', 'error')], 'error'],
    [
      'a retry keeps the failed status',
      [step('pending', 'ENVELOPE_RESULT', 'error'), step('error', 'RETRY_REQUESTED', 'error')],
      'error',
    ],
    [
      "a retried attempt's creation row, then its life",
      [step('pending', 'CREATED', 'pending'), step('pending', 'PUBLISHED', 'published')],
      'published',
    ],
  ];
  const bad: Array<[string, Step[], string, RegExp]> = [
    [
      'a skipped step',
      [step('published', 'ENVELOPE_PROCESSING', 'processing')],
      'processing',
      /starts at published/,
    ],
    [
      'a broken chain',
      [step('pending', 'PUBLISHED', 'published'), step('processing', 'ENVELOPE_RESULT', 'done')],
      'done',
      /starts at processing/,
    ],
    [
      'an edge the machine lacks',
      [step('pending', 'PUBLISHED', 'processing')],
      'processing',
      /not a transition/,
    ],
    [
      'the wrong event for an edge',
      [step('pending', 'DEADLINE_PASSED', 'published')],
      'published',
      /not a transition/,
    ],
    [
      'a self-loop that records nothing',
      [step('pending', 'PUBLISHED', 'published'), step('published', 'DEADLINE_PASSED', 'published')],
      'published',
      /not a transition/,
    ],
    [
      'leaving a final status',
      [step('pending', 'ENVELOPE_RESULT', 'done'), step('done', 'ENVELOPE_RESULT', 'error')],
      'error',
      /leaves the final status done/,
    ],
    [
      'a retry of a job that did not fail',
      [step('pending', 'ENVELOPE_RESULT', 'done'), step('done', 'RETRY_REQUESTED', 'done')],
      'done',
      /not a transition/,
    ],
    [
      'a creation row after the first',
      [step('pending', 'PUBLISH_FAILED', 'pending'), step('pending', 'CREATED', 'pending')],
      'pending',
      /not a transition/,
    ],
    [
      'a status other than the end',
      [step('pending', 'PUBLISHED', 'published')],
      'timeout',
      /ends at published/,
    ],
  ];
  it.each(ok)('%s: a path', (_name, steps, status) => expect(pathProblem(steps, status)).toBeNull());
  it.each(bad)('%s: refused', (_name, steps, status, why) => expect(pathProblem(steps, status)).toMatch(why));
});

// ---------------------------------------------------------------------------------------------
// The decoder
// ---------------------------------------------------------------------------------------------

const JOB_ID = '3f1b6c1e-8a3c-4c1e-9d5e-2b7a4f0c9e11';
const MSG_ID = `result:${JOB_ID}:1`;
const enc = new TextEncoder();
const bytes = (v: unknown): Uint8Array => enc.encode(JSON.stringify(v));

const SQL_AND_FRIENDS = [
  "'; DROP TABLE recognition_job; --",
  '"; DELETE FROM s3_object; --',
  '$1',
  '$$',
  '\\',
  '\\x00',
  "O'Brien",
  '%_',
  '`id`',
  '\u202Eevil\u202C',
  '🧾',
  'e\u0301',
];
/** What PostgreSQL text and jsonb refuse: NUL and unpaired surrogates. */
const UNSTORABLE = fc.oneof(
  fc.constant('\u0000'),
  fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)),
);
/** One "character": any code point, a hostile token, now and then something unstorable. */
const unit = fc.oneof(
  { weight: 30, arbitrary: fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }) },
  { weight: 8, arbitrary: fc.constantFrom(...SQL_AND_FRIENDS) },
  { weight: 1, arbitrary: UNSTORABLE },
);
/** At most 5 units of at most 33 code units: always within every maxLength of the schema. */
const text = (minLength = 1) => fc.string({ unit, minLength, maxLength: 5 });
const FORBIDDEN = ['__proto__', 'constructor', 'prototype'];
const key = fc.oneof(
  { weight: 15, arbitrary: text(0) },
  { weight: 1, arbitrary: fc.constantFrom(...FORBIDDEN) },
);
const metricValue = fc.oneof(
  text(0),
  fc.integer(),
  fc.boolean(),
  fc.constant(null),
  fc.array(text(0), { maxLength: 3 }),
);

const anyEnvelope = fc
  .record({
    status: fc.constantFrom('processing', 'done', 'needs_check', 'error'),
    name: text(),
    version: text(),
    bucket: text(),
    s3key: text(),
    schemaVersion: fc.option(text(0), { nil: undefined }),
    code: text(),
    message: text(0),
    metrics: fc.option(fc.dictionary(key, metricValue, { maxKeys: 4 }), { nil: undefined }),
    extra: fc.dictionary(
      key.map((k) => (FORBIDDEN.includes(k) ? k : `x_${k}`)),
      metricValue,
      { maxKeys: 2 },
    ),
  })
  .map((r) => {
    const env: Record<string, unknown> = {
      job_id: JOB_ID,
      status: r.status,
      service: { name: r.name, version: r.version },
    };
    if (r.status === 'error') env['error'] = { code: r.code, message: r.message };
    if (r.status === 'done' || r.status === 'needs_check')
      env['result_s3'] = { bucket: r.bucket, key: r.s3key };
    if (r.schemaVersion !== undefined) env['result_schema_version'] = r.schemaVersion;
    if (r.metrics !== undefined) env['metrics'] = r.metrics;
    // Built with defineProperty so that a "__proto__" key is a real own key, as JSON.parse makes it.
    for (const [k, v] of Object.entries(r.extra))
      Object.defineProperty(env, k, { value: v, enumerable: true, writable: true, configurable: true });
    return env;
  });

/** Whether JSON text of `v` holds something PostgreSQL cannot store or a forbidden key. */
function hostile(v: unknown): boolean {
  if (typeof v === 'string') return v.includes('\u0000') || /[\uD800-\uDFFF]/u.test(v);
  if (Array.isArray(v)) return v.some(hostile);
  if (v && typeof v === 'object')
    return Object.entries(v).some(([k, x]) => FORBIDDEN.includes(k) || hostile(k) || hostile(x));
  return false;
}

describe('the decoder, exactly', () => {
  it('keeps arbitrary strings in every field verbatim, refusing (INVALID_JSON) exactly what PostgreSQL cannot store or a forbidden key', () => {
    let accepted = 0;
    fc.assert(
      fc.property(anyEnvelope, (envelope) => {
        const data = bytes(envelope);
        const copy = data.slice();
        const result = decodeEnvelope({ data, msgId: MSG_ID, maxBytes: 1 << 20 });
        // Deterministic, and the input is left alone.
        expect(decodeEnvelope({ data, msgId: MSG_ID, maxBytes: 1 << 20 })).toEqual(result);
        expect(data).toEqual(copy);
        if (hostile(envelope)) {
          expect(result).toMatchObject({ ok: false, reason: 'INVALID_JSON' });
        } else {
          expect(result).toEqual({ ok: true, envelope: JSON.parse(JSON.stringify(envelope)), msgId: MSG_ID });
          accepted++;
        }
      }),
      SETTINGS,
    );
    // Both sides of the rule are exercised, each often.
    expect(accepted).toBeGreaterThan(SETTINGS.numRuns / 5);
    expect(accepted).toBeLessThan((SETTINGS.numRuns * 4) / 5);
  });

  it('refuses PAYLOAD_TOO_LARGE exactly when the payload is longer than the limit', () => {
    fc.assert(
      fc.property(anyEnvelope, fc.integer({ min: -64, max: 64 }), (envelope, delta) => {
        const data = bytes(envelope);
        const maxBytes = Math.max(0, data.byteLength + delta);
        const result = decodeEnvelope({ data, msgId: MSG_ID, maxBytes });
        if (data.byteLength > maxBytes) {
          expect(result).toEqual({
            ok: false,
            reason: 'PAYLOAD_TOO_LARGE',
            details: { bytes: data.byteLength, limit: maxBytes },
            msgId: MSG_ID,
          });
        } else {
          expect(result.ok === false && result.reason === 'PAYLOAD_TOO_LARGE').toBe(false);
        }
      }),
      SETTINGS,
    );
  });

  it(`refuses nesting exactly from level ${MAX_JSON_DEPTH} on, whatever mix of arrays and objects`, () => {
    fc.assert(
      fc.property(
        fc.array(fc.boolean(), { maxLength: 2 * MAX_JSON_DEPTH }),
        fc.boolean(),
        (wraps, emptyInside) => {
          // metrics is level 1, its `m` level 2; `wraps` nest that further: the deepest container is at wraps.length + 2.
          let inner: unknown = emptyInside ? {} : { leaf: 1 };
          for (const asArray of wraps) inner = asArray ? [inner] : { a: inner };
          const envelope = {
            job_id: JOB_ID,
            status: 'processing',
            service: { name: 'a', version: '1' },
            metrics: { m: inner },
          };
          const deepest = wraps.length + 2;
          const result = decodeEnvelope({ data: bytes(envelope), msgId: undefined, maxBytes: 1 << 20 });
          if (deepest >= MAX_JSON_DEPTH) expect(result).toMatchObject({ ok: false, reason: 'INVALID_JSON' });
          else expect(result).toEqual({ ok: true, envelope, msgId: null });
        },
      ),
      SETTINGS,
    );
  });
});
