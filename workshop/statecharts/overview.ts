/**
 * The product owners' overview of the machine graph: the full chart with every *fan* (drawn edges
 * that share a source and an event and reach at least two other states) folded into one edge to a
 * *group* box of the states it reaches. Derived from the machine graph only. Pure but for the
 * Graphviz instance `renderSvg` caches.
 */
import type { MachineGraph } from '../../src/statecharts/machineGraph.js';
import {
  dotHeader,
  drawnEdges,
  guardLabel,
  nextAttemptDot,
  q,
  stateNode,
  type DrawnEdge,
} from '../../src/statecharts/render.js';

/** States drawn together as one box, in the graph's state order. */
export interface OverviewGroup {
  /** The box's Graphviz name (`cluster_` prefixed, as Graphviz requires for a drawn box). */
  id: string;
  states: string[];
}

/** One part of an overview edge's label: the drawn edge of the full chart it stands for. */
export interface OverviewPart {
  /** What the label shows for this edge: the status it reaches (fan) or its `[guard]`. */
  text: string;
  edge: DrawnEdge;
}

/** One edge of the overview. */
export interface OverviewEdge {
  from: string;
  /** The state it reaches; for a fan, the group it reaches (`group` is set). */
  to: string;
  event: string;
  /** Set when the edge stands for a fan: the group holding the states it reaches. */
  group: OverviewGroup | null;
  /** The drawn edges it stands for, in the order xstate tries them. */
  parts: OverviewPart[];
}

export interface Overview {
  graph: MachineGraph;
  groups: OverviewGroup[];
  edges: OverviewEdge[];
}

/** The edge's label: the event, then the statuses of a fan (`done | needs_check`) or the guard. */
export function overviewLabel(e: OverviewEdge): string {
  const texts = [...new Set(e.parts.map((p) => p.text).filter((t) => t !== ''))];
  return texts.length ? `${e.event}\n${texts.join(' | ')}` : e.event;
}

/** Fold the graph's drawn edges into the overview (see the file comment for the rule). */
export function buildOverview(graph: MachineGraph): Overview {
  const drawn = drawnEdges(graph);
  // 1. Bucket the drawn edges by (source, event), keeping first-seen order.
  const buckets = new Map<string, DrawnEdge[]>();
  for (const e of drawn) {
    const key = `${e.from}\u0000${e.event}`;
    const list = buckets.get(key);
    if (list) list.push(e);
    else buckets.set(key, [e]);
  }
  const fanTargets = (list: DrawnEdge[]): string[] => [
    ...new Set(list.filter((e) => e.to !== e.from).map((e) => e.to)),
  ];
  const isFan = (list: DrawnEdge[]) => fanTargets(list).length >= 2;

  // 2. Groups: the target sets of the fans, joined while two of them share a state.
  const sets: Array<Set<string>> = [];
  for (const list of buckets.values()) {
    if (!isFan(list)) continue;
    const joined = new Set(fanTargets(list));
    for (let i = sets.length - 1; i >= 0; i--) {
      if ([...sets[i]!].some((s) => joined.has(s))) {
        for (const s of sets[i]!) joined.add(s);
        sets.splice(i, 1);
      }
    }
    sets.push(joined);
  }
  const order = graph.states.map((s) => s.name);
  const groups: OverviewGroup[] = sets
    .map((set) => order.filter((name) => set.has(name)))
    .sort((a, b) => order.indexOf(a[0]!) - order.indexOf(b[0]!))
    .map((states) => ({ id: `cluster_${states.join('_')}`, states }));
  const groupOf = (state: string) => groups.find((g) => g.states.includes(state))!;

  // 3. One edge per fan into its group; every other drawn edge as it is.
  const edges: OverviewEdge[] = [];
  for (const list of buckets.values()) {
    let rest = list;
    if (isFan(list)) {
      const fan = list.filter((e) => e.to !== e.from);
      const group = groupOf(fan[0]!.to);
      edges.push({
        from: fan[0]!.from,
        to: group.id,
        event: fan[0]!.event,
        group,
        parts: fan.map((edge) => ({ text: edge.to, edge })),
      });
      // A fan's edge back to its own state (a retry) is no part of the bundle: it stays a loop.
      rest = list.filter((e) => e.to === e.from);
    }
    for (const edge of rest) {
      const g = guardLabel(edge);
      edges.push({
        from: edge.from,
        to: edge.to,
        event: edge.event,
        group: null,
        parts: [{ text: g ? `[${g}]` : '', edge }],
      });
    }
  }
  return { graph, groups, edges };
}

/**
 * The overview in DOT. A fan's edge ends at its group's border (`lhead`), aimed at the group's
 * middle state so the arrows into one group meet it side by side instead of crossing.
 */
export function overviewToDot(overview: Overview): string {
  const { graph, groups, edges } = overview;
  const lines = dotHeader(graph, { compound: true });
  const grouped = new Set(groups.flatMap((g) => g.states));
  for (const s of graph.states) if (!grouped.has(s.name)) lines.push(stateNode(s));
  for (const g of groups) {
    lines.push(
      `  subgraph ${q(g.id)} {`,
      '    graph [style="rounded,dashed", color="#3d5a80", bgcolor="#fafafa", margin=12, label=""];',
      // One column, top to bottom in the graph's state order (the order the labels list them):
      // with rankdir=LR, dot stacks a rank's flat edges bottom to top, so the chain runs backwards.
      ...g.states.map((name) => '  ' + stateNode(graph.states.find((s) => s.name === name)!)),
      `    { rank=same; ${[...g.states].reverse().map(q).join(' -> ')} [style=invis, minlen=0]; }`,
      '  }',
    );
  }
  lines.push(`  "__start" -> ${q(graph.initial)};`);
  for (const e of edges) {
    const tooltip = e.parts.map((p) => p.edge.description).join('\n');
    const id = `overview-edge-${e.from}-${e.group ? e.group.states.join('-') : e.to}-${e.event}`;
    const attrs = [`id=${q(id)}`, `label=${q(overviewLabel(e))}`, `tooltip=${q(tooltip)}`];
    let head = e.to;
    if (e.group) {
      head = e.group.states[Math.floor((e.group.states.length - 1) / 2)]!;
      attrs.push(`lhead=${q(e.group.id)}`);
    }
    lines.push(`  ${q(e.from)} -> ${q(head)} [${attrs.join(', ')}];`);
  }
  lines.push(...nextAttemptDot(graph));
  lines.push('}');
  return lines.join('\n') + '\n';
}
