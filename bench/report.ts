/**
 * The bench's report: what one run measured, its headline ratios and targets, its markdown tables,
 * and what a full run records (bench/README.md). Each section is one spec giving its headlines and
 * then its rows, read against them. Only ratios of one run compare across machines and days.
 */
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CLI_LABELS, type CliResult } from './cliStartup.js';
import { median, n0, type CpuSplit } from './env.js';
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
  /** Cores, memory, Node, PostgreSQL, nats-server; then the configuration defaults the daemon ran with. */
  machine: string;
  defaults: Record<string, number>;
  inbox?: Record<'ceiling' | 'warn' | 'info', ThroughputResult>;
  /** A daemon process on a backlog; the ceiling on the same, warm in the bench and started cold alike. */
  cold?: { ceiling: ThroughputResult; ceilingProcess?: ThroughputResult; daemon: ThroughputResult };
  /** Every latency round, and the ceiling's consumer at the same rate just before each. */
  latencyRounds?: LatencyResult[];
  latencyCeilingRounds?: LatencyResult[];
  watchdog?: WatchdogResult;
  cli?: CliResult;
  drain?: ThroughputResult;
  grown?: GrownResult;
  pooler?: PoolerResult;
  http?: HttpResult;
}

/** The headlines of a run: each a ratio to its ceiling of the same run. */
export type Headlines = { ceilings: Record<string, string>; ratios: Record<string, number> } & {
  targets: Record<string, string>;
  met: Record<string, boolean>;
  context: Record<string, number | number[]>;
};

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

const mid = (ws: readonly SweepResult[]) => median(ws, (w) => w.seconds).seconds;
const mib = (v: number | undefined) => (v ?? NaN) / 2 ** 20;
/** Envelopes/s of a throughput row, with its rounds when there were several. */
const rateText = (t: ThroughputResult) =>
  `${n0(t.perSecond)} env/s${t.roundsPerSecond && t.roundsPerSecond.length > 1 ? ` (median of ${t.roundsPerSecond.map(n0).join(' / ')})` : ''}`;
const times = (ws: readonly SweepResult[]) =>
  `${mid(ws).toFixed(2)} s${ws.length > 1 ? ` (median of ${ws.map((w) => w.seconds.toFixed(2)).join(' / ')} s)` : ''}`;
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

type Out = ReturnType<typeof output>;
type Run = ThroughputResult;
type Spec<K extends keyof BenchReport> = (v: NonNullable<BenchReport[K]>, o: Out, r: BenchReport) => void;
const f1 = (v: number) => v.toFixed(1);

