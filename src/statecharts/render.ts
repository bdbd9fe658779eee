/**
 * Renderers of the machine graph the product draws: Graphviz DOT and its SVG (Graphviz compiled to
 * WebAssembly: deterministic, no browser, no network, no system package) for the daemon's live
 * page, and the machine config the inspector shows. Pure but for the WASM instance, which is
 * cached. The committed files' own renderers (Mermaid, the Markdown page, the Stately Studio file)
 * build on these in `workshop/statecharts/renderFiles.ts`.
 */
import { instance, type Viz } from '@viz-js/viz';
import { NEXT_ATTEMPT_ACTION } from '../../machines/index.js';
import type { ActionRef, GraphState, GraphTransition, MachineGraph } from './machineGraph.js';
import { graphEvents } from './machineGraph.js';

/** A transition drawn in the diagrams: it changes the status, or records a transition in place. */
function isDrawn(t: GraphTransition): boolean {
  if (t.target !== null) return true;
  // A targetless transition that only notes "nothing changed" is not a move; one that records is
  // (the publish retry: the job stays pending but the attempt is logged).
  return !t.actions.every((a) => (typeof a === 'string' ? a : a.type) === 'noteNoChange');
}

/** A transition as drawn: from the state it leaves to the state it reaches (itself when targetless). */
export type DrawnEdge = GraphTransition & { from: string; to: string };

/** The drawn edges: state transitions, and root transitions expanded to the states they reach. */
export function drawnEdges(graph: MachineGraph): DrawnEdge[] {
  const out: DrawnEdge[] = [];
  for (const state of graph.states) {
    for (const event of graphEvents(graph)) {
      const own = graph.transitions.filter((t) => t.source === state.name && t.event === event);
      const list =
        own.length > 0 ? own : graph.transitions.filter((t) => t.source === null && t.event === event);
      for (const t of list) if (isDrawn(t)) out.push({ ...t, from: state.name, to: t.target ?? state.name });
    }
  }
  return out;
}

/**
 * Where a retry's next attempt starts: from each status whose transition starts one (its actions
 * include the machine's {@link NEXT_ATTEMPT_ACTION}) to the initial status. No job moves along it:
 * the failed job stays, a new job (attempt + 1) begins there. Drawn dashed.
 */
export interface NextAttemptEdge {
  from: string;
  to: string;
  event: string;
  description: string;
}

/** The {@link NextAttemptEdge}s of the graph, in state order. */
export function nextAttemptEdges(graph: MachineGraph): NextAttemptEdge[] {
  return drawnEdges(graph)
    .filter((e) => e.actions.some((a) => (typeof a === 'string' ? a : a.type) === NEXT_ATTEMPT_ACTION))
    .map((e) => ({
      from: e.from,
      to: graph.initial,
      event: e.event,
      description: `${e.event}: a new job for the same file, attempt + 1, starts in ${graph.initial}; the ${e.from} job stays ${e.from}`,
    }));
}

/** The DOT lines of the next-attempt edges: dashed, not ranking the layout. */
export function nextAttemptDot(graph: MachineGraph): string[] {
  return nextAttemptEdges(graph).map(
    (e) =>
      `  ${q(e.from)} -> ${q(e.to)} [id=${q(`next-attempt-${e.from}`)}, style=dashed, color="#3d5a80", fontcolor="#3d5a80", constraint=false, label=${q(`${e.event}\nnew job, attempt + 1`)}, tooltip=${q(e.description)}];`,
  );
}

/** `[guard]`; an unguarded transition tried after guarded ones reads `[else]` (UML). */
export function guardLabel(t: GraphTransition): string | null {
  return t.guard ? t.guard : t.order > 0 ? 'else' : null;
}

// ---------------------------------------------------------------------------------------------
// Graphviz
// ---------------------------------------------------------------------------------------------

/** Live numbers to draw on the diagram (the live page); absent for the committed SVG. */
export interface ChartCounts {
  /** Jobs now in each status. */
  states: Record<string, number>;
  /** Applied transitions by `from|to|event`. */
  edges: Record<string, number>;
}

export function edgeKey(from: string, to: string, event: string): string {
  return `${from}|${to}|${event}`;
}

/** A DOT string literal. */
export function q(text: string): string {
  return `"${text.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`;
}

