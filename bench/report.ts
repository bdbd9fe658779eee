/**
 * The bench's report: what one run measured, its headline ratios and targets, its markdown tables,
 * and what a full run records (bench/README.md, "What a full run records"). Only ratios of one run
 * compare across machines and days; absolute figures are context.
 */
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CLI_LABELS, type CliResult } from './cliStartup.js';
import { median, n0 } from './env.js';
import type { GrownResult } from './grown.js';
import type { HttpResult } from './http.js';
import type { LatencyResult } from './latency.js';
import type { PoolerResult } from './pooler.js';
import type { ThroughputResult } from './throughput.js';
import type { SweepResult, WatchdogResult } from './watchdog.js';

/** One run of `npm run bench`: each section's results, when it ran. */
export interface BenchReport {
  date: string;
  commit: string;
  /** Uncommitted changes were present: the figures are of the working tree, not of `commit`. */
  dirty: boolean;
  scale: number;
  durationSeconds?: number;
  /** The machine in one line: cores, memory, Node, PostgreSQL, nats-server. */
  machine: string;
  /** The configuration defaults the daemon ran with. */
  defaults: Record<string, number>;
  inbox?: { ceiling: ThroughputResult; warn: ThroughputResult; info: ThroughputResult };
  /** A daemon process on a backlog; the ceiling on the same, warm in the bench and started cold alike. */
  cold?: { ceiling: ThroughputResult; ceilingProcess?: ThroughputResult; daemon: ThroughputResult };
  /** Every round of the latency target, and the ceiling's consumer at the same rate just before each. */
  latencyRounds?: LatencyResult[];
  latencyCeilingRounds?: LatencyResult[];
  watchdog?: WatchdogResult;
  cli?: CliResult;
  /** A daemon process draining a large backlog, its RSS sampled. */
  drain?: ThroughputResult;
  grown?: GrownResult;
  pooler?: PoolerResult;
  http?: HttpResult;
}

/** The headlines of a run: each a ratio to its ceiling of the same run. */
export interface Headlines {
  ceilings: Record<string, string>;
  ratios: Record<string, number>;
  targets: Record<string, string>;
  met: Record<string, boolean>;
  context: Record<string, number | number[]>;
}

/** Each target: what is compared with what, and the bound. */
export const TARGETS: Record<string, { text: string; min?: number; max?: number }> = {
  inbox_batched_warn: { text: '≥ 0.8× the ceiling', min: 0.8 },
  inbox_batched_info: { text: '≥ 0.75× the ceiling', min: 0.75 },
  inbox_cold_start: { text: '≥ 0.75× the ceiling', min: 0.75 },
  watchdog_sweep_time: { text: "≤ 1.25× the raw SQL sweep's time", max: 1.25 },
  cli_help: { text: '≤ 3× node -e 0', max: 3 },
  grown_inbox: { text: '≥ 0.9× the empty database', min: 0.9 },
  grown_watchdog_sweep_time: { text: "≤ 1.1× the empty database's time", max: 1.1 },
  grown_inbox_during_retention: { text: '≥ 0.8× without retention', min: 0.8 },
  // Absolute figures, not ratios: in `context`, with their target.
  grown_admin_p95_ms: { text: 'p95 of each admin query ≤ 20 ms', max: 20 },
  grown_retention_lock_wait_max_ms: { text: 'no lock wait on retention > 100 ms', max: 100 },
};
/** p99 publish → commit within the bound in at least this share of the rounds. */
const LATENCY = { maxMs: 50, share: 0.8 };
/** A daemon process's RSS while it drains a backlog stays under this. */
const DRAIN_MAX_MIB = 300;

const mib = (v: number | undefined) => (v ?? NaN) / 2 ** 20;

