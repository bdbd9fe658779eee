/**
 * The console's pages as eta templates: one layout, a few partials, a template per view. Every
 * value is escaped (eta's autoEscape) but the statechart's SVG, which the server renders from the
 * machine. A form that acts is rendered only for an identity allowed that action, and carries its
 * CSRF token; the pages run no inline script (the client script is an asset).
 */
import { Eta } from 'eta';

const LAYOUT = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title><%= it.title %> · recognition-core console</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/assets/console.css">
<% if (it.chart) { %><link rel="stylesheet" href="/assets/uPlot.min.css"><% } %>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header class="top">
  <span class="brand">recognition-core console</span>
  <nav aria-label="Views"><ul>
  <% for (const [href, label] of it.nav) { %>
    <li><a href="<%= href %>"<% if (href === it.section) { %> aria-current="page"<% } %>><%= label %></a></li>
  <% } %>
  </ul></nav>
  <div class="who">
  <% if (it.identity) { %>
    <span>Signed in as <strong><%= it.identity.name %></strong></span>
    <% if (it.identity.via === 'token') { %>
    <form method="post" action="/logout"><input type="hidden" name="csrf" value="<%= it.identity.csrf %>"><button type="submit">Sign out</button></form>
    <% } %>
  <% } else { %>
    <span>Read-only</span><a href="/login">Sign in</a>
  <% } %>
  </div>
</header>
<main id="main">
<%~ it.body %>
</main>
<% if (it.chart) { %><script src="/assets/uPlot.iife.min.js"></script><% } %>
<script src="/assets/console.js"></script>
</body>
</html>
`;

/** The reason field and CSRF token every action form carries. */
const ACTION_FIELDS = `<input type="hidden" name="csrf" value="<%= it.csrf %>">
<label>Reason (recorded in the audit log)
  <textarea name="note" required maxlength="1000"></textarea>
</label>`;

const JOBS_TABLE = `<table>
<thead><tr><th scope="col">Job</th><th scope="col">File</th><th scope="col" class="n">Attempt</th><th scope="col">Service</th><th scope="col">Status</th><th scope="col">Error</th><th scope="col">Created</th><th scope="col">Finished</th></tr></thead>
<tbody>
<% for (const j of it.jobs) { %>
<tr>
  <td><a class="mono" href="/jobs/<%= j.id %>"><%= j.id %></a></td>
  <td class="mono"><%= j.file_id %></td>
  <td class="n"><%= j.attempt %></td>
  <td><%= j.target_service %></td>
  <td class="status-<%= j.status %>"><%= j.status %></td>
  <td><%= j.error_code ?? '' %></td>
  <td><%= it.time(j.created_at) %></td>
  <td><%= it.time(j.finished_at) %></td>
</tr>
<% } %>
<% if (it.jobs.length === 0) { %><tr><td colspan="8" class="muted">No job matches.</td></tr><% } %>
</tbody>
</table>`;

const OVERVIEW = `<% layout('@layout') %>
<h1>Overview</h1>
<p class="muted">Figures at <%= it.time(it.f.at) %> (database clock).<% if (it.f.rollupBehindMs !== null) { %> Roll-up <%= Math.round(it.f.rollupBehindMs / 1000) %> s behind.<% } %></p>
<div class="grid">
<section aria-labelledby="open-h">
<h2 id="open-h">Open jobs now</h2>
<table>
<thead><tr><th scope="col">Service</th><% for (const s of it.openStatuses) { %><th scope="col" class="n"><%= s %></th><% } %></tr></thead>
<tbody>
<% for (const row of it.open) { %>
<tr><th scope="row"><a href="/jobs?service=<%= encodeURIComponent(row.service) %>"><%= row.service %></a></th>
<% for (const s of it.openStatuses) { %><td class="n"><%= row.counts[s] ?? 0 %></td><% } %></tr>
<% } %>
<% if (it.open.length === 0) { %><tr><td colspan="4" class="muted">No open job.</td></tr><% } %>
</tbody>
</table>
<h2 id="lag-h">Inbox lag</h2>
<% if (it.lag) { %>
<dl class="row"><dt>Waiting in core-inbox</dt><dd><%= it.lag.pending %></dd><dt>Delivered, not yet acked</dt><dd><%= it.lag.ackPending %></dd></dl>
<% } else { %><p class="muted">Not known: <%= it.lagError ?? 'this daemon runs no inbox' %>.</p><% } %>
</section>
<section aria-labelledby="finished-h">
<h2 id="finished-h">Finished</h2>
<table>
<thead><tr><th scope="col">Service</th><th scope="col">Status</th><th scope="col" class="n">Last hour</th><th scope="col" class="n">Last day</th></tr></thead>
<tbody>
<% for (const r of it.f.finished) { %>
<tr><td><%= r.service %></td><td class="status-<%= r.status %>"><a href="/jobs?service=<%= encodeURIComponent(r.service) %>&amp;status=<%= r.status %>"><%= r.status %></a></td><td class="n"><%= r.lastHour %></td><td class="n"><%= r.lastDay %></td></tr>
<% } %>
<% if (it.f.finished.length === 0) { %><tr><td colspan="4" class="muted">No job finished in the last day.</td></tr><% } %>
</tbody>
</table>
</section>
</div>
<section aria-labelledby="q-h">
<h2 id="q-h">Quarantine: <%= it.f.quarantine.held %> held; received per hour, last 24 h</h2>
<figure class="chart">
<div id="quarantine-chart" role="img" aria-label="Quarantined messages per hour over the last 24 hours" data-series="<%= JSON.stringify(it.series) %>"></div>
<figcaption>
<details><summary>The same as a table</summary>
<table><thead><tr><th scope="col">Hour</th><th scope="col" class="n">Messages</th></tr></thead><tbody>
<% for (const h of it.f.quarantine.perHour) { %><tr><td><%= it.time(h.hour) %></td><td class="n"><%= h.count %></td></tr><% } %>
</tbody></table></details>
</figcaption>
</figure>
</section>
<section aria-labelledby="t-h">
<h2 id="t-h">Transitions</h2>
<table>
<thead><tr><th scope="col">From</th><th scope="col">To</th><th scope="col">Event</th><th scope="col" class="n">Last hour</th><th scope="col" class="n">Last day</th></tr></thead>
<tbody>
<% for (const t of it.f.transitions) { %>
<tr><td><%= t.from %></td><td><%= t.to %></td><td><%= t.event %></td><td class="n"><%= t.lastHour %></td><td class="n"><%= t.lastDay %></td></tr>
<% } %>
<% if (it.f.transitions.length === 0) { %><tr><td colspan="5" class="muted">No transition in the last day.</td></tr><% } %>
</tbody>
</table>
</section>
`;

const JOBS = `<% layout('@layout') %>
<h1>Jobs</h1>
<form class="find filters" method="get" action="/find" role="search">
  <label>Find a job by job id, file id or message id
    <input name="id" size="52" required value="<%= it.findValue %>">
  </label>
  <button type="submit">Find</button>
