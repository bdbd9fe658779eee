/**
 * The lifecycle machine read as a graph: its states and every transition of its definition, in
 * definition order. `visualizations/`, the database's legal edges and the live page derive from it.
 * Pure. *Root* transitions are the machine-level `on` handlers; an *edge* is a status change
 * `from → to` (a transition with a target other than its own state).
 */
import type { AnyStateMachine, AnyStateNode } from 'xstate';
import { recognitionJobMachine } from '../../machines/index.js';

/** An action as the definition names it: a name, or a name with parameters. */
export type ActionRef = string | { type: string; params?: unknown };

/** One transition of the definition. */
export interface GraphTransition {
  /** The state that declares it, or `null` for the machine-level (root) handlers. */
  source: string | null;
  event: string;
  /** The guard's name; `null` when the transition is unguarded. */
  guard: string | null;
  /** The target state; `null` when the status stays (a targetless transition). */
  target: string | null;
  /** The transition's `description`: its guard and effect in plain words. */
  description: string;
  actions: ActionRef[];
  /** Position among the candidates for (source, event): xstate takes the first whose guard passes. */
  order: number;
}

export interface GraphState {
  name: string;
  description: string;
  tags: string[];
  /** Tagged `final`: the job never leaves it (a plain state so late events are still reported). */
  final: boolean;
}

export interface MachineGraph {
  id: string;
  description: string;
  initial: string;
  states: GraphState[];
  /** State transitions first (state by state), then the root fallbacks. */
  transitions: GraphTransition[];
}

/** A status change the machine can make. */
export interface LegalEdge {
  from: string;
  to: string;
}

function guardName(guard: unknown): string | null {
  if (guard === undefined || guard === null) return null;
  if (typeof guard === 'string') return guard;
  if (typeof guard === 'object' && 'type' in guard && typeof guard.type === 'string') return guard.type;
  // An inline guard function has no name a product owner could read: refuse it at generation time.
  throw new Error('the machine has an inline guard; name every guard in setup({ guards })');
}

function actionRef(action: unknown): ActionRef {
  if (typeof action === 'string') return action;
  if (typeof action === 'object' && action !== null && 'type' in action && typeof action.type === 'string') {
    return 'params' in action && action.params !== undefined
      ? { type: action.type, params: action.params }
      : { type: action.type };
  }
  throw new Error('the machine has an inline action; name every action in setup({ actions })');
}

function transitionsOf(node: AnyStateNode, source: string | null): GraphTransition[] {
  const out: GraphTransition[] = [];
  for (const [event, definitions] of node.transitions) {
    definitions.forEach((t, order) => {
      const targets = t.target ?? [];
      if (targets.length > 1)
        throw new Error(`transition ${source ?? '(root)'} ${event} has several targets`);
      const target = targets[0]?.key ?? null;
      out.push({
        source,
        event,
        guard: guardName(t.guard),
        target,
        description: t.description ?? '',
        actions: t.actions.map(actionRef),
        order,
      });
    });
  }
  return out;
}

/** Walk `machine` (the lifecycle machine by default). Throws on a shape this project does not use. */
export function readMachineGraph(machine: AnyStateMachine = recognitionJobMachine): MachineGraph {
  const root = machine.root;
  const states: GraphState[] = [];
  const transitions: GraphTransition[] = [];
  for (const [name, node] of Object.entries(root.states)) {
    if (Object.keys(node.states).length > 0)
      throw new Error(`state ${name} has child states; the export handles flat machines`);
    states.push({
      name,
      description: node.description ?? '',
      tags: [...node.tags],
      final: node.tags.includes('final'),
    });
    transitions.push(...transitionsOf(node, name));
  }
  transitions.push(...transitionsOf(root, null));
  const initial = root.initial?.target[0]?.key;
  if (!initial) throw new Error('the machine has no initial state');
  return { id: root.id, description: root.description ?? '', initial, states, transitions };
}

/** Every event type the graph names, in first-seen order. */
export function graphEvents(graph: MachineGraph): string[] {
  return [...new Set(graph.transitions.map((t) => t.event))];
}

/**
 * The candidate transitions of `event` in `state`, in the order xstate tries them: the state's own
 * when it handles the event, else the root fallbacks.
 */
export function candidates(graph: MachineGraph, state: string, event: string): GraphTransition[] {
  const own = graph.transitions.filter((t) => t.source === state && t.event === event);
  return own.length > 0 ? own : graph.transitions.filter((t) => t.source === null && t.event === event);
}

/**
 * Every status change the machine can make, sorted by (from, to). Targetless transitions and
 * self-targets keep the status, so they are not edges (the database trigger never sees them).
 */
export function legalEdges(machine: AnyStateMachine = recognitionJobMachine): LegalEdge[] {
  const graph = readMachineGraph(machine);
  const seen = new Map<string, LegalEdge>();
  for (const state of graph.states) {
    for (const event of graphEvents(graph)) {
      for (const t of candidates(graph, state.name, event)) {
        if (t.target !== null && t.target !== state.name)
          seen.set(`${state.name}\u0000${t.target}`, { from: state.name, to: t.target });
      }
    }
  }
  return [...seen.values()].sort((a, b) => (a.from === b.from ? cmp(a.to, b.to) : cmp(a.from, b.from)));
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