/** A run's headline ratios, their ceilings and targets, and the absolute figures as context. */
export function headlines(r: BenchReport): Headlines {
  const h: Headlines = { ceilings: {}, ratios: {}, targets: {}, met: {}, context: {} };
  /** `value` over `of` (a rate over a rate, or a time over a time), and its target when it has one. */
  const ratio = (key: string, value: number, of: number, ceiling: string) => {
    h.ceilings[key] = ceiling;
    h.ratios[key] = value / of;
    const target = TARGETS[key];
    if (target?.min !== undefined) h.met[key] = h.ratios[key] >= target.min;
    if (target?.max !== undefined) h.met[key] = h.ratios[key] <= target.max;
    if (target) h.targets[key] = target.text;
  };
  /** A throughput over its ceiling's, both rates as context. */
  const rates = (key: string, t: ThroughputResult, c: ThroughputResult, ceilingKey: string) => {
    h.context[`${key}_env_per_s`] = Math.round(t.perSecond);
    h.context[`${ceilingKey}_env_per_s`] = Math.round(c.perSecond);
    ratio(key, t.perSecond, c.perSecond, c.name);
  };
  if (r.inbox) {
    rates('inbox_batched_warn', r.inbox.warn, r.inbox.ceiling, 'ceiling');
    rates('inbox_batched_info', r.inbox.info, r.inbox.ceiling, 'ceiling');
  }
  if (r.cold) h.context['cold_start_to_first_delivery_s'] = r.cold.daemon.startupSeconds ?? NaN;
  if (r.cold) rates('inbox_cold_start', r.cold.daemon, r.cold.ceiling, 'cold_ceiling');
  if (r.cold?.ceilingProcess) {
    const started = r.cold.ceilingProcess;
    rates('inbox_cold_start_of_cold_ceiling', r.cold.daemon, started, 'cold_ceiling_process');
    h.context['cold_ceiling_process_to_first_delivery_s'] = started.startupSeconds ?? NaN;
  }
  const sweep = median(r.watchdog?.sweeps ?? [], (s) => s.seconds);
  const rawSweep = median(r.watchdog?.rawSweeps ?? [], (s) => s.seconds);
  if (sweep && rawSweep) {
    h.context['watchdog_sweep_s'] = sweep.seconds;
    h.context['raw_sweep_s'] = rawSweep.seconds;
    ratio('watchdog_sweep_time', sweep.seconds, rawSweep.seconds, 'raw SQL sweep');
  }
  if (r.cli) {
    const c = r.cli.commands;
    h.context['node_e_0_ms'] = c.node.wallMs;
    ratio('cli_help', c.help.wallMs, c.node.wallMs, c.node.label);
  }
  const rounds = r.latencyRounds ?? [];
  if (rounds.length > 0) {
    h.context['latency_rate_env_per_s'] = rounds[0]!.rate;
    h.context['latency_p99_ms'] = rounds.map((l) => l.p99Ms);
    const ceilingRounds = r.latencyCeilingRounds ?? [];
    if (ceilingRounds.length > 0) h.context['latency_ceiling_p99_ms'] = ceilingRounds.map((l) => l.p99Ms);
    const need = Math.ceil(LATENCY.share * rounds.length);
    h.targets['latency_p99'] = `p99 ≤ ${LATENCY.maxMs} ms in ≥ ${need} of ${rounds.length} rounds`;
    h.met['latency_p99'] = rounds.filter((l) => l.p99Ms <= LATENCY.maxMs).length >= need;
  }
  if (r.drain) {
    h.context['drain_env_per_s'] = Math.round(r.drain.perSecond);
    h.context['drain_max_rss_mib'] = mib(r.drain.maxRssBytes);
    h.targets['drain_rss'] = `max RSS < ${DRAIN_MAX_MIB} MiB`;
    h.met['drain_rss'] = mib(r.drain.maxRssBytes) < DRAIN_MAX_MIB;
  }
  const g = r.grown;
  if (g) {
    rates('grown_inbox', g.inbox.grown, g.inbox.empty, 'grown_empty');
    rates('grown_inbox_during_retention', g.inbox.duringRetention, g.inbox.grown, 'grown_inbox');
    const [sg, se] = [g.watchdog.grown, g.watchdog.empty].map((w) => median(w.sweeps, (s) => s.seconds)!);
    ratio('grown_watchdog_sweep_time', sg!.seconds, se!.seconds, 'the same sweep on the empty database');
    h.context['grown_watchdog_sweep_s'] = [sg!.seconds, se!.seconds];
    h.context['grown_history_jobs_and_generation_s'] = [g.history.jobs, g.history.seconds];
    for (const [k, v] of Object.entries(g.history.bytesPerJob)) h.context[`grown_bytes_per_job_${k}`] = v;
    const bound = (key: string, value: number) => {
      [h.context[key], h.targets[key], h.met[key]] = [value, TARGETS[key]!.text, value <= TARGETS[key]!.max!];
    };
    bound('grown_admin_p95_ms', Math.max(...Object.values(g.admin.grown)));
    bound('grown_retention_lock_wait_max_ms', g.retention.lockWaitBoundMs);
  }
  return h;
}