/** The opening lines of a diagram: graph, node and edge defaults, the start point. */
export function dotHeader(graph: MachineGraph, o: { compound?: boolean } = {}): string[] {
  const compound = o.compound ? ', compound=true' : '';
  return [
    `digraph ${q(graph.id)} {`,
    `  graph [rankdir=LR, fontname="Helvetica", fontsize=11, nodesep=0.5, ranksep=0.9, bgcolor="white"${compound}];`,
    '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", color="#3d5a80", fontname="Helvetica", fontsize=12];',
    '  edge [color="#555555", fontname="Helvetica", fontsize=9];',
    '  "__start" [shape=point, width=0.15, label="", fillcolor="black"];',
  ];
}

/** A state's node; with `count`, its label carries the number of jobs in it. */
export function stateNode(s: GraphState, count?: number): string {
  const n = count === undefined ? '' : `\n${count} job${count === 1 ? '' : 's'}`;
  const final = s.final ? ', peripheries=2, fillcolor="#f3f3f3"' : '';
  return `  ${q(s.name)} [id=${q(`state-${s.name}`)}, label=${q(s.name + n)}, tooltip=${q(s.description)}${final}];`;
}

/** The diagram in DOT; with `counts`, node and edge labels carry the live numbers. */
export function toDot(graph: MachineGraph, { counts }: { counts?: ChartCounts } = {}): string {
  const lines = dotHeader(graph);
  for (const s of graph.states) lines.push(stateNode(s, counts ? (counts.states[s.name] ?? 0) : undefined));
  lines.push(`  "__start" -> ${q(graph.initial)};`);
  for (const e of drawnEdges(graph)) {
    const c = counts ? `\n× ${counts.edges[edgeKey(e.from, e.to, e.event)] ?? 0}` : '';
    const g = guardLabel(e);
    const label = (g ? `${e.event}\n[${g}]` : e.event) + c;
    const id = `edge-${e.from}-${e.to}-${e.event}`;
    lines.push(`  ${q(e.from)} -> ${q(e.to)} [id=${q(id)}, label=${q(label)}, tooltip=${q(e.description)}];`);
  }
  lines.push(...nextAttemptDot(graph));
  lines.push('}');
  return lines.join('\n') + '\n';
}

let viz: Promise<Viz> | undefined;

/** Render DOT to SVG with Graphviz (WASM). Throws when Graphviz reports an error. */
export async function renderSvg(dot: string): Promise<string> {
  viz ??= instance();
  return (await viz).renderString(dot, { format: 'svg', engine: 'dot' });
}

// ---------------------------------------------------------------------------------------------
// Stately Studio
// ---------------------------------------------------------------------------------------------

/** A JSON value. */
export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

function transitionConfig(t: GraphTransition, fromRoot: boolean): Json {
  const out: Record<string, Json> = {};
  if (t.target !== null) out['target'] = fromRoot ? `.${t.target}` : t.target;
  if (t.guard) out['guard'] = t.guard;
  if (t.actions.length) out['actions'] = t.actions.map((a: ActionRef) => a as Json);
  if (t.description) out['description'] = t.description;
  return out;
}

function onConfig(list: GraphTransition[], fromRoot: boolean): Json {
  const on: Record<string, Json> = {};
  for (const event of [...new Set(list.map((t) => t.event))]) {
    const ts = list.filter((t) => t.event === event).sort((a, b) => a.order - b.order);
    on[event] =
      ts.length === 1 ? transitionConfig(ts[0]!, fromRoot) : ts.map((t) => transitionConfig(t, fromRoot));
  }
  return on;
}

/** The machine config Stately Studio and the inspector see: states, events, targets, guards, descriptions. */
export function statelyConfig(graph: MachineGraph): Record<string, Json> {
  const states: Record<string, Json> = {};
  for (const s of graph.states) {
    const node: Record<string, Json> = {};
    if (s.description) node['description'] = s.description;
    if (s.tags.length) node['tags'] = s.tags;
    const own = graph.transitions.filter((t) => t.source === s.name);
    if (own.length) node['on'] = onConfig(own, false);
    states[s.name] = node;
  }
  const root = graph.transitions.filter((t) => t.source === null);
  return {
    id: graph.id,
    ...(graph.description ? { description: graph.description } : {}),
    initial: graph.initial,
    ...(root.length ? { on: onConfig(root, true) } : {}),
    states,
  };
}