/** The sections, in the table's order. */
const SECTIONS: { [K in keyof BenchReport]?: Spec<K> } = {
  inbox: ({ ceiling, warn, info }, o) => {
    const what = (t: ThroughputResult) => `${t.name} (batch ${t.batchSize}, concurrency ${t.concurrency})`;
    o.row(ceiling.name, rateText(ceiling));
    o.rate('inbox_batched_warn', warn, ceiling, 'ceiling', 'the ceiling', what(warn));
    o.rate('inbox_batched_info', info, ceiling, 'ceiling', 'the ceiling', what(info));
  },
  cold: ({ ceiling, ceilingProcess: cp, daemon }, o) => {
    o.context['cold_start_to_first_delivery_s'] = daemon.startupSeconds ?? NaN;
    if (cp) o.context['cold_ceiling_process_to_first_delivery_s'] = cp.startupSeconds ?? NaN;
    const started = (t: ThroughputResult) =>
      `; start → first delivery ${t.startupSeconds?.toFixed(2)} s, max RSS ${mib(t.maxRssBytes).toFixed(0)} MiB`;
    o.row(ceiling.name, rateText(ceiling));
    if (cp) o.row(cp.name, rateText(cp) + started(cp));
    o.rate('inbox_cold_start', daemon, ceiling, 'cold_ceiling', 'the ceiling', daemon.name, started(daemon));
    const again = 'the same daemon process against the ceiling started cold the same way';
    const of = ['the ceiling process', again] as const;
    if (cp) o.rate('inbox_cold_start_of_cold_ceiling', daemon, cp, 'cold_ceiling_process', ...of);
  },
  latencyRounds: (rounds, o, r) => {
    if (rounds.length === 0) return;
    const ceilingRounds = r.latencyCeilingRounds ?? [];
    const { rate, logLevel } = rounds[0]!;
    o.context['latency_rate_env_per_s'] = rate;
    o.context['latency_p99_ms'] = rounds.map((l) => l.p99Ms);
    if (ceilingRounds.length > 0) o.context['latency_ceiling_p99_ms'] = ceilingRounds.map((l) => l.p99Ms);
    const [need, all] = [Math.ceil(LATENCY.share * rounds.length), rounds.length];
    const within = rounds.filter((l) => l.p99Ms <= LATENCY.maxMs).length;
    o.target('latency_p99', `p99 ≤ ${LATENCY.maxMs} ms in ≥ ${need} of ${all} rounds`, within >= need);
    const lag = Math.max(...rounds.map((t) => t.publisherLagMs)).toFixed(1);
    const what = `latency publish → commit at ${n0(rate)} env/s (½ the batched maximum), LOG_LEVEL=${logLevel}`;
    o.row(what, `${latencyText(rounds)}; worst publisher lag ${lag} ms)`, 'latency_p99');
    const ceilingWhat = `the ceiling's consumer at the same rate, just before the daemon in each round`;
    if (ceilingRounds.length > 0) o.row(ceilingWhat, `${latencyText(ceilingRounds)})`);
  },
  watchdog: ({ sweeps, rawSweeps }, o) => {
    if (sweeps.length > 0 && rawSweeps.length > 0) {
      [o.context['watchdog_sweep_s'], o.context['raw_sweep_s']] = [mid(sweeps), mid(rawSweeps)];
      o.ratio('watchdog_sweep_time', mid(sweeps), mid(rawSweeps), 'raw SQL sweep');
    }
    const { due, rows: all, batchSize } = sweeps[0]!;
    o.row(`raw SQL sweep: ${n0(due)} due timed out by one statement (same changes)`, times(rawSweeps));
    const what = `watchdog, ${n0(due)} due among ${n0(all)} rows (batch ${batchSize})`;
    o.row(what, times(sweeps), 'watchdog_sweep_time', "the raw SQL sweep's time");
  },
  cli: ({ commands: { node, help }, runs }, o) => {
    o.context['node_e_0_ms'] = node.wallMs;
    o.ratio('cli_help', help.wallMs, node.wallMs, node.label);
    o.row(`\`${CLI_LABELS.node}\`, median of ${runs} runs`, `${node.wallMs.toFixed(0)} ms`);
    o.row(`\`${CLI_LABELS.help}\``, `${help.wallMs.toFixed(0)} ms`, 'cli_help', CLI_LABELS.node);
  },
  drain: (d, o) => {
    o.context['drain_env_per_s'] = Math.round(d.perSecond);
    o.context['drain_max_rss_mib'] = mib(d.maxRssBytes);
    o.target('drain_rss', `max RSS < ${DRAIN_MAX_MIB} MiB`, mib(d.maxRssBytes) < DRAIN_MAX_MIB);
    const rss = `max RSS ${mib(d.maxRssBytes).toFixed(0)} MiB (sampled every 100 ms); ${rateText(d)}`;
    o.row(d.name, rss, 'drain_rss');
  },
  grown: ({ history: hi, inbox: i, retention: re, watchdog: w, admin }, o) => {
    o.context['grown_watchdog_sweep_s'] = [mid(w.grown.sweeps), mid(w.empty.sweeps)];
    o.context['grown_history_jobs_and_generation_s'] = [hi.jobs, hi.seconds];
    for (const [k, v] of Object.entries(hi.bytesPerJob)) o.context[`grown_bytes_per_job_${k}`] = v;
    o.bound('grown_admin_p95_ms', Math.max(...Object.values(admin.grown)));
    o.bound('grown_retention_lock_wait_max_ms', re.lockWaitBoundMs);
    const bytes = Object.entries(hi.bytesPerJob).map(([k, v]) => `${k} ${n0(v)}`);
    const made = `history of ${n0(hi.jobs)} jobs, made in ${hi.seconds.toFixed(0)} s`;
    o.reported(made, `bytes/job: ${bytes.join(', ')}`);
    o.row(i.empty.name, rateText(i.empty));
    o.rate('grown_inbox', i.grown, i.empty, 'grown_empty', 'the empty database');
    const besideRate = re.deletedBesideInbox / Math.max(re.secondsBesideInbox, 1e-3);
    const deleted = `; ${n0(re.deletedBesideInbox)} deleted beside it (${n0(besideRate)}/s), ${n0(re.deletedJobs)} by the whole pass (${re.seconds.toFixed(0)} s, the rest flat out)`;
    const during = ['grown_inbox_during_retention', i.duringRetention, i.grown, 'grown_inbox'] as const;
    o.rate(...during, 'it', i.duringRetention.name, deleted);
    const wait = `< ${re.lockWaitBoundMs.toFixed(0)} ms (${re.lockWaits} waits seen, the longest at ${re.longestLockWaitMs.toFixed(0)} ms)`;
    o.row("the inbox's longest wait on retention's locks", wait, 'grown_retention_lock_wait_max_ms');
    o.row(`watchdog, ${n0(w.grown.sweeps[0]!.due)} due, empty database`, times(w.empty.sweeps));
    const sweepOf = 'the same sweep on the empty database';
    o.ratio('grown_watchdog_sweep_time', mid(w.grown.sweeps), mid(w.empty.sweeps), sweepOf);
    o.row('the same among the history', times(w.grown.sweeps), 'grown_watchdog_sweep_time', 'the empty');
    const p95 = (a: Record<string, number>) => `${Object.values(a).map(f1).join(' / ')} ms`;
    const adminWhat = 'admin p95: list --status error / show / history';
    o.row(adminWhat, `${p95(admin.grown)} (empty ${p95(admin.empty)})`, 'grown_admin_p95_ms');
  },
  pooler: ({ direct, directUnnamed, transaction, session }, o) => {
    const of = (t: ThroughputResult) => ` = ${(t.perSecond / direct.perSecond).toFixed(2)}× direct`;
    for (const t of [direct, directUnnamed, transaction, session])
      o.reported(t.name, rateText(t) + (t === direct ? '' : of(t)));
  },
};