/** Envelopes/s of a throughput row, with its rounds when there were several. */
const rateText = (t: ThroughputResult) =>
  `${n0(t.perSecond)} env/s${t.roundsPerSecond && t.roundsPerSecond.length > 1 ? ` (median of ${t.roundsPerSecond.map(n0).join(' / ')})` : ''}`;
/** A markdown table. */
export const table = (header: string[], rows: string[][], rule = header.map(() => '---')) =>
  [header, rule, ...rows].map((c) => `| ${c.join(' | ')} |`).join('\n');

/** A latency round's main-thread collection pauses, in ms per second of its window. */
export function collectionPauses(r: LatencyResult): string {
  const p = r.gcPauseMsPerSecond;
  return `collection pauses ${p.young.toFixed(0)} ms/s young, ${p.old.toFixed(0)} ms/s old (${r.oldCollections} old collections)`;
}

/** The rounds' p99s, how many are within the target's bound, and the median round's p50 and pauses. */
function latencyText(rounds: readonly LatencyResult[]): string {
  const m = median(rounds, (t) => t.p99Ms);
  const within = rounds.filter((t) => t.p99Ms <= LATENCY.maxMs).length;
  return `p99 ${rounds.map((t) => t.p99Ms.toFixed(1)).join(' / ')} ms: ${within} of ${rounds.length} rounds ≤ ${LATENCY.maxMs} ms (p50 of the median round ${m.p50Ms.toFixed(1)} ms, its ${collectionPauses(m)}`;
}

