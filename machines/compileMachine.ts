/**
 * A flat machine's transitions compiled from the machine into a table (state → event type →
 * candidates in xstate's order), whose evaluation runs the machine's own guards, `assign` and
 * `enqueueActions` and returns what `machine.transition()` returns. A machine outside the flat
 * subset is refused with the reason, and an event the table cannot take answers `undefined`; the
 * caller then asks `machine.transition()` (docs/development.md, "How to add an event").
 */
import {
  assign,
  cancel,
  emit,
  raise,
  sendParent,
  sendTo,
  spawnChild,
  stopChild,
  type AnyActorScope,
  type AnyMachineSnapshot,
  type AnyStateMachine,
  type AnyStateNode,
  type AnyTransitionDefinition,
  type EventObject,
  type MachineContext,
  type UnknownAction,
} from 'xstate';
import { evaluateGuard, type UnknownGuard } from 'xstate/guards';

/** An action as `machine.transition()` hands it to the actor scope's executor: its type and params. */
export interface ExecutedAction {
  type: string;
  params: unknown;
}

/** What taking one event makes: the next state, the next context, the actions, in order. */
export interface TransitionResult {
  value: string;
  context: MachineContext;
  actions: ExecutedAction[];
}

/** The outcome of compiling: the table's `transition`, or why the machine is left to xstate. */
export type CompiledMachine =
  | {
      path: 'compiled';
      /** Take `event` in state `value`; `undefined` when the table does not cover it. */
      transition(value: string, context: MachineContext, event: EventObject): TransitionResult | undefined;
    }
  | { path: 'xstate'; reason: string };

/** State features the table does not cover: a machine using one is refused. */
const UNCOVERED_FEATURES = ['entry', 'exit', 'always', 'after', 'invoke', 'onDone', 'route'] as const;

/** One candidate transition: its guard, the state it goes to (none: stays), its actions. */
interface Candidate {
  guard: UnknownGuard | undefined;
  target: string | undefined;
  actions: readonly UnknownAction[];
}

/** One state's row: its snapshot (what guards are evaluated against) and its candidates by event type. */
interface Row {
  snapshot: AnyMachineSnapshot;
  candidates: Map<string, Candidate[]>;
}

/** Thrown while taking an event that the table does not cover; `transition` then answers `undefined`. */
const UNCOVERED = Symbol('not covered by the compiled table');

/** The fields of xstate's built-in actions the table reads (`assign`'s and `enqueueActions`'s). */
interface BuiltinAction {
  type: string;
  resolve: (...args: unknown[]) => [unknown, unknown, UnknownAction[] | undefined];
  assignment?: unknown;
  collect?: (args: unknown, params: unknown) => void;
}

/** xstate's action creators an `enqueueActions` reaches through `enqueue.<name>(…)`. */
const ENQUEUE_HELPERS = { assign, cancel, emit, raise, sendParent, sendTo, spawnChild, stopChild } as Record<
  string,
  (...args: unknown[]) => UnknownAction
>;

type Implementation = ((...args: never[]) => unknown) | undefined;