/** What a section's spec writes: headlines, and rows read against them (a row without `key`: a ceiling). */
function output(h: Headlines, rows: string[][]) {
  const o = {
    context: h.context,
    target: (key: string, text: string, met: boolean) => void ([h.targets[key], h.met[key]] = [text, met]),
    /** `value` over `of` (a rate over a rate, or a time over a time), and its target when it has one. */
    ratio(key: string, value: number, of: number, ceiling: string) {
      const [v, t] = [(h.ratios[key] = value / of), TARGETS[key]];
      h.ceilings[key] = ceiling;
      if (t) o.target(key, t.text, t.min !== undefined ? v >= t.min : v <= t.max!);
    },
    /** An absolute figure in `context`, against its bound in {@link TARGETS}. */
    bound(key: string, v: number) {
      h.context[key] = v;
      o.target(key, TARGETS[key]!.text, v <= TARGETS[key]!.max!);
    },
    row(what: string, result: string, key?: string, ofWhat = '', more = '') {
      const ratio = key && h.ratios[key] !== undefined ? ` = ${h.ratios[key].toFixed(2)}× ${ofWhat}` : '';
      const met = key === undefined || h.met[key] === undefined ? '' : h.met[key] ? '✅' : '❌';
      const target = key === undefined ? 'ceiling' : (h.targets[key] ?? '(reported)');
      rows.push([what, result + ratio + more, target, met]);
    },
    /** A throughput over its ceiling's (both rates as context), and its row. */
    rate(key: string, t: Run, c: Run, ceilingKey: string, of: string, what = t.name, more = '') {
      h.context[`${key}_env_per_s`] = Math.round(t.perSecond);
      h.context[`${ceilingKey}_env_per_s`] = Math.round(c.perSecond);
      o.ratio(key, t.perSecond, c.perSecond, c.name);
      o.row(what, rateText(t), key, of, more);
    },
    reported: (what: string, result: string) => void rows.push([what, result, '(reported)', '']),
  };
  return o;
}

