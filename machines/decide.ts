/**
 * The pure decision API around the machine: hydrate a job from its status and context, apply one
 * event, and get back the next status, the next context, the effects and the decision.
 * Pure: returns actions as data, executes none. Decisions come from the machine alone: from its
 * transitions compiled into a table at start-up (`compileMachine.ts` says what it covers), or from
 * xstate's `transition()` when the machine uses something the table does not cover.
 */
import { createActor, type AnyActorScope } from 'xstate';
import { compileMachine, type ExecutedAction, type TransitionResult } from './compileMachine.js';
import { CONTEXT_THE_MACHINE_READS, recognitionJobMachine } from './recognitionJob.machine.js';
import { JOB_STATUSES, type JobStatus } from './statuses.js';
import {
  JOB_EFFECT_TYPES,
  type Decision,
  type JobContext,
  type JobEffect,
  type JobEvent,
} from './recognitionJob.types.js';

const EFFECT_TYPES: ReadonlySet<string> = new Set<string>(JOB_EFFECT_TYPES);

/** The outcome of one event for one job. */
export interface JobDecision {
  decision: Exclude<Decision, 'unknown_job'>;
  from: JobStatus;
  to: JobStatus;
  context: JobContext;
  effects: JobEffect[];
  /** Why nothing changed, when `decision !== 'applied'`. */
  reason: string | null;
}

/** A job as the machine sees it: its status and its context. */
export interface JobState {
  status: JobStatus;
  context: JobContext;
}

/** The values of the context keys the machine reads (`CONTEXT_THE_MACHINE_READS`). */
export type ReadValues = Pick<JobContext, (typeof CONTEXT_THE_MACHINE_READS)[number]>;

/** A context of the keys the machine reads: those keys' values, every other key undefined. */
type ReadContext = {
  [K in keyof JobContext]: K extends (typeof CONTEXT_THE_MACHINE_READS)[number] ? JobContext[K] : undefined;
};

/**
 * A context with the values of the keys the machine reads, and every other key undefined (the
 * `satisfies` makes it name each key as one or the other): what a decision depends on. After a
 * decision, a key with a value that was undefined is one the machine assigned. Every key is
 * present so that every context has one shape, the one the machine's assignments copy and
 * overwrite.
 */
export function contextOfReadKeys(v: ReadValues): JobContext {
  const context = {
    jobId: v.jobId,
    fileId: v.fileId,
    attempt: v.attempt,
    targetService: v.targetService,
    fileIsCurrent: v.fileIsCurrent,
    serviceName: undefined,
    serviceVersion: undefined,
    publishAttempts: v.publishAttempts,
    nextPublishAt: undefined,
    publishedAt: undefined,
    replyDeadline: v.replyDeadline,
    startedAt: undefined,
    finishedAt: undefined,
    metrics: undefined,
    errorCode: undefined,
    errorMessage: undefined,
    resultSchemaVersion: undefined,
    resultS3ObjectId: undefined,
    resultMsgId: v.resultMsgId,
  } satisfies ReadContext;
  return context as unknown as JobContext;
}

/**
 * Each status's snapshot as `resolveState` makes it, made once: its state nodes, value and tags
 * depend on the status alone, so hydrating a job allocates only the copy that carries its context.
 */
const RESOLVED = new Map(
  JOB_STATUSES.map((status) => [
    status,
    recognitionJobMachine.resolveState({ value: status, context: {} as JobContext }),
  ]),
);

/**
 * Hydrate a machine snapshot from a job's status and context — what
 * `recognitionJobMachine.resolveState({ value: status, context })` returns (a unit test holds them
 * equal), from the status's snapshot made once. Throws on an unknown status.
 */
export function hydrate(job: JobState) {
  const resolved = RESOLVED.get(job.status);
  if (!resolved) throw new Error(`unknown recognition_job status: ${String(job.status)}`);
  // A snapshot is a plain object; the containers xstate may fill are the job's own.
  return { ...resolved, context: job.context, children: {}, historyValue: {} };
}