/** The markdown of a report: the run, the measurements with their targets, the CPU per envelope. */
export function renderTable(r: BenchReport): string {
  const h = headlines(r);
  const rows: string[][] = [];
  /** A ceiling's row (no `key`), or a measurement read against `key`'s ceiling, its target, whether met. */
  const row = (what: string, result: string, key?: string, ofWhat = '', more = '') =>
    rows.push([
      what,
      (key && h.ratios[key] !== undefined ? `${result} = ${h.ratios[key].toFixed(2)}× ${ofWhat}` : result) +
        more,
      key === undefined ? 'ceiling' : (h.targets[key] ?? '(reported)'),
      key === undefined || h.met[key] === undefined ? '' : h.met[key] ? '✅' : '❌',
    ]);
  const config = (t: ThroughputResult) => ` (batch ${t.batchSize}, concurrency ${t.concurrency})`;
  if (r.inbox) {
    const { ceiling, warn, info } = r.inbox;
    row(ceiling.name, rateText(ceiling));
    row(warn.name + config(warn), rateText(warn), 'inbox_batched_warn', 'the ceiling');
    row(info.name + config(info), rateText(info), 'inbox_batched_info', 'the ceiling');
  }
  if (r.cold) {
    const { ceiling, ceilingProcess: cp, daemon } = r.cold;
    const started = (t: ThroughputResult) =>
      `; start → first delivery ${t.startupSeconds?.toFixed(2)} s, max RSS ${mib(t.maxRssBytes).toFixed(0)} MiB`;
    row(ceiling.name, rateText(ceiling));
    if (cp) row(cp.name, rateText(cp) + started(cp));
    row(daemon.name, rateText(daemon), 'inbox_cold_start', 'the ceiling', started(daemon));
    const again = 'the same daemon process against the ceiling started cold the same way';
    if (cp) row(again, rateText(daemon), 'inbox_cold_start_of_cold_ceiling', 'the ceiling process');
  }
  const [rounds, ceilingRounds] = [r.latencyRounds ?? [], r.latencyCeilingRounds ?? []];
  if (rounds.length > 0) {
    const { rate, logLevel } = rounds[0]!;
    const lag = Math.max(...rounds.map((t) => t.publisherLagMs)).toFixed(1);
    const what = `latency publish → commit at ${n0(rate)} env/s (½ the batched maximum), LOG_LEVEL=${logLevel}`;
    row(what, `${latencyText(rounds)}; worst publisher lag ${lag} ms)`, 'latency_p99');
    const ceilingWhat = `the ceiling's consumer at the same rate, just before the daemon in each round`;
    if (ceilingRounds.length > 0) row(ceilingWhat, `${latencyText(ceilingRounds)})`);
  }
  const times = (ws: readonly SweepResult[]) =>
    `${median(ws, (w) => w.seconds).seconds.toFixed(2)} s${ws.length > 1 ? ` (median of ${ws.map((w) => w.seconds.toFixed(2)).join(' / ')} s)` : ''}`;
  if (r.watchdog) {
    const { sweeps, rawSweeps } = r.watchdog;
    const { due, rows: all, batchSize } = sweeps[0]!;
    row(`raw SQL sweep: ${n0(due)} due timed out by one statement (same changes)`, times(rawSweeps));
    const what = `watchdog, ${n0(due)} due among ${n0(all)} rows (batch ${batchSize})`;
    row(what, times(sweeps), 'watchdog_sweep_time', "the raw SQL sweep's time");
  }
  if (r.cli) {
    const { node, help } = r.cli.commands;
    row(`\`${CLI_LABELS.node}\`, median of ${r.cli.runs} runs`, `${node.wallMs.toFixed(0)} ms`);
    row(`\`${CLI_LABELS.help}\``, `${help.wallMs.toFixed(0)} ms`, 'cli_help', CLI_LABELS.node);
  }
  if (r.drain) {
    const rss = `max RSS ${mib(r.drain.maxRssBytes).toFixed(0)} MiB (sampled every 100 ms); ${rateText(r.drain)}`;
    row(r.drain.name, rss, 'drain_rss');
  }
  if (r.grown) {
    const { history: hi, inbox: i, retention: re, watchdog: w, admin } = r.grown;
    const bytes = Object.entries(hi.bytesPerJob).map(([k, v]) => `${k} ${n0(v)}`);
    const made = `history of ${n0(hi.jobs)} jobs, made in ${hi.seconds.toFixed(0)} s`;
    rows.push([made, `bytes/job: ${bytes.join(', ')}`, '(reported)', '']);
    row(i.empty.name, rateText(i.empty));
    row(i.grown.name, rateText(i.grown), 'grown_inbox', 'the empty database');
    const besideRate = re.deletedBesideInbox / Math.max(re.secondsBesideInbox, 1e-3);
    const deleted = `; ${n0(re.deletedBesideInbox)} deleted beside it (${n0(besideRate)}/s), ${n0(re.deletedJobs)} by the whole pass (${re.seconds.toFixed(0)} s, the rest flat out)`;
    row(i.duringRetention.name, rateText(i.duringRetention), 'grown_inbox_during_retention', 'it', deleted);
    const wait = `< ${re.lockWaitBoundMs.toFixed(0)} ms (${re.lockWaits} waits seen, the longest at ${re.longestLockWaitMs.toFixed(0)} ms)`;
    row("the inbox's longest wait on retention's locks", wait, 'grown_retention_lock_wait_max_ms');
    row(`watchdog, ${n0(w.grown.sweeps[0]!.due)} due, empty database`, times(w.empty.sweeps));
    row('the same among the history', times(w.grown.sweeps), 'grown_watchdog_sweep_time', 'the empty');
    const p95 = (a: Record<string, number>) =>
      `${Object.values(a)
        .map((v) => v.toFixed(1))
        .join(' / ')} ms`;
    const adminWhat = 'admin p95: list --status error / show / history';
    row(adminWhat, `${p95(admin.grown)} (empty ${p95(admin.empty)})`, 'grown_admin_p95_ms');
  }
  if (r.pooler) {
    const { direct, directUnnamed, transaction, session } = r.pooler;
    const of = (t: ThroughputResult) => ` = ${(t.perSecond / direct.perSecond).toFixed(2)}× direct`;
    for (const t of [direct, directUnnamed, transaction, session])
      rows.push([t.name, rateText(t) + (t === direct ? '' : of(t)), '(reported)', '']);
  }

  const parts = ['nodeUs', 'postgresUs', 'natsUs'] as const;
  const cpuRow = (name: string, us: Array<number | null>) => [name, ...us.map((v) => v?.toFixed(0) ?? '–')];
  const cpuRows: string[][] = [];
  const { ceiling: c, warn: w } = r.inbox ?? {};
  const excess = parts.map((p) => (w?.cpu[p] == null || c?.cpu[p] == null ? null : w.cpu[p] - c.cpu[p]));
  for (const t of [c, w, r.inbox?.info, r.cold?.ceiling, r.cold?.ceilingProcess, r.cold?.daemon, r.drain]) {
    if (t)
      cpuRows.push(
        cpuRow(
          t.name,
          parts.map((p) => t.cpu[p]),
        ),
      );
    if (t && t === r.inbox?.info) cpuRows.push(cpuRow(`_inbox (warn) above the ceiling_`, excess));
  }

  const defaults = Object.entries(r.defaults)
    .map(([k, v]) => `${k}=${v}`)
    .join(', ');
  const run =
    `Run ${r.date.slice(0, 16).replace('T', ' ')} UTC, commit ${r.commit}${r.dirty ? ' (+ uncommitted changes)' : ''}, scale ${r.scale}` +
    (r.durationSeconds !== undefined ? `, ${Math.round(r.durationSeconds)} s` : '');
  const cpu =
    "CPU time per envelope, µs (user + system from /proc; node = the consumer's process — for a daemon process its " +
    "whole life, start-up included; postgres = the consumer's own backends, so WAL writer and checkpointer are " +
    'not counted; compare rows of one run rather than runs of different days):';
  return (
    [
      `${run}  \nMachine: ${r.machine} — bench, nats-server and PostgreSQL share the cores.  \nDefaults: ${defaults}.`,
      table(['measurement', 'result', 'target', 'met'], rows),
      ...(cpuRows.length === 0 ? [] : [cpu, table(['run', 'node', 'postgres', 'nats-server'], cpuRows)]),
    ].join('\n\n') + '\n'
  );
}