/** Run every section's spec over `r`: its headlines and the measurements table's rows. */
function build(r: BenchReport): { h: Headlines; rows: string[][] } {
  const h: Headlines = { ceilings: {}, ratios: {}, targets: {}, met: {}, context: {} };
  const rows: string[][] = [];
  const o = output(h, rows);
  for (const [k, spec] of Object.entries(SECTIONS) as Array<[keyof BenchReport, Spec<'inbox'>]>)
    if (r[k] !== undefined) (spec as (v: unknown, o: Out, r: BenchReport) => void)(r[k], o, r);
  return { h, rows };
}

/** A run's headline ratios, their ceilings and targets, and the absolute figures as context. */
export const headlines = (r: BenchReport): Headlines => build(r).h;

/** The markdown of a report: the run, the measurements with their targets, the CPU per envelope. */
export function renderTable(r: BenchReport): string {
  const parts = ['nodeUs', 'postgresUs', 'natsUs'] as const;
  const { ceiling: c, warn: w, info } = r.inbox ?? {};
  const minus = (a?: number | null, b?: number | null) => (a == null || b == null ? null : a - b);
  const excess = Object.fromEntries(parts.map((p) => [p, minus(w?.cpu[p], c?.cpu[p])])) as CpuSplit;
  const above = info && { name: '_inbox (warn) above the ceiling_', cpu: excess };
  const cpuRows = [c, w, info, above, r.cold?.ceiling, r.cold?.ceilingProcess, r.cold?.daemon, r.drain]
    .filter((t) => t !== undefined)
    .map((t) => [t.name, ...parts.map((p) => t.cpu[p]?.toFixed(0) ?? '–')]);
  const defaults = Object.entries(r.defaults).map(([k, v]) => `${k}=${v}`);
  const run =
    `Run ${r.date.slice(0, 16).replace('T', ' ')} UTC, commit ${r.commit}${r.dirty ? ' (+ uncommitted changes)' : ''}, scale ${r.scale}` +
    (r.durationSeconds !== undefined ? `, ${Math.round(r.durationSeconds)} s` : '');
  const cpu =
    "CPU time per envelope, µs (user + system from /proc; node = the consumer's process — for a daemon process its " +
    "whole life, start-up included; postgres = the consumer's own backends, so WAL writer and checkpointer are " +
    'not counted; compare rows of one run rather than runs of different days):';
  const machine = `Machine: ${r.machine} — bench, nats-server and PostgreSQL share the cores.`;
  return (
    [
      `${run}  \n${machine}  \nDefaults: ${defaults.join(', ')}.`,
      table(['measurement', 'result', 'target', 'met'], build(r).rows),
      ...(cpuRows.length === 0 ? [] : [cpu, table(['run', 'node', 'postgres', 'nats-server'], cpuRows)]),
    ].join('\n\n') + '\n'
  );
}

const [LATEST_START, LATEST_END] = ['<!-- latest-bench:start -->', '<!-- latest-bench:end -->'];

/** `text` with its latest-bench block replaced by `tables` (kept from Prettier); null without the markers. */
function withLatestTable(text: string, tables: string): string | null {
  const [a, b] = [text.indexOf(LATEST_START), text.indexOf(LATEST_END)];
  if (a < 0 || b < a) return null;
  const from = 'From [`bench/results/latest.json`](../bench/results/latest.json):';
  const ignored = `<!-- prettier-ignore-start -->\n${from}\n\n${tables.trimEnd()}\n<!-- prettier-ignore-end -->\n`;
  return `${text.slice(0, a)}${LATEST_START}\n${ignored}${text.slice(b)}`;
}

/** Write the latest result, append its history line (the run, then its headlines), update the docs' tables. */
export function recordRun(repoRoot: string, report: BenchReport, log: (l: string) => void): void {
  const dir = join(repoRoot, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'latest.json'), JSON.stringify(report, null, 2) + '\n');
  const { date, commit, dirty, scale, machine } = report;
  const entry = { date, commit, dirty, scale, machine, ...headlines(report) };
  appendFileSync(join(dir, 'history.jsonl'), JSON.stringify(entry) + '\n');
  const doc = join(repoRoot, 'docs', 'performance.md');
  const updated = withLatestTable(readFileSync(doc, 'utf8'), renderTable(report));
  if (updated === null) log(`docs/performance.md has no ${LATEST_START} … ${LATEST_END} block: not updated`);
  else writeFileSync(doc, updated);
  log('wrote bench/results/latest.json, appended bench/results/history.jsonl, updated docs/performance.md');
}
