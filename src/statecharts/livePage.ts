/**
 * The live statechart, served by the daemon for product owners: `GET /statechart` is the diagram
 * with the number of jobs now in each status and the count of each applied transition, refreshed
 * every few seconds; `GET /statechart.json` is the same numbers (and the re-rendered SVG) for the
 * page's refresh and for scripts.
 *
 * The numbers come from the database, not from this process's counters, so every replica of the
 * daemon shows the same chart and a restart loses nothing. The page is self-contained: the SVG is
 * rendered server-side by Graphviz (WASM), with no script or font from a CDN.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { sql } from 'kysely';
import type { Db } from '../db/database.js';
import type { RouteHandler } from '../http/server.js';
import type { Metrics } from '../metrics.js';
import { readMachineGraph, type MachineGraph } from './machineGraph.js';
import { drawnEdges, edgeKey, renderSvg, toDot, type ChartCounts } from './render.js';

/** How often the page refreshes its numbers. */
export const REFRESH_MS = 3_000;
/**
 * Numbers younger than this are served from memory: several open pages cost one pair of queries,
 * and counting a large transition table is never repeated faster than the page polls.
 */
const CACHE_MS = 1_000;

/** What `/statechart.json` returns. */
export interface StatechartSnapshot {
  generatedAt: string;
  states: Array<{ name: string; final: boolean; description: string; count: number }>;
  transitions: Array<{ from: string; to: string; event: string; count: number }>;
  svg: string;
}

async function loadCounts(db: Db): Promise<ChartCounts & { transitions: StatechartSnapshot['transitions'] }> {
  const [jobs, transitions] = await Promise.all([
    db.db
      .selectFrom('recognition_job')
      .select(['status', sql<string>`count(*)`.as('count')])
      .groupBy('status')
      .execute(),
    db.db
      .selectFrom('recognition_job_transition')
      .select(['from_status', 'to_status', 'event', sql<string>`count(*)`.as('count')])
      .groupBy(['from_status', 'to_status', 'event'])
      .orderBy('from_status')
      .orderBy('to_status')
      .orderBy('event')
      .execute(),
  ]);
  const states: Record<string, number> = {};
  for (const r of jobs) states[r.status] = Number(r.count);
  const edges: Record<string, number> = {};
  for (const r of transitions) edges[edgeKey(r.from_status, r.to_status, r.event)] = Number(r.count);
  return {
    states,
    edges,
    transitions: transitions.map((r) => ({
      from: r.from_status,
      to: r.to_status,
      event: r.event,
      count: Number(r.count),
    })),
  };
}

/** Read the numbers and render the chart with them. */
export async function loadStatechartSnapshot(
  db: Db,
  { graph = readMachineGraph() }: { graph?: MachineGraph } = {},
): Promise<StatechartSnapshot> {
  const counts = await loadCounts(db);
  return {
    generatedAt: new Date().toISOString(),
    states: graph.states.map((s) => ({
      name: s.name,
      final: s.final,
      description: s.description,
      count: counts.states[s.name] ?? 0,
    })),
    transitions: counts.transitions,
    svg: await renderSvg(toDot(graph, { counts })),
  };
}

function escapeHtml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** The `<svg>` element only (no XML prolog or DOCTYPE), for inlining in HTML. */
function inlineSvg(svg: string): string {
  const at = svg.indexOf('<svg');
  return at >= 0 ? svg.slice(at) : svg;
}

function statesTable(s: StatechartSnapshot): string {
  return s.states
    .map(
      (x) =>
        `<tr data-state="${escapeHtml(x.name)}"><th scope="row">${escapeHtml(x.name)}${x.final ? ' <small>(final)</small>' : ''}</th>` +
        `<td class="count">${x.count}</td><td>${escapeHtml(x.description)}</td></tr>`,
    )
    .join('\n');
}

function transitionsTable(graph: MachineGraph, s: StatechartSnapshot): string {
  const counts = new Map(s.transitions.map((t) => [edgeKey(t.from, t.to, t.event), t.count]));
  return drawnEdges(graph)
    .map((e) => {
      const key = edgeKey(e.from, e.to, e.event);
      return (
        `<tr data-edge="${escapeHtml(key)}"><td>${escapeHtml(e.from)}</td><td>${escapeHtml(e.to)}</td>` +
        `<td>${escapeHtml(e.event)}</td><td class="count">${counts.get(key) ?? 0}</td></tr>`
      );
    })
    .join('\n');
}

