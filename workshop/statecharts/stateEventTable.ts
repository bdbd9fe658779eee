/**
 * The state × event table: for every state of the machine and every variant of every event type,
 * which transition the machine takes (its guard in plain words), the next state and the effects.
 *
 * The structure (which transition, which guard) is read from the machine with xstate's
 * `getTransitionData`; the effects come from running the pure `transition()` on sample jobs, the
 * same way `decide()` does (a unit test holds the two equal). Pure: runs nothing but the machine.
 */
import { transition, type AnyStateMachine } from 'xstate';
import {
  JOB_EFFECT_TYPES,
  recognitionJobMachine,
  type Decision,
  type JobContext,
  type JobEffect,
  type JobEvent,
  type JobStatus,
} from '../../machines/index.js';
import {
  candidates,
  readMachineGraph,
  type GraphTransition,
  type MachineGraph,
} from '../../src/statecharts/machineGraph.js';
import { contextIn, eventVariants } from '../machineSamples.js';

const EFFECT_TYPES: ReadonlySet<string> = new Set<string>(JOB_EFFECT_TYPES);

/**
 * The level the inbox logs each decision at (`src/daemon/inbox.ts`). The other loops follow it but
 * for two cases they call out themselves: the watchdog's no-change ticks (debug), dead letters (warn).
 * A `rejected` envelope is quarantined (`SERVICE_MISMATCH`), and a quarantine is logged at warn.
 */
export const DECISION_LOG_LEVEL: Record<Exclude<Decision, 'unknown_job'>, 'debug' | 'info' | 'warn'> = {
  applied: 'info',
  duplicate: 'debug',
  ignored: 'info',
  late: 'warn',
  rejected: 'warn',
};

/** What one event does to one job, on any machine with the lifecycle's effect vocabulary. */
export interface MachineOutcome {
  decision: Exclude<Decision, 'unknown_job'>;
  from: string;
  to: string;
  context: JobContext;
  effects: JobEffect[];
  reason: string | null;
}

/**
 * `decide()` for any machine built on the lifecycle's vocabulary (the real one, or a mutated copy
 * in a test). Pure: hydrates, transitions, returns the effects as data.
 */
export function decideOn(
  machine: AnyStateMachine,
  status: string,
  context: JobContext,
  event: JobEvent,
): MachineOutcome {
  const [next, actions] = transition(machine, machine.resolveState({ value: status, context }), event);
  const effects = actions
    .filter((a) => EFFECT_TYPES.has(a.type))
    .map((a) => ({ type: a.type, params: a.params }) as unknown as JobEffect);
  const to = String(next.value);
  const note = effects.find((e) => e.type === 'noteNoChange');
  if (note)
    return {
      decision: note.params.decision,
      from: status,
      to,
      context: next.context as JobContext,
      effects,
      reason: note.params.reason,
    };
  if (effects.some((e) => e.type === 'recordTransition')) {
    return {
      decision: 'applied',
      from: status,
      to,
      context: next.context as JobContext,
      effects,
      reason: null,
    };
  }
  // As in decide(): every transition records or notes; anything else is a machine bug.
  throw new Error(
    `machine returned neither a transition nor a no-change note for ${event.type} in ${status}`,
  );
}

/** Which transition the machine takes, and the guards it tried first. */
export interface ChosenTransition {
  transition: GraphTransition | null;
  /** Guards evaluated before the chosen transition, all false. */
  failedGuards: string[];
}

/** The transition `machine` takes for `event` in `status` with `context` (null: none at all). */
export function chooseTransition(
  machine: AnyStateMachine,
  graph: MachineGraph,
  status: string,
  context: JobContext,
  event: JobEvent,
): ChosenTransition {
  const [chosen] = machine.getTransitionData(machine.resolveState({ value: status, context }), event);
  const list = candidates(graph, status, event.type);
  if (!chosen) return { transition: null, failedGuards: list.flatMap((t) => (t.guard ? [t.guard] : [])) };
  const source = chosen.source === machine.root ? null : chosen.source.key;
  const order = (chosen.source.transitions.get(event.type) ?? []).indexOf(chosen);
  const found = list.find((t) => t.source === source && t.order === order) ?? null;
  const failedGuards = found ? list.filter((t) => t.order < found.order && t.guard).map((t) => t.guard!) : [];
  return { transition: found, failedGuards };
}