/**
 * The actor scope `decideWithXstate()` transitions in: inert (nothing deferred, emitted, logged or
 * spawned; the actions are collected, never executed), built once. It is what xstate's pure
 * `transition()` does, minus building a fresh scope for every event, which would create an actor
 * and compute the machine's initial state for each decision. Sharing it is sound because the
 * machine spawns and invokes nothing, and a decision is synchronous: `executed` below belongs to
 * one call at a time. The compiled table takes its actions' `self` and `system` from it too.
 */
let executed: ExecutedAction[] = [];
const scope: AnyActorScope = (() => {
  // Never started: the actor only gives the scope a `self` and a system. Its input is a
  // placeholder; no decision reads the actor's own (initial) context.
  const self = createActor(recognitionJobMachine, { input: {} as JobContext });
  return {
    self,
    id: '',
    sessionId: '',
    system: self.system,
    defer: () => {},
    emit: () => {},
    logger: () => {},
    stopChild: () => {},
    actionExecutor: (action: { type: string; params?: unknown }) => {
      executed.push({ type: action.type, params: action.params });
    },
  } as unknown as AnyActorScope;
})();

/**
 * The machine's transitions compiled into a table at start-up (`compileMachine`); or, when the
 * machine uses something the table does not cover, the reason, and every decision goes to xstate.
 */
const compiled = compileMachine(recognitionJobMachine, scope);

/** Which path `decide()` takes: the compiled table, or xstate's `transition()` and why. */
export type DecisionPath = { path: 'compiled' } | { path: 'xstate'; reason: string };

/** Which path `decide()` takes, decided once at start-up from the machine. */
export function decisionPath(): DecisionPath {
  return compiled.path === 'compiled' ? { path: 'compiled' } : { path: 'xstate', reason: compiled.reason };
}

/**
 * Apply one event to a job. Pure: returns the effects the machine produced as data. Decided by the
 * machine's compiled table when {@link decisionPath} is `compiled` and the table covers the event,
 * else by {@link decideWithXstate}; both give the same decision (a unit test holds them equal over
 * every status, event and guard input).
 */
export function decide(job: JobState, event: JobEvent): JobDecision {
  const taken =
    compiled.path === 'compiled' ? compiled.transition(job.status, job.context, event) : undefined;
  return taken === undefined ? decideWithXstate(job, event) : toDecision(job, event, taken);
}

/**
 * Apply one event to a job through xstate: hydrate, transition the machine (as xstate's
 * `transition()` does, in a shared inert scope) and collect the actions it hands to the executor.
 */
export function decideWithXstate(job: JobState, event: JobEvent): JobDecision {
  executed = [];
  const next = recognitionJobMachine.transition(hydrate(job), event, scope);
  return toDecision(job, event, { value: next.value as string, context: next.context, actions: executed });
}

/**
 * The decision a transition result makes: its effects are the executed actions the shell knows; it is
 * `applied` exactly when a transition was recorded.
 */
function toDecision(job: JobState, event: JobEvent, taken: TransitionResult): JobDecision {
  const effects = taken.actions.filter((a) => EFFECT_TYPES.has(a.type)) as JobEffect[];
  const to = taken.value as JobStatus;
  const context = taken.context as JobContext;
  const note = effects.find((e) => e.type === 'noteNoChange');
  if (note) {
    return {
      decision: note.params.decision,
      from: job.status,
      to,
      context,
      effects,
      reason: note.params.reason,
    };
  }
  if (effects.some((e) => e.type === 'recordTransition')) {
    return { decision: 'applied', from: job.status, to, context, effects, reason: null };
  }
  // Every transition of the machine either records or notes; anything else is a machine bug.
  throw new Error(
    `machine returned neither a transition nor a no-change note for ${event.type} in ${job.status}`,
  );
}
