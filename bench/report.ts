/**
 * The bench's report: everything measured in one run (written as JSON), the markdown table made
 * from it with each target and whether this run met it, and the run's headline ratios.
 */
import type { LatencyResult } from './latency.js';
import type { MemoryResult } from './memory.js';
import { CEILING_NAME } from './ceiling.js';
import type { ThroughputResult } from './throughput.js';
import type { IdleResult, RawSweepResult, SweepResult } from './watchdog.js';

/** One run of `npm run bench`. */
export interface BenchReport {
  date: string;
  commit: string;
  /** Uncommitted changes were present: the figures are of the working tree, not of `commit`. */
  dirty: boolean;
  scale: number;
  durationSeconds?: number;
  machine: {
    cpus: number;
    cpuModel: string;
    memoryGiB: number;
    node: string;
    postgres: string;
    natsServer: string;
  };
  /** The configuration defaults the daemon ran with. */
  defaults: Record<string, number>;
  throughput: ThroughputResult[];
  /** The latency target's round of median p99. */
  latency?: LatencyResult;
  /** Every round of the latency target. */
  latencyRounds?: LatencyResult[];
  /** The same measurement with JetStream-acknowledged publishing (reported). */
  latencyJetStream?: LatencyResult;
  /** A daemon process draining a large backlog, its RSS sampled. */
  drain?: ThroughputResult;
  watchdog?: { sweeps: SweepResult[]; rawSweeps?: RawSweepResult[]; idle: IdleResult };
  memory?: MemoryResult;
  /** What the OTLP receiver of the tracing section got from the daemon process with tracing on. */
  tracing?: { spansReceived: number; exportRequests: number; runs?: number };
}

/** The rows of the tracing section (none starts with a prefix another row is found by). */
export const TRACING_ROWS = {
  off: 'tracing section: daemon process, tracing off',
  on: 'tracing section: daemon process, tracing on (OTLP/HTTP to a local receiver, pg spans)',
} as const;

/** The headlines of a run: each a ratio to its ceiling of the same run. */
export interface Headlines {
  ceilings: Record<string, string>;
  ratios: Record<string, number>;
  targets: Record<string, string>;
  met: Record<string, boolean>;
  context: Record<string, number | number[]>;
}

/** Each target: what is compared with what, and the bound. */
export const TARGETS = {
  inbox_batched_warn: { text: '≥ 0.9× the ceiling', min: 0.9 },
  inbox_batched_info: { text: '≥ 0.8× the ceiling', min: 0.8 },
  inbox_cold_start: { text: '≥ 0.85× the ceiling', min: 0.85 },
  latency_p99: { text: 'p99 ≤ 50 ms in ≥ 4 of 5 rounds', maxMs: 50, share: 0.8 },
  watchdog_sweep_time: { text: "≤ 1.25× the raw SQL sweep's time", max: 1.25 },
  drain_rss: { text: 'max RSS < 300 MiB', maxMiB: 300 },
} as const;

const median = <T>(all: readonly T[], key: (t: T) => number): T | undefined =>
  [...all].sort((a, b) => key(a) - key(b))[Math.floor((all.length - 1) / 2)];
const mib = (v: number) => v / 2 ** 20;

/** The rows of a report the targets read. */
function rowsOf(r: BenchReport) {
  const find = (prefix: string, level?: string) =>
    r.throughput.find((t) => t.name.startsWith(prefix) && (level === undefined || t.logLevel === level));
  const target = 100_000 * r.scale;
  return {
    ceiling: r.throughput.find((t) => t.name === CEILING_NAME),
    coldCeiling: find(`${CEILING_NAME}, backlog`),
    cold: find('daemon process, cold start'),
    inbox: (kind: 'batched', level: 'warn' | 'info') => find(`inbox, ${kind}`, level),
    tracingOff: r.throughput.find((t) => t.name === TRACING_ROWS.off),
    tracingOn: r.throughput.find((t) => t.name === TRACING_ROWS.on),
    sweep: median(r.watchdog?.sweeps.filter((s) => s.due === target) ?? [], (s) => s.seconds),
    rawSweep: median(r.watchdog?.rawSweeps?.filter((s) => s.due === target) ?? [], (s) => s.seconds),
  };
}