/** One line of `bench/results/history.jsonl`: the run, then its {@link Headlines}. */
export type HistoryEntry = Pick<BenchReport, 'date' | 'commit' | 'dirty' | 'scale' | 'machine'> & Headlines;

export const LATEST_START = '<!-- latest-bench:start -->';
export const LATEST_END = '<!-- latest-bench:end -->';

/** `text` with its latest-bench block replaced by `tables` (kept from Prettier); null without the markers. */
export function withLatestTable(text: string, tables: string): string | null {
  const [a, b] = [text.indexOf(LATEST_START), text.indexOf(LATEST_END)];
  if (a < 0 || b < a) return null;
  const from = 'From [`bench/results/latest.json`](../bench/results/latest.json):';
  const ignored = `<!-- prettier-ignore-start -->\n${from}\n\n${tables.trimEnd()}\n<!-- prettier-ignore-end -->\n`;
  return `${text.slice(0, a)}${LATEST_START}\n${ignored}${text.slice(b)}`;
}

/** Write the latest result, append its history line and update the docs' tables. */
export function recordRun(repoRoot: string, report: BenchReport, log: (l: string) => void): void {
  const dir = join(repoRoot, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'latest.json'), JSON.stringify(report, null, 2) + '\n');
  const { date, commit, dirty, scale, machine } = report;
  const entry: HistoryEntry = { date, commit, dirty, scale, machine, ...headlines(report) };
  appendFileSync(join(dir, 'history.jsonl'), JSON.stringify(entry) + '\n');
  const doc = join(repoRoot, 'docs', 'performance.md');
  const updated = withLatestTable(readFileSync(doc, 'utf8'), renderTable(report));
  if (updated === null) log(`docs/performance.md has no ${LATEST_START} … ${LATEST_END} block: not updated`);
  else writeFileSync(doc, updated);
  log('wrote bench/results/latest.json, appended bench/results/history.jsonl, updated docs/performance.md');
}