/** One row of the table. */
export interface TableRow {
  state: string;
  event: JobEvent['type'];
  variant: string;
  /** The transition taken; `via: 'root'` when the state does not handle the event. */
  transition: GraphTransition | null;
  via: 'state' | 'root' | 'none';
  failedGuards: string[];
  to: string;
  decision: MachineOutcome['decision'];
  reason: string | null;
  effects: JobEffect[];
  /** Plain-words effect columns. */
  file: string;
  s3: string;
  log: string;
  level: string;
}

function fileColumn(effects: JobEffect[], whenNotCurrent: JobEffect[]): string {
  const next = effects.find((e) => e.type === 'createAttempt');
  if (next)
    return `QUEUED, pointing at the new job (attempt ${next.params.attempt}, pending, to ${next.params.targetService})`;
  const set = effects.find((e) => e.type === 'setFileStatus');
  if (!set) return '—';
  const code = set.params.errorCode ? ` (error_code ${set.params.errorCode})` : '';
  const conditional = whenNotCurrent.some((e) => e.type === 'setFileStatus')
    ? ''
    : ", if still this job's file";
  return `${set.params.status}${code}${conditional}`;
}

function s3Column(effects: JobEffect[], withoutObject: JobEffect[] | null): string {
  if (!effects.some((e) => e.type === 'registerResultObject')) return '—';
  const conditional =
    withoutObject && !withoutObject.some((e) => e.type === 'registerResultObject')
      ? ', when the envelope names one'
      : '';
  return `result object registered${conditional}`;
}

function logColumn(effects: JobEffect[]): string {
  const rec = effects.find((e) => e.type === 'recordTransition');
  if (!rec) return '—';
  const detail = Object.keys(rec.params.detail);
  return `appended${rec.params.msgId !== null ? ' with msg id' : ''}${detail.length ? ` (detail: ${detail.join(', ')})` : ''}`;
}

/**
 * Every (state × event variant) row of `machine`, states in definition order, events in
 * `JOB_EVENT_TYPES` order. Every (state, event type) pair has at least one row.
 */
export function buildStateEventTable(machine: AnyStateMachine = recognitionJobMachine): TableRow[] {
  const graph = readMachineGraph(machine);
  const rows: TableRow[] = [];
  for (const state of graph.states) {
    for (const v of eventVariants()) {
      // A state of a changed machine that the samples do not name starts from the fresh job.
      const context = contextIn(state.name as JobStatus, v.context);
      const outcome = decideOn(machine, state.name, context, v.event);
      const chosen = chooseTransition(machine, graph, state.name, context, v.event);
      const notCurrent = decideOn(machine, state.name, { ...context, fileIsCurrent: false }, v.event);
      const withoutObject =
        v.event.type === 'ENVELOPE_RESULT' && v.event.resultS3
          ? decideOn(machine, state.name, context, { ...v.event, resultS3: undefined }).effects
          : null;
      rows.push({
        state: state.name,
        event: v.type,
        variant: v.label,
        transition: chosen.transition,
        via: chosen.transition === null ? 'none' : chosen.transition.source === null ? 'root' : 'state',
        failedGuards: chosen.failedGuards,
        to: outcome.to,
        decision: outcome.decision,
        reason: outcome.reason,
        effects: outcome.effects,
        file: fileColumn(outcome.effects, notCurrent.effects),
        s3: s3Column(outcome.effects, withoutObject),
        log: logColumn(outcome.effects),
        level: DECISION_LOG_LEVEL[outcome.decision],
      });
    }
  }
  return rows;
}