/** How many latency rounds a run needs under the bound to meet the latency target. */
const latencyRoundsNeeded = (rounds: number) => Math.ceil(TARGETS.latency_p99.share * rounds);

/** A run's headline ratios, their ceilings and targets, and the absolute figures as context. */
export function headlines(r: BenchReport): Headlines {
  const h: Headlines = { ceilings: {}, ratios: {}, targets: {}, met: {}, context: {} };
  const x = rowsOf(r);
  const rate = (key: string, t: ThroughputResult | undefined) => {
    if (t) h.context[`${key}_env_per_s`] = Math.round(t.perSecond);
  };
  rate('ceiling', x.ceiling);
  const ratio = (
    key: keyof typeof TARGETS | string,
    t: ThroughputResult | undefined,
    c: ThroughputResult | undefined,
  ) => {
    rate(key, t);
    if (!t || !c) return;
    h.ceilings[key] = c.name;
    h.ratios[key] = t.perSecond / c.perSecond;
    const target = TARGETS[key as keyof typeof TARGETS] as { text: string; min?: number } | undefined;
    if (target?.min !== undefined) {
      h.targets[key] = target.text;
      h.met[key] = h.ratios[key] >= target.min;
    }
  };
  ratio('inbox_batched_warn', x.inbox('batched', 'warn'), x.ceiling);
  ratio('inbox_batched_info', x.inbox('batched', 'info'), x.ceiling);
  ratio('inbox_cold_start', x.cold, x.coldCeiling);
  if (x.cold?.startupSeconds !== undefined)
    h.context['cold_start_to_first_delivery_s'] = x.cold.startupSeconds;
  ratio('inbox_tracing_on', x.tracingOn, x.tracingOff);
  if (r.tracing) h.context['tracing_spans_received'] = r.tracing.spansReceived;
  if (x.sweep) h.context['watchdog_sweep_s'] = x.sweep.seconds;
  if (x.sweep && x.rawSweep) {
    h.ceilings['watchdog_sweep_time'] = 'raw SQL sweep';
    h.ratios['watchdog_sweep_time'] = x.sweep.seconds / x.rawSweep.seconds;
    h.context['raw_sweep_s'] = x.rawSweep.seconds;
    h.targets['watchdog_sweep_time'] = TARGETS.watchdog_sweep_time.text;
    h.met['watchdog_sweep_time'] = h.ratios['watchdog_sweep_time'] <= TARGETS.watchdog_sweep_time.max;
  }
  const rounds = r.latencyRounds ?? (r.latency ? [r.latency] : []);
  if (rounds.length > 0) {
    h.context['latency_rate_env_per_s'] = rounds[0]!.rate;
    h.context['latency_p99_ms'] = rounds.map((l) => l.p99Ms);
    if (!rounds[0]!.fixedRate) {
      const under = rounds.filter((l) => l.p99Ms <= TARGETS.latency_p99.maxMs).length;
      const need = latencyRoundsNeeded(rounds.length);
      h.targets['latency_p99'] =
        `p99 ≤ ${TARGETS.latency_p99.maxMs} ms in ≥ ${need} of ${rounds.length} rounds`;
      h.met['latency_p99'] = under >= need;
    }
  }
  if (r.drain?.maxRssBytes !== undefined) {
    h.context['drain_max_rss_mib'] = mib(r.drain.maxRssBytes);
    rate('drain', r.drain);
    h.targets['drain_rss'] = TARGETS.drain_rss.text;
    h.met['drain_rss'] = mib(r.drain.maxRssBytes) < TARGETS.drain_rss.maxMiB;
  }
  return h;
}