</form>
<form class="filters" method="get" action="/jobs" aria-label="Filter jobs">
  <fieldset><legend>Status</legend>
  <% for (const s of it.statuses) { %>
    <label class="inline"><span><input type="checkbox" name="status" value="<%= s %>"<% if (it.filter.status.includes(s)) { %> checked<% } %>> <%= s %></span></label>
  <% } %>
  </fieldset>
  <label>Service <input name="service" value="<%= it.filter.service %>" size="16"></label>
  <label>File id <input name="file" value="<%= it.filter.file %>" size="36"></label>
  <label>Created since <input name="created_since" value="<%= it.filter.created_since %>" size="10" placeholder="1h, 2d or ISO time"></label>
  <label>Finished since <input name="finished_since" value="<%= it.filter.finished_since %>" size="10" placeholder="1h, 2d or ISO time"></label>
  <button type="submit">Filter</button>
</form>
<% if (it.error) { %><p class="notice bad" role="alert"><%= it.error %></p><% } %>
<%~ include('@jobsTable', it) %>
<% if (it.nextPage) { %><p class="pager"><a href="<%= it.nextPage %>" rel="next">Next page (older jobs)</a></p><% } %>
<% if (it.bulk) { %>
<form class="action" method="post" action="/actions/retry-bulk" aria-labelledby="bulk-h">
  <h2 id="bulk-h">Retry the failed jobs this filter selects</h2>
  <input type="hidden" name="service" value="<%= it.filter.service %>">
  <input type="hidden" name="finished_since" value="<%= it.filter.finished_since %>">
  <% for (const s of it.bulk.statuses) { %><input type="hidden" name="status" value="<%= s %>"><% } %>
  <p>Statuses <%= it.bulk.statuses.join(', ') %><% if (it.filter.service) { %>, service <%= it.filter.service %><% } %><% if (it.filter.finished_since) { %>, finished since <%= it.filter.finished_since %><% } %>; only jobs still their file's current job.</p>
  <label>At most <input name="limit" type="number" min="1" max="10000" value="1000"></label>
  <input type="hidden" name="dry_run" value="true">
  <button type="submit" class="secondary">Count them first (dry run)</button>
</form>
<% } %>
`;

const JOB = `<% layout('@layout') %>
<h1>Job <span class="mono"><%= it.job.id %></span></h1>
<% if (it.notice) { %><p class="notice" role="status"><%= it.notice %></p><% } %>
<div class="grid">
<section aria-labelledby="row-h">
<h2 id="row-h">Row</h2>
<dl class="row">
<% for (const [k, v] of it.fields) { %><dt><%= k %></dt><dd class="mono"><%= v %></dd><% } %>
</dl>
</section>
<section aria-labelledby="file-h">
<h2 id="file-h">File</h2>
<dl class="row">
<% for (const [k, v] of it.fileFields) { %><dt><%= k %></dt><dd class="mono"><%= v %></dd><% } %>
</dl>
<h2 id="result-h">Result object</h2>
<% if (it.result) { %><p class="mono">s3://<%= it.result.bucket %>/<%= it.result.key %></p><% } else { %><p class="muted">None.</p><% } %>
<h2 id="attempts-h">Attempts of this file</h2>
<ul>
<% for (const a of it.attempts) { %>
<li><% if (a.id === it.job.id) { %><strong>attempt <%= a.attempt %> (this job)</strong><% } else { %><a href="/jobs/<%= a.id %>">attempt <%= a.attempt %></a><% } %> — <span class="status-<%= a.status %>"><%= a.status %></span><% if (a.id === it.currentJobId) { %> · the file's current job<% } %></li>
<% } %>
</ul>
</section>
</div>
<% if (it.actions.includes('retry')) { %>
<form class="action" method="post" action="/actions/retry" aria-labelledby="retry-h">
  <h2 id="retry-h">Retry this job</h2>
  <input type="hidden" name="job_id" value="<%= it.job.id %>">
  <%~ include('@actionFields', it) %>
  <button type="submit">Retry: create attempt <%= it.job.attempt + 1 %></button>
</form>
<% } %>
<section aria-labelledby="path-h">
<h2 id="path-h">Its path on the statechart</h2>
<div id="path" hidden data-steps="<%= JSON.stringify(it.steps) %>">
  <div class="stepper">
    <button type="button" id="step-prev" class="secondary">Previous</button>
    <button type="button" id="step-next" class="secondary">Next</button>
    <span id="step-label" aria-live="polite"></span>
  </div>
</div>
<figure class="chart" id="statechart" tabindex="0" aria-label="The lifecycle statechart; the arrow keys step through this job's path">
<%~ it.svg %>
</figure>
<h2 id="timeline-h">Transitions</h2>
<ol class="timeline" start="0">
<li data-step="0">start in <strong><%= it.steps[0].state %></strong></li>
<% it.transitions.forEach(function (t, i) { %>
<li data-step="<%= i + 1 %>"><%= it.time(t.at) %>: <strong><%= t.event %></strong> <%= t.from_status %> → <%= t.to_status %>
  <% if (t.msg_id) { %> · message <span class="mono"><%= t.msg_id %></span><% } %>
  <% if (it.traceOf(t)) { %> · trace <span class="mono"><%= it.traceOf(t) %></span><% } %>
  <details><summary>detail</summary><pre class="preview"><%= JSON.stringify(t.detail, null, 2) %></pre></details>
</li>
<% }) %>
</ol>
</section>
`;

const QUARANTINE = `<% layout('@layout') %>
<h1>Quarantine</h1>
<% if (it.notice) { %><p class="notice" role="status"><%= it.notice %></p><% } %>
<h2 id="groups-h">Held, by reason and service</h2>
<table aria-labelledby="groups-h">
<thead><tr><th scope="col">Reason</th><th scope="col">Service named</th><th scope="col" class="n">Messages</th></tr></thead>
<tbody>
<% for (const g of it.groups) { %>
<tr><td><a href="/quarantine?reason=<%= g.reason %>"><%= g.reason %></a></td><td><% if (g.service) { %><a href="/quarantine?reason=<%= g.reason %>&amp;service=<%= encodeURIComponent(g.service) %>"><%= g.service %></a><% } else { %><span class="muted">none</span><% } %></td><td class="n"><%= g.count %></td></tr>
<% } %>
<% if (it.groups.length === 0) { %><tr><td colspan="3" class="muted">Nothing is quarantined.</td></tr><% } %>
</tbody>
</table>
<% if (it.canPurge) { %>
<form class="action" method="post" action="/actions/purge" aria-labelledby="purge-h">
  <h2 id="purge-h">Purge</h2>
  <label>Received before (span back from now or ISO time) <input name="older_than" required value="30d" size="12"></label>
  <label>Reason <select name="reason"><option value="">every reason</option><% for (const r of it.reasons) { %><option value="<%= r %>"><%= r %></option><% } %></select></label>
  <input type="hidden" name="dry_run" value="true">
  <input type="hidden" name="csrf" value="<%= it.csrf %>">
  <button type="submit" class="secondary">Count them first (dry run)</button>
</form>
<% } %>
<h2 id="list-h">Messages<% if (it.filter.reason) { %> of <%= it.filter.reason %><% } %><% if (it.filter.service) { %> naming <%= it.filter.service %><% } %>, newest first</h2>
<% for (const m of it.messages) { %>
<article class="message" aria-labelledby="m-<%= m.id %>">
<h3 id="m-<%= m.id %>">Message <%= m.id %>: <%= m.reason %></h3>
<dl class="row">
<dt>Received</dt><dd><%= it.time(m.receivedAt) %></dd>
<dt>Subject</dt><dd class="mono"><%= m.subject %><% if (m.streamSeq) { %> (stream seq <%= m.streamSeq %>)<% } %></dd>
<dt>Message id</dt><dd class="mono"><%= m.msgId ?? '' %></dd>
<dt>Job</dt><dd class="mono"><% if (m.jobId) { %><a href="/find?id=<%= encodeURIComponent(m.jobId) %>"><%= m.jobId %></a><% } %></dd>
<dt>Service named</dt><dd><%= m.service ?? '' %></dd>
<% if (m.replayedAt) { %><dt>Last replay</dt><dd><%= it.time(m.replayedAt) %>: <%= m.replayOutcome %></dd><% } %>
</dl>
<details><summary>Details and headers</summary>
<pre class="preview"><%= JSON.stringify(m.details, null, 2) %></pre>
<pre class="preview"><%= JSON.stringify(m.headers, null, 2) %></pre>
</details>
<p>Payload (<%= m.payloadBytes %> bytes<% if (m.payloadBytes > it.previewBytes) { %>, the first <%= it.previewBytes %> shown<% } %>):</p>
<pre class="preview"><%= m.preview %></pre>
<% if (it.canReplay) { %>
<form class="action" method="post" action="/actions/replay" aria-label="Replay message <%= m.id %>">
  <input type="hidden" name="id" value="<%= m.id %>">
  <%~ include('@actionFields', it) %>
  <button type="submit">Replay message <%= m.id %></button>
</form>
<% } %>
</article>
<% } %>
<% if (it.messages.length === 0) { %><p class="muted">No message.</p><% } %>
<% if (it.nextPage) { %><p class="pager"><a href="<%= it.nextPage %>" rel="next">Next page (older messages)</a></p><% } %>
`;

const SERVICES = `<% layout('@layout') %>
<h1>Services</h1>
<% for (const w of it.windows) { %>
<h2 id="w-<%= w.window %>">Last <%= w.window %></h2>
<table aria-labelledby="w-<%= w.window %>">
<thead><tr><th scope="col">Service</th><th scope="col">Version</th><th scope="col" class="n">Finished</th>
<% for (const s of it.finalStatuses) { %><th scope="col" class="n"><%= s %></th><% } %>
<th scope="col" class="n">Ack mean / p95</th><th scope="col" class="n">Result mean / p95</th><th scope="col" class="n">Quarantined</th><th scope="col" class="n">Quarantine rate</th></tr></thead>
<tbody>
<% for (const r of w.rows) { %>
<tr><th scope="row"><a href="/jobs?service=<%= encodeURIComponent(r.service) %>"><%= r.service %></a></th><td><%= r.version || '—' %></td><td class="n"><%= r.finished %></td>
<% for (const s of it.finalStatuses) { %><td class="n"><%= it.pct(r.shares[s]) %></td><% } %>
<td class="n"><%= it.ms(r.ackMs.mean) %> / <%= it.ms(r.ackMs.p95) %></td><td class="n"><%= it.ms(r.resultMs.mean) %> / <%= it.ms(r.resultMs.p95) %></td>
<td class="n"><%= r.quarantined %></td><td class="n"><%= it.pct(r.quarantineRate) %></td></tr>
<% } %>
<% if (w.rows.length === 0) { %><tr><td colspan="<%= 7 + it.finalStatuses.length %>" class="muted">No job finished.</td></tr><% } %>
</tbody>
</table>
<% } %>
`;

const AUDIT = `<% layout('@layout') %>
<h1>Audit log</h1>
<p class="muted">Every retry, replay and purge, from the command line and this console, newest first.</p>
<table>
<thead><tr><th scope="col" class="n">Id</th><th scope="col">At</th><th scope="col">Actor</th><th scope="col">Via</th><th scope="col">Action</th><th scope="col">Selection</th><th scope="col" class="n">Affected</th><th scope="col">Outcome</th><th scope="col">Reason</th></tr></thead>
<tbody>
<% for (const r of it.rows) { %>
<tr><td class="n"><%= r.id %></td><td><%= it.time(r.at) %></td><td><%= r.actor %></td><td><%= r.via %></td><td><%= r.action %></td><td class="mono"><%= JSON.stringify(r.selection) %></td><td class="n"><%= r.affected %></td><td class="mono"><%= JSON.stringify(r.outcome) %></td><td><%= r.note ?? '' %></td></tr>
<% } %>
<% if (it.rows.length === 0) { %><tr><td colspan="9" class="muted">Nothing recorded yet.</td></tr><% } %>
</tbody>
</table>
<% if (it.nextPage) { %><p class="pager"><a href="<%= it.nextPage %>" rel="next">Next page (older entries)</a></p><% } %>
`;

const LOGIN = `<% layout('@layout') %>
<h1>Sign in</h1>
<% if (it.error) { %><p class="notice bad" role="alert"><%= it.error %></p><% } %>
<% if (it.enabled) { %>
<form class="action" method="post" action="/login">
  <label>Token <input type="password" name="token" required autocomplete="current-password" size="40"></label>
  <button type="submit">Sign in</button>
</form>
<p class="muted">Tokens are listed in the file CONSOLE_TOKEN_FILE names. Without signing in, the console is read-only.</p>
<% } else { %>
<p>This console takes no tokens (CONSOLE_TOKEN_FILE is not set): it is read-only unless a trusted proxy names the user.</p>
<% } %>
`;

/** A page with a message and, optionally, the form that confirms an action counted in a dry run. */
const MESSAGE = `<% layout('@layout') %>
<h1><%= it.heading %></h1>
<p class="notice<% if (it.bad) { %> bad<% } %>" role="<%= it.bad ? 'alert' : 'status' %>"><%= it.text %></p>
<% if (it.confirm) { %>
<form class="action" method="post" action="<%= it.confirm.action %>">
  <% for (const [k, v] of it.confirm.fields) { %><input type="hidden" name="<%= k %>" value="<%= v %>"><% } %>
  <%~ include('@actionFields', it) %>
  <button type="submit" class="danger"><%= it.confirm.label %></button>
</form>
<% } %>
<% for (const [href, label] of it.links ?? []) { %><p><a href="<%= href %>"><%= label %></a></p><% } %>
`;

const TEMPLATES = {
  '@layout': LAYOUT,
  '@actionFields': ACTION_FIELDS,
  '@jobsTable': JOBS_TABLE,
  '@overview': OVERVIEW,
  '@jobs': JOBS,
  '@job': JOB,
  '@quarantine': QUARANTINE,
  '@services': SERVICES,
  '@audit': AUDIT,
  '@login': LOGIN,
  '@message': MESSAGE,
} as const;

/** A view of the console. */
export type ViewName = Exclude<keyof typeof TEMPLATES, '@layout' | '@actionFields' | '@jobsTable'>;

/** What a view shows: its title, its section of the navigation, its own values. */
export interface PageContent {
  title: string;
  section: string;
  /** The page draws the uPlot chart. */
  chart?: boolean;
  [key: string]: unknown;
}

/** What every page gets besides: who is there, and their CSRF token (empty without one). */
export type PageData = PageContent & {
  identity: { name: string; via: 'token' | 'proxy'; csrf: string } | undefined;
  csrf: string;
};

export const NAV: ReadonlyArray<[string, string]> = [
  ['/', 'Overview'],
  ['/jobs', 'Jobs'],
  ['/quarantine', 'Quarantine'],
  ['/services', 'Services'],
  ['/audit', 'Audit'],
];

/** A time as the pages show it: ISO 8601 in UTC to the second, or empty. */
export function showTime(t: Date | string | null | undefined): string {
  if (t === null || t === undefined) return '';
  const d = t instanceof Date ? t : new Date(t);
  return Number.isNaN(d.getTime())
    ? String(t)
    : d
        .toISOString()
        .replace('T', ' ')
        .replace(/\.\d+Z$/, 'Z');
}

/** The renderer: the templates compiled once, values escaped. */
export function createViews(): (view: ViewName, data: PageData) => string {
  const eta = new Eta({ autoEscape: true, autoTrim: [false, 'nl'], cache: true, useWith: false });
  for (const [name, text] of Object.entries(TEMPLATES)) eta.loadTemplate(name, text);
  return (view, data) => eta.render(view, { nav: NAV, time: showTime, ...data });
}
