/**
 * The unlocked decision of an ack or a result: the machine's decision for the state its job is
 * assumed to be in ({@link UNLOCKED_ROW}), and the statuses in which it holds, derived from the
 * machine at start-up. A kind of envelope whose decision depends on anything the write does not
 * check has none and takes the locked path (docs/development.md, "How to add an event"). Pure.
 */
import { contextOfReadKeys, decide, type JobDecision, type JobState } from './decide.js';
import { CONTEXT_THE_MACHINE_READS } from './recognitionJob.machine.js';
import type {
  EnvelopeProcessingEvent,
  EnvelopeResultEvent,
  JobEvent,
  JobEventInput,
} from './recognitionJob.types.js';
import { JOB_STATUSES, type JobStatus } from './statuses.js';

/**
 * The clock of an unlocked decision: the database's, at the moment of the write, unknown here. A
 * time the machine assigns is this very object, which the write turns into the database's clock;
 * an invalid Date, so that a time computed from it has no ISO form and fails the write instead of
 * being written.
 */
export const WRITE_CLOCK: Date = new Date(NaN);

/** What an unlocked decision assumes of the job's row besides its status (see the module's doc). */
export const UNLOCKED_ROW = { resultMsgId: null, fileIsCurrent: true } as const;

/** An event that may have an unlocked decision: an envelope, which names the service it comes from. */
type EnvelopeEvent = EnvelopeProcessingEvent | EnvelopeResultEvent;
type EnvelopeInput = Omit<EnvelopeProcessingEvent, 'now'> | Omit<EnvelopeResultEvent, 'now'>;

/** An unlocked decision: the machine's, in each of `statuses` (`decision.from` is the first). */
export interface UnlockedDecision {
  statuses: readonly JobStatus[];
  /** The job as the decision assumed it, in the first of `statuses`. */
  assumed: JobState;
  decision: JobDecision;
}

/** The keys an unlocked decision does not know, with the values it gives them. */
interface Placeholders {
  jobId: string;
  fileId: string;
  attempt: number;
  publishAttempts: number;
  replyDeadline: Date | null;
}
const PLACEHOLDERS: Placeholders = {
  jobId: '',
  fileId: '',
  attempt: 1,
  publishAttempts: 0,
  replyDeadline: null,
};

/** The keys the machine reads that an unlocked decision knows: the ones it assumes or varies. */
const KNOWN_KEYS: ReadonlySet<string> = new Set([
  'targetService',
  ...Object.keys(UNLOCKED_ROW),
  ...Object.keys(PLACEHOLDERS),
]);

/**
 * The job an unlocked decision assumes: every key of the context present, the ones the machine
 * does not read undefined (as a job hydrated from the columns a decision depends on has them).
 */
function assumedJob(status: JobStatus, event: EnvelopeInput, p: Placeholders = PLACEHOLDERS): JobState {
  // Each key written out: a spread of the placeholders is a generic object copy on every envelope.
  const context = contextOfReadKeys({
    jobId: p.jobId,
    fileId: p.fileId,
    attempt: p.attempt,
    publishAttempts: p.publishAttempts,
    replyDeadline: p.replyDeadline,
    targetService: event.service.name,
    fileIsCurrent: UNLOCKED_ROW.fileIsCurrent,
    resultMsgId: UNLOCKED_ROW.resultMsgId,
  });
  return { status, context };
}

function isEnvelope(event: JobEventInput): event is EnvelopeInput {
  return event.type === 'ENVELOPE_PROCESSING' || event.type === 'ENVELOPE_RESULT';
}

/** The kind of each result status, made once: no string is built per envelope. */
const RESULT_KINDS = new Map<string, string>();

/** The kind of an envelope: what, besides the assumptions, the machine's guards tell apart. */
function kindOf(event: EnvelopeInput): string {
  if (event.type !== 'ENVELOPE_RESULT') return event.type;
  let kind = RESULT_KINDS.get(event.status);
  if (kind === undefined) RESULT_KINDS.set(event.status, (kind = `${event.type}:${event.status}`));
  return kind;
}