/** Compile `machine`'s transitions, or say why not. `scope` gives actions their `self` and `system`. */
export function compileMachine(machine: AnyStateMachine, scope: AnyActorScope): CompiledMachine {
  const reason = refusal(machine);
  if (reason !== undefined) return { path: 'xstate', reason };

  const root: AnyStateNode = machine.root;
  const rows = new Map<string, Row>();
  for (const [key, state] of Object.entries<AnyStateNode>(root.states)) {
    const candidates = new Map<string, Candidate[]>();
    for (const eventType of new Set([...state.transitions.keys(), ...root.transitions.keys()])) {
      const own = state.transitions.get(eventType) ?? [];
      const inherited = root.transitions.get(eventType) ?? [];
      candidates.set(eventType, [...own, ...inherited].map(candidate));
    }
    // Guards get the job's context as an argument; the snapshot gives them the machine and the state.
    rows.set(key, { snapshot: machine.resolveState({ value: key, context: {} }), candidates });
  }

  /** The context an `assign` leaves: the current one with the assignment's fields over it. */
  function assigned(
    assignment: unknown,
    context: MachineContext,
    event: EventObject,
    params: unknown,
  ): MachineContext {
    const args = { context, event, spawn, self: scope.self, system: scope.system };
    let update: MachineContext;
    if (typeof assignment === 'function') {
      update = (assignment as Assigner)(args, params);
    } else {
      update = {};
      for (const [key, value] of Object.entries(assignment as MachineContext))
        update[key] = typeof value === 'function' ? (value as Assigner)(args, params) : value;
    }
    // What xstate's `Object.assign({}, context, update)` makes; a spread makes it faster.
    return { ...context, ...update };
  }

  /**
   * The queue of the `enqueueActions` being collected, and what its `check` evaluates against.
   * A decision is synchronous and a collect function returns before its actions run, so one
   * `enqueue` and one `check`, made here once, serve every call: xstate's own resolver makes a
   * function and ten closures for each.
   */
  let queue: UnknownAction[] = [];
  let checked: { context: MachineContext; event: EventObject; row: Row } | undefined;
  const enqueue = Object.assign(
    (action: UnknownAction) => {
      queue.push(action);
    },
    Object.fromEntries(
      Object.entries(ENQUEUE_HELPERS).map(([name, create]) => [
        name,
        (...args: unknown[]) => {
          queue.push(create(...args));
        },
      ]),
    ),
  );
  // Guards get the current context as an argument, as xstate's resolver gives them its snapshot's.
  const check = (guard: UnknownGuard) =>
    evaluateGuard(guard, checked!.context, checked!.event, checked!.row.snapshot);

  /** What an `enqueueActions` enqueues: its collect function run as xstate's resolver runs it. */
  function enqueued(
    action: BuiltinAction,
    context: MachineContext,
    event: EventObject,
    row: Row,
    params: unknown,
  ): readonly UnknownAction[] {
    if (action.collect === undefined) throw UNCOVERED;
    queue = [];
    checked = { context, event, row };
    action.collect({ context, event, enqueue, check, self: scope.self, system: scope.system }, params);
    return queue;
  }

  /** Run `actions` as xstate resolves them, from `context`; returns the context they leave. */
  function run(
    actions: readonly UnknownAction[],
    context: MachineContext,
    event: EventObject,
    row: Row,
    out: ExecutedAction[],
  ): MachineContext {
    let current = context;
    for (const action of actions) {
      const impl = implementation(machine, action);
      const params = paramsOf(action, current, event);
      if (!isBuiltin(impl)) {
        out.push({ type: actionType(action), params });
        continue;
      }
      if (impl.type === 'xstate.assign') {
        current = assigned(impl.assignment, current, event, params);
      } else if (impl.type === 'xstate.enqueueActions') {
        current = run(enqueued(impl, current, event, row, params), current, event, row, out);
      } else {
        throw UNCOVERED;
      }
    }
    return current;
  }

  return {
    path: 'compiled',
    transition(value, context, event) {
      const row = rows.get(value);
      if (row === undefined || event.type.startsWith('xstate.')) return undefined;
      try {
        for (const c of row.candidates.get(event.type) ?? []) {
          if (c.guard !== undefined && !evaluateGuard(c.guard, context, event, row.snapshot)) continue;
          const actions: ExecutedAction[] = [];
          const next = run(c.actions, context, event, row, actions);
          return { value: c.target ?? value, context: next, actions };
        }
        return { value, context, actions: [] };
      } catch {
        // Not covered, or a guard or an action failed: xstate takes the event, and throws as it throws.
        return undefined;
      }
    },
  };
}

