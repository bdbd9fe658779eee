/**
 * The console's static assets: its stylesheet and client script (constants), and uPlot's script
 * and stylesheet, served from the installed package. Nothing is fetched from elsewhere: the pages
 * work on a host without internet access.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

/** An asset as served: its type and bytes. */
export interface Asset {
  type: string;
  body: Buffer;
}

/** The stylesheet: readable on a 1366×768 laptop, contrast of at least 4.5:1, a visible focus. */
export const STYLES = `
:root { --fg: #1b1b1b; --muted: #4a4a4a; --bg: #ffffff; --line: #c4c4c4; --band: #f2f4f7;
  --link: #0a4a8f; --accent: #0a4a8f; --bad: #a4000f; --good: #135e21; --warn: #7a4b00; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
a { color: var(--link); }
a:focus-visible, button:focus-visible, input:focus-visible, select:focus-visible, textarea:focus-visible, [tabindex]:focus-visible {
  outline: 3px solid #e8a400; outline-offset: 2px; }
.skip { position: absolute; left: -999px; } .skip:focus { left: 0.5rem; top: 0.5rem; background: #fff; padding: 0.3rem; z-index: 2; }
header.top { display: flex; flex-wrap: wrap; gap: 0.5rem 1.5rem; align-items: center; padding: 0.5rem 1.25rem; background: #14253d; color: #fff; }
header.top a { color: #fff; }
header.top .brand { font-weight: 700; }
header.top nav ul { display: flex; gap: 1rem; list-style: none; margin: 0; padding: 0; }
header.top nav a[aria-current="page"] { font-weight: 700; text-decoration-thickness: 3px; }
header.top .who { margin-left: auto; display: flex; gap: 0.75rem; align-items: center; }
header.top .who button { background: none; border: 1px solid #fff; color: #fff; padding: 0.1rem 0.5rem; cursor: pointer; }
main { padding: 1rem 1.25rem 2rem; max-width: 1340px; }
h1 { font-size: 1.4rem; margin: 0.25rem 0 0.75rem; }
h2 { font-size: 1.1rem; margin: 1.5rem 0 0.5rem; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 0 1.5rem; }
table { border-collapse: collapse; margin: 0.25rem 0 0.75rem; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid var(--line); padding: 0.25rem 0.6rem; text-align: left; vertical-align: top; }
thead th { background: var(--band); }
td.n, th.n { text-align: right; }
code, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 0.88em; }
.muted { color: var(--muted); }
.status-error, .status-timeout, .status-dlq { color: var(--bad); font-weight: 600; }
.status-done { color: var(--good); font-weight: 600; }
.status-needs_check { color: var(--warn); font-weight: 600; }
form.filters { display: flex; flex-wrap: wrap; gap: 0.5rem 1rem; align-items: flex-end; margin-bottom: 0.75rem; }
form.filters label, form.action label { display: flex; flex-direction: column; font-size: 0.9rem; gap: 0.15rem; }
input, select, textarea, button { font: inherit; }
input, select, textarea { border: 1px solid #6b6b6b; padding: 0.2rem 0.35rem; background: #fff; color: var(--fg); }
button { border: 1px solid var(--accent); background: var(--accent); color: #fff; padding: 0.25rem 0.8rem; cursor: pointer; }
button.secondary { background: #fff; color: var(--accent); }
button.danger { background: var(--bad); border-color: var(--bad); }
form.action { border: 1px solid var(--line); padding: 0.6rem 0.8rem; margin: 0.5rem 0 1rem; display: flex; flex-wrap: wrap; gap: 0.5rem 1rem; align-items: flex-end; max-width: 60rem; }
form.action textarea { min-width: 22rem; min-height: 2.4rem; }
.notice { border-left: 5px solid var(--accent); background: var(--band); padding: 0.5rem 0.8rem; margin: 0 0 1rem; }
.notice.bad { border-color: var(--bad); }
dl.row { display: grid; grid-template-columns: max-content 1fr; gap: 0.15rem 1rem; margin: 0.25rem 0 1rem; }
dl.row dt { font-weight: 600; }
dl.row dd { margin: 0; }
pre.preview { background: var(--band); border: 1px solid var(--line); padding: 0.5rem; max-height: 12rem; overflow: auto; white-space: pre-wrap; word-break: break-all; margin: 0.25rem 0; }
details summary { cursor: pointer; }
figure.chart { margin: 0.5rem 0 1rem; border: 1px solid var(--line); padding: 0.5rem; overflow: auto; }
figure.chart svg { max-width: 100%; height: auto; }
figure.chart g.node.current path, figure.chart g.node.current polygon { fill: #ffe2c2; stroke: #c25400; stroke-width: 4; }
figure.chart g.edge.taken path { stroke: #c25400; stroke-width: 3; }
figure.chart g.edge.taken polygon { fill: #c25400; stroke: #c25400; }
.stepper { display: flex; gap: 0.75rem; align-items: center; margin: 0.25rem 0; }
ol.timeline li[aria-current="step"] { background: #ffe2c2; }
.pager { margin: 0.5rem 0; }
#quarantine-chart { min-height: 220px; }
`;

