/**
 * The live statechart: `GET /statechart` is the diagram with the number of jobs in each status and
 * the count of each applied transition, refreshed every few seconds; `GET /statechart.json` is the
 * same numbers. They are the HTTP figures from the database (src/http/figures.ts), so every replica
 * shows the same chart. Self-contained: the SVG is rendered server-side.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { redactUrl } from '../config.js';
import type { DbFigures } from '../db/figures.js';
import type { HttpFigures } from '../http/figures.js';
import type { RouteHandler } from '../http/server.js';
import { readMachineGraph, type MachineGraph } from './machineGraph.js';
import { drawnEdges, edgeKey, renderSvg, toDot, type ChartCounts } from './render.js';

/** How often the page refreshes its numbers. */
export const REFRESH_MS = 3_000;

/** What `/statechart.json` returns. */
export interface StatechartSnapshot {
  /** When the numbers were read (the database clock); the HTTP figures' read, not the request. */
  generatedAt: string;
  /** `exact: false`: the count is the planner's estimate (docs/monitoring.md). */
  states: Array<{ name: string; final: boolean; description: string; count: number; exact: boolean }>;
  transitions: Array<{ from: string; to: string; event: string; count: number; exact: boolean }>;
  svg: string;
}

/** The chart with the numbers of `figures` drawn on it. */
export async function statechartSnapshot(
  figures: DbFigures,
  { graph = readMachineGraph() }: { graph?: MachineGraph } = {},
): Promise<StatechartSnapshot> {
  const byStatus = new Map(figures.jobs.map((j) => [j.status as string, j]));
  const counts: ChartCounts = {
    states: Object.fromEntries(figures.jobs.map((j) => [j.status, j.count])),
    edges: Object.fromEntries(figures.transitions.map((t) => [edgeKey(t.from, t.to, t.event), t.count])),
  };
  return {
    generatedAt: figures.at.toISOString(),
    states: graph.states.map((s) => ({
      name: s.name,
      final: s.final,
      description: s.description,
      count: byStatus.get(s.name)?.count ?? 0,
      exact: byStatus.get(s.name)?.exact ?? true,
    })),
    transitions: figures.transitions,
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
        `<td class="count">${x.exact ? '' : '≈ '}${x.count}</td><td>${escapeHtml(x.description)}</td></tr>`,
    )
    .join('\n');
}

function transitionsTable(graph: MachineGraph, s: StatechartSnapshot): string {
  const counts = new Map(s.transitions.map((t) => [edgeKey(t.from, t.to, t.event), t]));
  return drawnEdges(graph)
    .map((e) => {
      const key = edgeKey(e.from, e.to, e.event);
      const t = counts.get(key);
      return (
        `<tr data-edge="${escapeHtml(key)}"><td>${escapeHtml(e.from)}</td><td>${escapeHtml(e.to)}</td>` +
        `<td>${escapeHtml(e.event)}</td><td class="count">${t && !t.exact ? '≈ ' : ''}${t?.count ?? 0}</td></tr>`
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
          if (cell) cell.textContent = (x.exact ? '' : '≈ ') + String(x.count);
        });
        var byEdge = {};
        s.transitions.forEach(function (t) { byEdge[t.from + '|' + t.to + '|' + t.event] = t; });
        document.querySelectorAll('tr[data-edge] td.count').forEach(function (cell) {
          var t = byEdge[cell.parentNode.getAttribute('data-edge')];
          cell.textContent = t ? (t.exact ? '' : '≈ ') + String(t.count) : '0';
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
 * The daemon's statechart pages, drawn from the HTTP figures (src/http/figures.ts): a request
 * never queries the database, and the chart is rendered once per read of the figures. Before the
 * first read succeeded the pages answer 503.
 */
export function createStatechartRoutes(deps: { figures: HttpFigures }): Record<string, RouteHandler> {
  const graph = readMachineGraph();
  // The page and the JSON, rendered once per read of the figures: a request only sends them.
  let drawn: { of: DbFigures; bodies: Promise<{ html: Buffer; json: Buffer }> } | undefined;
  const bodies = () => {
    const figures = deps.figures.current();
    if (!figures) return undefined;
    if (drawn?.of !== figures) {
      const rendered = statechartSnapshot(figures, { graph }).then((s) => ({
        html: Buffer.from(renderPage(graph, s)),
        json: Buffer.from(JSON.stringify(s) + '\n'),
      }));
      drawn = { of: figures, bodies: rendered };
    }
    return drawn.bodies;
  };
  const send = (res: ServerResponse, status: number, type: string, body: string | Buffer) => {
    res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' });
    res.end(body);
  };
  const answer = async (res: ServerResponse, kind: 'html' | 'json') => {
    const b = bodies();
    if (!b) {
      const why = deps.figures.lastError() ?? 'not read yet';
      return send(res, 503, 'text/plain', `the job counts are not available: ${redactUrl(why)}\n`);
    }
    const body = (await b)[kind];
    send(res, 200, kind === 'html' ? 'text/html; charset=utf-8' : 'application/json', body);
  };
  return {
    '/statechart': (_req: IncomingMessage, res: ServerResponse) => answer(res, 'html'),
    '/statechart.json': (_req: IncomingMessage, res: ServerResponse) => answer(res, 'json'),
  };
}
