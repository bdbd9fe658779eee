/**
 * The pure decision API around the machine: hydrate a job from its status and context, apply one
 * event, and get back the next status, the next context, the effects and the decision.
 * Pure: returns actions as data, executes none.
 */
import { transition } from 'xstate';
import { recognitionJobMachine } from './recognitionJob.machine.js';
import { JOB_STATUSES, type JobStatus } from './statuses.js';
import type { Decision, JobContext, JobEffect, JobEffectType, JobEvent } from './recognitionJob.types.js';

const EFFECT_TYPES: ReadonlySet<string> = new Set<JobEffectType>([
  'setFileStatus',
  'registerResultObject',
  'recordTransition',
  'noteNoChange',
]);

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

/** Hydrate a machine snapshot from a job's status and context. Throws on an unknown status. */
export function hydrate(job: JobState) {
  if (!(JOB_STATUSES as readonly string[]).includes(job.status)) {
    throw new Error(`unknown recognition_job status: ${String(job.status)}`);
  }
  return recognitionJobMachine.resolveState({ value: job.status, context: job.context });
}

/**
 * Apply one event to a job. Pure: hydrates, calls xstate's `transition()`, and returns the effects
 * it produced as data. The decision is `applied` exactly when a transition was recorded.
 */
export function decide(job: JobState, event: JobEvent): JobDecision {
  const [next, actions] = transition(recognitionJobMachine, hydrate(job), event);
  const effects = actions
    .filter((a) => EFFECT_TYPES.has(a.type))
    .map((a) => ({ type: a.type, params: a.params }) as JobEffect);
  const to = next.value as JobStatus;
  const note = effects.find((e) => e.type === 'noteNoChange');
  if (note) {
    return { decision: note.params.decision, from: job.status, to, context: next.context, effects, reason: note.params.reason };
  }
  if (effects.some((e) => e.type === 'recordTransition')) {
    return { decision: 'applied', from: job.status, to, context: next.context, effects, reason: null };
  }
  // Every transition of the machine either records or notes; anything else is a machine bug.
  throw new Error(`machine returned neither a transition nor a no-change note for ${event.type} in ${job.status}`);
}