/**
 * The client script: the quarantine chart of the overview (uPlot, from the figures in its
 * element's `data-series`) and the job page's path on the statechart (Previous/Next and the arrow
 * keys step through the job's transitions, highlighting the state reached and the edge taken).
 * Pages work without it, but for the chart.
 */
export const CLIENT_SCRIPT = `
(function () {
  'use strict';
  var chart = document.getElementById('quarantine-chart');
  if (chart && window.uPlot) {
    var s = JSON.parse(chart.getAttribute('data-series'));
    var width = Math.max(320, Math.min(chart.clientWidth || 640, 900));
    new window.uPlot({
      width: width, height: 200,
      scales: { x: { time: true } },
      axes: [{ stroke: '#1b1b1b' }, { stroke: '#1b1b1b', label: 'messages' }],
      series: [{}, { label: 'quarantined per hour', stroke: '#a4000f', fill: 'rgba(164,0,15,0.12)', width: 2,
                     paths: window.uPlot.paths && window.uPlot.paths.bars ? window.uPlot.paths.bars({ size: [0.8] }) : undefined }]
    }, [s.hours, s.counts], chart);
  }
  var path = document.getElementById('path');
  if (!path) return;
  var steps = JSON.parse(path.getAttribute('data-steps'));
  var figure = document.getElementById('statechart');
  var label = document.getElementById('step-label');
  var prev = document.getElementById('step-prev');
  var next = document.getElementById('step-next');
  var items = document.querySelectorAll('ol.timeline li[data-step]');
  var at = steps.length - 1;
  function find(id) { return figure.querySelector('g[id="' + id.replace(/"/g, '') + '"]'); }
  function show() {
    figure.querySelectorAll('.current, .taken').forEach(function (g) { g.classList.remove('current', 'taken'); });
    var step = steps[at];
    var state = find('state-' + step.state);
    if (state) state.classList.add('current');
    if (step.edge) { var edge = find(step.edge); if (edge) edge.classList.add('taken'); }
    items.forEach(function (li) {
      if (Number(li.getAttribute('data-step')) === at) li.setAttribute('aria-current', 'step');
      else li.removeAttribute('aria-current');
    });
    label.textContent = 'Step ' + at + ' of ' + (steps.length - 1) + ': ' + step.text;
    prev.disabled = at === 0;
    next.disabled = at === steps.length - 1;
  }
  prev.addEventListener('click', function () { if (at > 0) { at--; show(); } });
  next.addEventListener('click', function () { if (at < steps.length - 1) { at++; show(); } });
  figure.addEventListener('keydown', function (e) {
    if (e.key === 'ArrowLeft' && at > 0) { at--; show(); e.preventDefault(); }
    if (e.key === 'ArrowRight' && at < steps.length - 1) { at++; show(); e.preventDefault(); }
    if (e.key === 'Home') { at = 0; show(); e.preventDefault(); }
    if (e.key === 'End') { at = steps.length - 1; show(); e.preventDefault(); }
  });
  path.hidden = false;
  show();
})();
`;

/** The assets by path, read once. */
export function loadAssets(): Record<string, Asset> {
  const file = (path: string, type: string): Asset => ({ type, body: readFileSync(path) });
  return {
    '/assets/console.css': { type: 'text/css; charset=utf-8', body: Buffer.from(STYLES) },
    '/assets/console.js': { type: 'text/javascript; charset=utf-8', body: Buffer.from(CLIENT_SCRIPT) },
    '/assets/uPlot.min.css': file(require.resolve('uplot/dist/uPlot.min.css'), 'text/css; charset=utf-8'),
    '/assets/uPlot.iife.min.js': file(
      require.resolve('uplot/dist/uPlot.iife.min.js'),
      'text/javascript; charset=utf-8',
    ),
  };
}