/** One envelope of each kind, as a service sends them, optional fields filled. */
const SERVICE = { name: 'a-service', version: '1.0.0' };
const KIND_SAMPLES: readonly EnvelopeInput[] = [
  { type: 'ENVELOPE_PROCESSING', msgId: 'ack-1', service: SERVICE },
  ...(['done', 'needs_check'] as const).map((status): EnvelopeInput => ({
    type: 'ENVELOPE_RESULT',
    msgId: `result-${status}`,
    status,
    service: SERVICE,
    resultS3: { bucket: 'results', key: `${status}/result.json` },
    resultSchemaVersion: '1.0',
    metrics: { pages: 1 },
  })),
  {
    type: 'ENVELOPE_RESULT',
    msgId: 'result-error',
    status: 'error',
    service: SERVICE,
    error: { code: 'UNSUPPORTED_FORMAT', message: 'not supported' },
  },
];

/** Other values of the placeholders, and another clock: a kind's decision must not change with them. */
const OTHER_PLACEHOLDERS: readonly Placeholders[] = [
  { jobId: 'job-b', fileId: 'file-b', attempt: 3, publishAttempts: 4, replyDeadline: new Date(0) },
  { jobId: 'job-c', fileId: 'file-c', attempt: 2, publishAttempts: 1, replyDeadline: new Date(8.64e15) },
];
const OTHER_CLOCK = new Date(1_000_000);

/**
 * `d` without the placeholders in its context, when it kept them as they were (the machine never
 * assigns them); undefined when it changed one.
 */
function placeholdersKept(d: JobDecision, p: Placeholders): JobDecision | undefined {
  const context: Record<string, unknown> = { ...d.context };
  for (const key of Object.keys(p) as Array<keyof Placeholders>) {
    if (context[key] !== p[key]) return undefined;
    delete context[key];
  }
  return { ...d, context: context as unknown as JobDecision['context'] };
}

/** Whether `value` holds {@link WRITE_CLOCK} anywhere. */
function carriesClock(value: unknown): boolean {
  if (value === WRITE_CLOCK) return true;
  if (value === null || typeof value !== 'object' || value instanceof Date) return false;
  return Object.values(value).some(carriesClock);
}

function timed(event: EnvelopeInput, now: Date): EnvelopeEvent {
  return { now, ...event } as EnvelopeEvent;
}

/**
 * Whether two decisions are the same but for `from`: deep equality, where `clockA` in `a` stands
 * for `clockB` in `b` (the same object, not only the same time).
 */
export function sameDecision(
  a: JobDecision,
  b: JobDecision,
  clockA = WRITE_CLOCK,
  clockB = WRITE_CLOCK,
): boolean {
  const same = (x: unknown, y: unknown): boolean => {
    if (x === clockA || y === clockB) return x === clockA && y === clockB;
    if (x instanceof Date || y instanceof Date)
      return x instanceof Date && y instanceof Date && Object.is(x.getTime(), y.getTime());
    if (x === null || y === null || typeof x !== 'object' || typeof y !== 'object') return Object.is(x, y);
    if (Array.isArray(x) !== Array.isArray(y)) return false;
    const keys = Object.keys(x);
    if (keys.length !== Object.keys(y).length) return false;
    return keys.every(
      (k) =>
        Object.hasOwn(y, k) && same((x as Record<string, unknown>)[k], (y as Record<string, unknown>)[k]),
    );
  };
  return same({ ...a, from: null }, { ...b, from: null });
}

/**
 * The statuses of one kind (in the order of {@link JOB_STATUSES}), or why it has none: the
 * statuses where the sample is applied with the first such status's decision, each of them
 * decided the same with other placeholders and another clock.
 */
