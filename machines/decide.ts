/**
 * The pure decision API around the machine: hydrate a job from its status and context, apply one
 * event, and get back the next status, the next context, the effects and the decision.
 * Pure: returns actions as data, executes none.
 */
import { createActor, type AnyActorScope, type UnknownAction } from 'xstate';
import { recognitionJobMachine } from './recognitionJob.machine.js';
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
 * The actor scope `decide()` transitions in: inert (nothing deferred, emitted, logged or spawned;
 * the actions are collected, never executed), built once. It is what xstate's pure `transition()`
 * does, minus building a fresh scope for every event, which would create an actor and compute the
 * machine's initial state for each decision. Sharing it is sound because
 * the machine spawns and invokes nothing, and `decide()` is synchronous: `actions` below belongs
 * to one call at a time.
 */
let actions: UnknownAction[] = [];
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
      actions.push(action as UnknownAction);
    },
  } as unknown as AnyActorScope;
})();

/**
 * Apply one event to a job. Pure: hydrates, transitions the machine (as xstate's `transition()`
 * does, in a shared inert scope), and returns the effects it produced as data. The decision is
 * `applied` exactly when a transition was recorded.
 */
export function decide(job: JobState, event: JobEvent): JobDecision {
  actions = [];
  const next = recognitionJobMachine.transition(hydrate(job), event, scope);
  const effects = (actions as Array<{ type: string; params?: unknown }>)
    .filter((a) => EFFECT_TYPES.has(a.type))
    .map((a) => ({ type: a.type, params: a.params }) as JobEffect);
  const to = next.value as JobStatus;
  const note = effects.find((e) => e.type === 'noteNoChange');
  if (note) {
    return {
      decision: note.params.decision,
      from: job.status,
      to,
      context: next.context,
      effects,
      reason: note.params.reason,
    };
  }
  if (effects.some((e) => e.type === 'recordTransition')) {
    return { decision: 'applied', from: job.status, to, context: next.context, effects, reason: null };
  }
  // Every transition of the machine either records or notes; anything else is a machine bug.
  throw new Error(
    `machine returned neither a transition nor a no-change note for ${event.type} in ${job.status}`,
  );
}