/** The page: everything inline; a small script swaps in fresh numbers every {@link REFRESH_MS}. */
export function renderPage(graph: MachineGraph, s: StatechartSnapshot): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>recognition-core — live statechart</title>
<noscript><meta http-equiv="refresh" content="${Math.round(REFRESH_MS / 1000)}"></noscript>
<style>
  body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; }
  #chart svg { max-width: 100%; height: auto; }
  table { border-collapse: collapse; margin: 1rem 0; }
  th, td { border: 1px solid #ccc; padding: 0.25rem 0.6rem; text-align: left; vertical-align: top; }
  td.count { text-align: right; font-variant-numeric: tabular-nums; font-weight: bold; }
  #status { color: #666; font-size: 0.9em; }
  #status.stale { color: #b00; }
</style>
</head>
<body>
<h1>Recognition jobs, live</h1>
<p id="status" data-generated-at="${escapeHtml(s.generatedAt)}">Counts at ${escapeHtml(s.generatedAt)}; refreshed every ${REFRESH_MS / 1000} s.</p>
<div id="chart">${inlineSvg(s.svg)}</div>
<h2>Jobs now in each status</h2>
<table id="states"><thead><tr><th>Status</th><th>Jobs</th><th>Meaning</th></tr></thead>
<tbody>
${statesTable(s)}
</tbody></table>
<h2>Transitions applied so far</h2>
<table id="transitions"><thead><tr><th>From</th><th>To</th><th>Event</th><th>Count</th></tr></thead>
<tbody>
${transitionsTable(graph, s)}
</tbody></table>
<script>
(function () {
  var status = document.getElementById('status');
  function refresh() {
    fetch('statechart.json', { cache: 'no-store' })
      .then(function (r) { if (!r.ok) throw new Error('HTTP ' + r.status); return r.json(); })
      .then(function (s) {
        document.getElementById('chart').innerHTML = s.svg.slice(s.svg.indexOf('<svg'));
        s.states.forEach(function (x) {
          var cell = document.querySelector('tr[data-state="' + x.name + '"] td.count');
          if (cell) cell.textContent = String(x.count);
        });
        var byEdge = {};
        s.transitions.forEach(function (t) { byEdge[t.from + '|' + t.to + '|' + t.event] = t.count; });
        document.querySelectorAll('tr[data-edge] td.count').forEach(function (cell) {
          cell.textContent = String(byEdge[cell.parentNode.getAttribute('data-edge')] || 0);
        });
        status.className = '';
        status.setAttribute('data-generated-at', s.generatedAt);
        status.textContent = 'Counts at ' + s.generatedAt + '; refreshed every ${REFRESH_MS / 1000} s.';
      })
      .catch(function (err) {
        status.className = 'stale';
        status.textContent = 'Refresh failed (' + err.message + '); showing the last counts.';
      });
  }
  setInterval(refresh, ${REFRESH_MS});
})();
</script>
</body>
</html>
`;
}

/**
 * The daemon's statechart pages. `metrics` is accepted to fit the daemon's `routes` hook; the
 * numbers come from the database (see the file comment).
 */
export function createStatechartRoutes(deps: { db: Db; metrics?: Metrics }): Record<string, RouteHandler> {
  const graph = readMachineGraph();
  let cached: { at: number; value: Promise<StatechartSnapshot> } | undefined;
  const snapshot = (): Promise<StatechartSnapshot> => {
    const now = Date.now();
    if (!cached || now - cached.at > CACHE_MS) {
      const value = loadStatechartSnapshot(deps.db, { graph });
      cached = { at: now, value };
      // A failed read is not cached: the next request tries again.
      value.catch(() => {
        if (cached?.value === value) cached = undefined;
      });
    }
    return cached.value;
  };
  const send = (res: ServerResponse, type: string, body: string) => {
    res.writeHead(200, { 'content-type': type, 'cache-control': 'no-store' });
    res.end(body);
  };
  return {
    '/statechart': async (_req: IncomingMessage, res: ServerResponse) => {
      send(res, 'text/html; charset=utf-8', renderPage(graph, await snapshot()));
    },
    '/statechart.json': async (_req: IncomingMessage, res: ServerResponse) => {
      send(res, 'application/json', JSON.stringify(await snapshot()) + '\n');
    },
  };
}