function statusesOf(
  sample: EnvelopeInput,
  decideWith: Decider,
  reads: readonly string[],
): readonly JobStatus[] | string {
  const unknown = reads.filter((key) => !KNOWN_KEYS.has(key));
  if (unknown.length > 0)
    return `the machine reads ${unknown.join(', ')}, which it neither assumes nor varies`;
  const decided = JOB_STATUSES.map((status) => ({
    status,
    d: decideWith(assumedJob(status, sample), timed(sample, WRITE_CLOCK) as JobEvent),
  })).filter(({ d }) => d.decision === 'applied');
  if (decided.length === 0) return 'applied in no status';
  const first = decided[0]!.d;
  // The write turns the clock into the database's only where it is a column's value.
  if (carriesClock(first.effects)) return 'its effects carry the clock';
  const same = decided.filter(({ d }) => sameDecision(d, first));
  for (const { status, d } of same) {
    const expected = placeholdersKept(d, PLACEHOLDERS);
    for (const p of OTHER_PLACEHOLDERS) {
      const other = placeholdersKept(
        decideWith(assumedJob(status, sample, p), timed(sample, OTHER_CLOCK) as JobEvent),
        p,
      );
      if (!expected || !other || !sameDecision(expected, other, WRITE_CLOCK, OTHER_CLOCK))
        return `the decision in ${status} depends on a key it does not assume`;
    }
  }
  return same.map(({ status }) => status);
}

/** How a job's event is decided: `decide` (the tests also give it other machines' decisions). */
export type Decider = (job: JobState, event: JobEvent) => JobDecision;

/**
 * Each kind of envelope with its statuses, or why it has none, as `decideWith` decides them, for a
 * machine that reads the context keys `reads`.
 */
export function deriveUnlockedKinds(
  decideWith: Decider = decide,
  reads: readonly string[] = CONTEXT_THE_MACHINE_READS,
): Map<string, readonly JobStatus[] | string> {
  return new Map(KIND_SAMPLES.map((sample) => [kindOf(sample), statusesOf(sample, decideWith, reads)]));
}

/** Each kind's statuses, or why it has none: derived once, at start-up. */
const KINDS: ReadonlyMap<string, readonly JobStatus[] | string> = deriveUnlockedKinds();

/** Each kind of envelope with its statuses, or why it has none (for the start-up log and tests). */
export function unlockedKinds(): ReadonlyMap<string, readonly JobStatus[] | string> {
  return KINDS;
}

/** The assumed jobs made so far, by kind and service. */
const ASSUMED = new Map<string, Map<string, JobState>>();
/** Services whose assumed jobs are kept, per kind: a service's name is whatever an envelope says. */
const ASSUMED_SERVICES_MAX = 64;

/**
 * The assumed job of a kind's envelope, one per kind and service: it depends on nothing else, and
 * a decision makes a context of its own, so every envelope of a service shares it. Its context is
 * not frozen: every decision copies it, and V8 copies a frozen object by a slow path that costs
 * several times the time and memory of the copy of a plain one.
 */
function sharedAssumedJob(kind: string, status: JobStatus, event: EnvelopeInput): JobState {
  let byService = ASSUMED.get(kind);
  if (byService === undefined) ASSUMED.set(kind, (byService = new Map()));
  let job = byService.get(event.service.name);
  if (job === undefined) {
    job = Object.freeze(assumedJob(status, event));
    if (byService.size < ASSUMED_SERVICES_MAX) byService.set(event.service.name, job);
  }
  return job;
}

/**
 * The unlocked decision of `event`, or undefined when it has none (not an ack or a result, or a
 * kind without one): then only a decision on the job's row will do.
 */
export function decideUnlocked(event: JobEventInput): UnlockedDecision | undefined {
  if (!isEnvelope(event)) return undefined;
  const kind = kindOf(event);
  const statuses = KINDS.get(kind);
  if (statuses === undefined || typeof statuses === 'string') return undefined;
  const assumed = sharedAssumedJob(kind, statuses[0]!, event);
  // The clock first, then the event's fields, as the step builds every event it decides.
  return { statuses, assumed, decision: decide(assumed, { now: WRITE_CLOCK, ...event } as JobEvent) };
}