const n0 = (n: number) => Math.round(n).toLocaleString('en-US');
/** Envelopes/s of a throughput row, with its rounds when there were several. */
const rate = (t: ThroughputResult) =>
  `${n0(t.perSecond)} env/s${t.roundsPerSecond && t.roundsPerSecond.length > 1 ? ` (median of ${t.roundsPerSecond.map(n0).join(' / ')})` : ''}`;
const ok = (met: boolean | undefined) => (met === undefined ? '' : met ? '✅' : '❌');

/** The markdown table of a report: measurement, result, target, met. */
export function renderTable(r: BenchReport): string {
  const rows: string[][] = [];
  const x = rowsOf(r);
  const h = headlines(r);
  const vs = (key: string, what: string) =>
    h.ratios[key] !== undefined ? ` = ${h.ratios[key].toFixed(2)}× ${what}` : '';
  if (x.ceiling) rows.push([x.ceiling.name, rate(x.ceiling), 'ceiling', '']);
  for (const level of ['warn', 'info'] as const) {
    const b = x.inbox('batched', level);
    const key = `inbox_batched_${level}`;
    if (b)
      rows.push([
        `inbox, batched (batch ${b.batchSize}, concurrency ${b.concurrency}), LOG_LEVEL=${level}`,
        `${rate(b)}${vs(key, 'the ceiling')}`,
        h.targets[key] ?? '',
        ok(h.met[key]),
      ]);
  }
  if (x.coldCeiling) rows.push([x.coldCeiling.name, rate(x.coldCeiling), 'ceiling', '']);
  if (x.cold)
    rows.push([
      `${x.cold.name} (first delivery → last ack), LOG_LEVEL=${x.cold.logLevel}`,
      `${rate(x.cold)}${vs('inbox_cold_start', 'the ceiling')}; start → first delivery ${x.cold.startupSeconds?.toFixed(2)} s`,
      h.targets['inbox_cold_start'] ?? '',
      ok(h.met['inbox_cold_start']),
    ]);
  if (x.tracingOff) rows.push([x.tracingOff.name, rate(x.tracingOff), '(reported)', '']);
  if (x.tracingOn)
    rows.push([
      x.tracingOn.name,
      `${rate(x.tracingOn)}${vs('inbox_tracing_on', 'the same process with tracing off')}${r.tracing ? `; ${n0(r.tracing.spansReceived)} spans received in ${r.tracing.runs ?? 1} run(s)` : ''}`,
      '(reported)',
      '',
    ]);
  const rounds = r.latencyRounds ?? (r.latency ? [r.latency] : []);
  if (rounds.length > 0) {
    const l = rounds[0]!;
    const under = rounds.filter((t) => t.p99Ms <= TARGETS.latency_p99.maxMs).length;
    const worst = Math.max(...rounds.map((t) => t.publisherLagMs));
    rows.push([
      `latency publish → commit at ${n0(l.rate)} env/s (${l.fixedRate ? 'set by --latency-rate' : '½ batched max'}), plain NATS publish, LOG_LEVEL=${l.logLevel}`,
      `p99 ${rounds.map((t) => t.p99Ms.toFixed(1)).join(' / ')} ms: ${under} of ${rounds.length} rounds ≤ ${TARGETS.latency_p99.maxMs} ms (p50 of the median round ${r.latency?.p50Ms.toFixed(1)} ms; worst publisher lag ${worst.toFixed(1)} ms)`,
      h.targets['latency_p99'] ?? '(reported)',
      ok(h.met['latency_p99']),
    ]);
  }
  if (x.sweep) {
    const all = r.watchdog!.sweeps.filter((w) => w.due === x.sweep!.due);
    const raws = r.watchdog!.rawSweeps?.filter((w) => w.due === x.sweep!.due) ?? [];
    const times = (ws: ReadonlyArray<{ seconds: number }>) =>
      ws.length > 1 ? ` (median of ${ws.map((w) => w.seconds.toFixed(2)).join(' / ')} s)` : '';
    if (x.rawSweep)
      rows.push([
        `raw SQL sweep: ${n0(x.rawSweep.due)} due timed out by one statement (same changes)`,
        `${x.rawSweep.seconds.toFixed(2)} s${times(raws)}`,
        'ceiling',
        '',
      ]);
    rows.push([
      `watchdog, ${n0(x.sweep.due)} due among ${n0(x.sweep.rows)} rows (batch ${x.sweep.batchSize})`,
      `${x.sweep.seconds.toFixed(2)} s${times(all)}${vs('watchdog_sweep_time', "the raw SQL sweep's time")}`,
      h.targets['watchdog_sweep_time'] ?? '',
      ok(h.met['watchdog_sweep_time']),
    ]);
  }
  if (r.drain)
    rows.push([
      `${r.drain.name}, LOG_LEVEL=${r.drain.logLevel}`,
      `max RSS ${mib(r.drain.maxRssBytes ?? NaN).toFixed(0)} MiB (sampled every 100 ms); ${rate(r.drain)}`,
      h.targets['drain_rss'] ?? '',
      ok(h.met['drain_rss']),
    ]);
  else
    rows.push([
      'RSS of a daemon process draining a backlog of 1,000,000',
      'not run (`--drain`)',
      TARGETS.drain_rss.text,
      '',
    ]);

  // Reported: the other measurements.
  if (r.latencyJetStream) {
    const l = r.latencyJetStream;
    rows.push([
      `latency publish → commit at ${n0(l.rate)} env/s, JetStream publish, acked, LOG_LEVEL=${l.logLevel}`,
      `p50 ${l.p50Ms.toFixed(1)} ms, p99 ${l.p99Ms.toFixed(1)} ms (max ${l.maxMs.toFixed(1)} ms; publisher lag ${l.publisherLagMs.toFixed(1)} ms)`,
      '(reported)',
      '',
    ]);
  }
  if (r.watchdog) {
    for (const w of r.watchdog.sweeps.filter((s) => s.due !== x.sweep?.due))
      rows.push([
        `watchdog, ${n0(w.due)} due among ${n0(w.rows)} rows (batch ${w.batchSize})`,
        `${w.seconds.toFixed(2)} s (${n0(w.perSecond)} jobs/s)`,
        '(reported)',
        '',
      ]);
    const i = r.watchdog.idle;
    rows.push([
      `watchdog idle sweep (nothing due) at ${n0(i.rows)} rows, median of ${i.sweeps}`,
      `${i.medianMs.toFixed(2)} ms (min ${i.minMs.toFixed(2)}, max ${i.maxMs.toFixed(2)})`,
      '(reported)',
      '',
    ]);
  }
  if (r.memory && r.memory.checkpoints.length >= 2) {
    const [a, b] = [r.memory.checkpoints[0]!, r.memory.checkpoints[r.memory.checkpoints.length - 1]!];
    const growth = b.rssBytes / a.rssBytes - 1;
    const mib = (v: number) => (v / 2 ** 20).toFixed(1);
    const pct = (g: number) => `${g >= 0 ? '+' : ''}${(g * 100).toFixed(1)} %`;
    rows.push([
      `RSS after ${n0(a.events)} / ${n0(b.events)} events (decide()+diff)${r.memory.v8Flags ? ', fixed young generation' : ''}`,
      `${mib(a.rssBytes)} / ${mib(b.rssBytes)} MiB (${pct(growth)}); heap in use ${mib(a.heapUsedBytes)} / ${mib(b.heapUsedBytes)} MiB`,
      '(reported)',
      '',
    ]);
    const d = r.memory.withDefaultFlags?.checkpoints;
    if (d && d.length >= 2) {
      const [da, db] = [d[0]!, d[d.length - 1]!];
      rows.push([
        `RSS, the same with V8's default flags (the young generation grows)`,
        `${mib(da.rssBytes)} / ${mib(db.rssBytes)} MiB (${pct(db.rssBytes / da.rssBytes - 1)}); heap in use ${mib(da.heapUsedBytes)} / ${mib(db.heapUsedBytes)} MiB`,
        '(reported)',
        '',
      ]);
    }
  }
  const m = r.machine;
  const header = [
    `Run ${r.date.slice(0, 16).replace('T', ' ')} UTC, commit ${r.commit}${r.dirty ? ' (+ uncommitted changes)' : ''}, scale ${r.scale}` +
      (r.durationSeconds !== undefined ? `, ${Math.round(r.durationSeconds)} s` : ''),
    `Machine: ${m.cpus} × ${m.cpuModel}, ${m.memoryGiB} GiB; Node ${m.node}; PostgreSQL ${m.postgres}; ${m.natsServer}` +
      ` — bench, nats-server and PostgreSQL share the cores.`,
    `Defaults: ${Object.entries(r.defaults)
      .map(([k, v]) => `${k}=${v}`)
      .join(', ')}.`,
  ];
  const lines = [
    '| measurement | result | target | met |',
    '|---|---|---|---|',
    ...rows.map((c) => `| ${c.join(' | ')} |`),
  ];
  const us = (v: number | null) => (v === null ? '?' : v.toFixed(0));
  const cpuRow = (t: ThroughputResult) => [
    `${t.name}${t.logLevel ? `, ${t.logLevel}` : ''}`,
    us(t.cpu.nodeUs),
    us(t.cpu.postgresUs),
    us(t.cpu.natsUs),
  ];
  // The daemon and its ceiling first, side by side, with what the daemon spends above it.
  const sideBySide = [
    x.ceiling,
    x.inbox('batched', 'warn'),
    x.inbox('batched', 'info'),
    x.coldCeiling,
    x.cold,
  ];
  const inboxWarn = x.inbox('batched', 'warn');
  const above = (a: number | null, b: number | null) =>
    a === null || b === null ? '?' : String(Math.round(a - b) || 0);
  const shown = (ts: Array<ThroughputResult | undefined>) =>
    ts.filter((t): t is ThroughputResult => t !== undefined).map(cpuRow);
  const cpuRows = [
    ...shown(sideBySide.slice(0, 3)),
    ...(x.ceiling && inboxWarn
      ? [
          [
            '_inbox batched (warn) above the ceiling_',
            above(inboxWarn.cpu.nodeUs, x.ceiling.cpu.nodeUs),
            above(inboxWarn.cpu.postgresUs, x.ceiling.cpu.postgresUs),
            above(inboxWarn.cpu.natsUs, x.ceiling.cpu.natsUs),
          ],
        ]
      : []),
    ...shown(sideBySide.slice(3)),
    ...r.throughput.filter((t) => !sideBySide.includes(t)).map(cpuRow),
    ...(r.drain ? [cpuRow(r.drain)] : []),
    ...(r.watchdog?.sweeps ?? []).map((w) => [
      `watchdog, ${n0(w.due)} due (per job)`,
      us(w.cpu.nodeUs),
      us(w.cpu.postgresUs),
      '–',
    ]),
    ...(r.watchdog?.rawSweeps ?? []).map((w) => [
      `raw SQL sweep, ${n0(w.due)} due (per job)`,
      '–',
      us(w.postgresUs),
      '–',
    ]),
  ];
  const cpuTable = [
    "CPU time per envelope, µs (user + system from /proc; node = the consumer's process — for a daemon process its",
    "whole life, start-up included; postgres = the consumer's own backends, so WAL writer and checkpointer are not",
    'counted; compare rows of one run rather than runs of different days):',
    '',
    '| run | node | postgres | nats-server |',
    '|---|---|---|---|',
    ...cpuRows.map((c) => `| ${c.join(' | ')} |`),
  ];
  return `${header.join('  \n')}\n\n${lines.join('\n')}\n${cpuRows.length > 0 ? `\n${cpuTable.join('\n')}\n` : ''}`;
}