/** Why the table cannot stand for `machine.transition()` on `machine`; `undefined` when it can. */
export function refusal(machine: AnyStateMachine): string | undefined {
  const root: AnyStateNode = machine.root;
  if (root.type !== 'compound') return `the root is ${root.type}, not a compound state`;
  const states: AnyStateNode[] = Object.values(root.states);
  for (const node of [root, ...states]) {
    if (node !== root && node.type !== 'atomic') return `state ${node.id} is ${node.type}, not atomic`;
    const config = node.config as Record<string, unknown>;
    const feature = UNCOVERED_FEATURES.find((f) => !isEmpty(config[f]));
    if (feature !== undefined) return `state ${node.id} has ${feature}`;
    for (const [eventType, transitions] of node.transitions) {
      if (eventType === '*' || eventType.endsWith('.*'))
        return `state ${node.id} has a wildcard transition (${eventType})`;
      for (const t of transitions) {
        const where = `a transition of ${node.id} on ${eventType}`;
        const target = t.target ?? [];
        if (target.length > 1 || (target[0] !== undefined && target[0].parent !== root))
          return `${where} targets something other than one state of the root`;
        const guardProblem = t.guard === undefined ? undefined : unresolvedGuard(machine, t.guard);
        if (guardProblem !== undefined) return `${where}: ${guardProblem}`;
        for (const action of t.actions) {
          const impl = implementation(machine, action);
          if (isBuiltin(impl) && impl.type !== 'xstate.assign' && impl.type !== 'xstate.enqueueActions')
            return `${where} has a ${impl.type} action`;
        }
      }
    }
  }
  return undefined;
}

/** A transition of the machine as the table keeps it. */
function candidate(t: AnyTransitionDefinition): Candidate {
  return { guard: t.guard, target: t.target?.[0]?.key, actions: t.actions };
}

/** Whether a state's config leaves a feature out (absent, or an empty list). */
function isEmpty(value: unknown): boolean {
  return value === undefined || (Array.isArray(value) && value.length === 0);
}

/** Why `guard` would not evaluate; `undefined` when it resolves, as `evaluateGuard` resolves it. */
function unresolvedGuard(machine: AnyStateMachine, guard: unknown): string | undefined {
  const name = typeof guard === 'string' ? guard : (guard as { type?: string }).type;
  const impl: unknown =
    typeof guard === 'function' ? guard : (machine.implementations.guards as Record<string, unknown>)[name!];
  if (impl === undefined) return `guard '${name}' is not implemented`;
  if (typeof impl !== 'function') return unresolvedGuard(machine, impl);
  if (!('check' in impl)) return undefined;
  const nested = (impl as { guards?: unknown }).guards;
  if (!Array.isArray(nested)) return `guard '${impl.name}' is a built-in other than and, or, not`;
  return nested.map((g) => unresolvedGuard(machine, g)).find((p) => p !== undefined);
}

/** The function `action` names, as xstate resolves it: itself when inline, else the machine's. */
function implementation(machine: AnyStateMachine, action: UnknownAction): Implementation {
  if (typeof action === 'function') return action as Implementation;
  const name = typeof action === 'string' ? action : action.type;
  return (machine.implementations.actions as Record<string, Implementation>)[name];
}

/** Whether xstate resolves the action itself (assign, raise…) rather than handing it to the executor. */
function isBuiltin(impl: Implementation): impl is Implementation & BuiltinAction {
  return impl !== undefined && 'resolve' in impl;
}

/** The action's type as the executor sees it. */
function actionType(action: UnknownAction): string {
  if (typeof action === 'string') return action;
  if (typeof action === 'function') return action.name || '(anonymous)';
  return action.type;
}

/** The action's params: given, or computed from the context and event at that point. */
function paramsOf(action: UnknownAction, context: MachineContext, event: EventObject): unknown {
  if (typeof action !== 'object' || !('params' in action)) return undefined;
  const { params } = action as { params: unknown };
  return typeof params === 'function' ? params({ context, event }) : params;
}

/** Spawning from an `assign` is left to xstate. */
function spawn(): never {
  throw UNCOVERED;
}

type Assigner = (args: unknown, params: unknown) => MachineContext;
