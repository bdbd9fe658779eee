/**
 * The bench's report: everything measured in one run (written as JSON), the markdown table made
 * from it with each target and whether this run met it, and the run's headline ratios.
 */
import type { CpuResult } from './cpu.js';
import type { LatencyResult } from './latency.js';
import type { MemoryResult } from './memory.js';
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
  latency?: LatencyResult;
  /** The same measurement with JetStream-acknowledged publishing (reported). */
  latencyJetStream?: LatencyResult;
  watchdog?: { sweeps: SweepResult[]; rawSweeps?: RawSweepResult[]; idle: IdleResult };
  cpu?: CpuResult;
  memory?: MemoryResult;
}

/** The headlines of a run: each a ratio to its ceiling of the same run. */
export interface Headlines {
  ceilings: Record<string, string>;
  ratios: Record<string, number>;
  targets: Record<string, string>;
  met: Record<string, boolean>;
  context: Record<string, number | number[]>;
}

const median = <T>(all: readonly T[], key: (t: T) => number): T | undefined =>
  [...all].sort((a, b) => key(a) - key(b))[Math.floor((all.length - 1) / 2)];

/** The ceiling of the inbox's batched runs. */
const INBOX_CEILING = 'raw, one tx per fetched batch of 100';
/** The ceiling of the inbox's per-message runs. */
const PER_MESSAGE_CEILING = 'raw, one tx per message, 8 in flight';

/** A run's headline ratios, their ceilings and targets, and the absolute rates as context. */
export function headlines(r: BenchReport): Headlines {
  const h: Headlines = { ceilings: {}, ratios: {}, targets: {}, met: {}, context: {} };
  const row = (name: string, level?: string) =>
    r.throughput.find((t) => t.name.startsWith(name) && (level === undefined || t.logLevel === level));
  const ceiling = row(INBOX_CEILING);
  const perMessageCeiling = row(PER_MESSAGE_CEILING);
  if (ceiling) h.context['ceiling_env_per_s'] = Math.round(ceiling.perSecond);
  if (perMessageCeiling) h.context['per_message_ceiling_env_per_s'] = Math.round(perMessageCeiling.perSecond);
  for (const level of ['warn', 'info']) {
    const b = row('inbox, batched', level);
    if (b && ceiling) {
      const key = `inbox_batched_${level}`;
      h.ceilings[key] = ceiling.name;
      h.ratios[key] = b.perSecond / ceiling.perSecond;
      h.context[`${key}_env_per_s`] = Math.round(b.perSecond);
      if (level === 'warn') {
        h.targets[key] = '≥ 10 000 env/s and ≥ 1.2× the ceiling';
        h.met[key] = b.perSecond >= 10_000 && h.ratios[key] >= 1.2;
      }
    }
    const m = row('inbox, per message', level);
    if (m && perMessageCeiling) {
      const key = `inbox_per_message_${level}`;
      h.ceilings[key] = perMessageCeiling.name;
      h.ratios[key] = m.perSecond / perMessageCeiling.perSecond;
      h.context[`${key}_env_per_s`] = Math.round(m.perSecond);
      if (level === 'warn') {
        h.targets[key] = '≥ 1.0× the ceiling';
        h.met[key] = h.ratios[key] >= 1.0;
      }
    }
  }
  const target = 100_000 * r.scale;
  const sweeps = r.watchdog?.sweeps.filter((s) => s.due === target) ?? [];
  const raws = r.watchdog?.rawSweeps?.filter((s) => s.due === target) ?? [];
  const sweep = median(sweeps, (s) => s.seconds);
  const raw = median(raws, (s) => s.seconds);
  if (sweep) {
    h.context['watchdog_sweep_s'] = sweep.seconds;
    if (r.scale === 1) {
      h.targets['watchdog_sweep_s'] = '≤ 4 s';
      h.met['watchdog_sweep_s'] = sweep.seconds <= 4;
    }
  }
  if (sweep && raw) {
    h.ceilings['watchdog_sweep_time'] = 'raw SQL sweep';
    h.ratios['watchdog_sweep_time'] = sweep.seconds / raw.seconds;
    h.context['raw_sweep_s'] = raw.seconds;
  }
  if (r.latency) {
    h.context['latency_rate_env_per_s'] = r.latency.rate;
    h.context['latency_p99_ms'] = r.latency.p99Ms;
    if (!r.latency.fixedRate) {
      h.targets['latency_p99'] = 'p99 ≤ 50 ms';
      h.met['latency_p99'] = r.latency.p99Ms <= 50;
    }
  }
  return h;
}

const n0 = (n: number) => Math.round(n).toLocaleString('en-US');
/** Envelopes/s of a throughput row, with its rounds when there were several. */
const rate = (t: ThroughputResult) =>
  `${n0(t.perSecond)} env/s${t.roundsPerSecond && t.roundsPerSecond.length > 1 ? ` (median of ${t.roundsPerSecond.map(n0).join(' / ')})` : ''}`;
const ok = (met: boolean) => (met ? '✅' : '❌');

/** The markdown table of a report: measurement, result, target, met. */
export function renderTable(r: BenchReport): string {
  const rows: string[][] = [];
  const find = (prefix: string, level?: string) =>
    r.throughput.find((t) => t.name.startsWith(prefix) && (level === undefined || t.logLevel === level));
  const rawMsg = find('raw, one tx per message');
  const rawBatch = find('raw, one tx per fetched batch');
  if (rawMsg) rows.push([`raw consumer, one tx per message, 8 in flight`, rate(rawMsg), 'ceiling', '']);
  if (rawBatch) rows.push([`raw consumer, one tx per fetched batch of 100`, rate(rawBatch), 'ceiling', '']);
  for (const level of ['warn', 'info']) {
    const msg = find('inbox, per message', level);
    if (msg) {
      const ratio = rawMsg ? msg.perSecond / rawMsg.perSecond : NaN;
      rows.push([
        `inbox, per message (batch 1, concurrency 8), LOG_LEVEL=${level}`,
        `${rate(msg)}${rawMsg ? ` = ${ratio.toFixed(2)}× raw` : ''}`,
        level === 'warn' ? '≥ 1.0× raw per message' : '(reported)',
        level === 'warn' && rawMsg ? ok(ratio >= 1.0) : '',
      ]);
    }
    const b = find('inbox, batched', level);
    if (b) {
      const ratio = rawBatch ? b.perSecond / rawBatch.perSecond : NaN;
      rows.push([
        `inbox, batched (batch ${b.batchSize}, concurrency ${b.concurrency}), LOG_LEVEL=${level}`,
        `${rate(b)}${rawBatch ? ` = ${ratio.toFixed(2)}× raw` : ''}`,
        level === 'warn' ? '≥ 10 000 env/s and ≥ 1.2× raw batched' : '(reported)',
        level === 'warn' && rawBatch ? ok(b.perSecond >= 10_000 && ratio >= 1.2) : '',
      ]);
    }
  }
  for (const l of [r.latency, r.latencyJetStream]) {
    if (!l) continue;
    const target = !l.fixedRate && l === r.latency;
    rows.push([
      `latency publish → commit at ${n0(l.rate)} env/s (${l.fixedRate ? 'set by --latency-rate' : '½ batched max'}), ${l.publish === 'core' ? 'plain NATS publish' : 'JetStream publish, acked'}, LOG_LEVEL=${l.logLevel}`,
      `p50 ${l.p50Ms.toFixed(1)} ms, p99 ${l.p99Ms.toFixed(1)} ms (max ${l.maxMs.toFixed(1)} ms; publisher lag ${l.publisherLagMs.toFixed(1)} ms)`,
      target ? 'p99 ≤ 50 ms' : '(reported)',
      target ? ok(l.p99Ms <= 50) : '',
    ]);
  }
  if (r.watchdog) {
    const median = <T extends { seconds: number }>(all: readonly T[]) =>
      [...all].sort((a, b) => a.seconds - b.seconds)[Math.floor((all.length - 1) / 2)]!;
    const rounds = (all: ReadonlyArray<{ seconds: number }>) =>
      all.length > 1 ? ` (median of ${all.map((w) => w.seconds.toFixed(2)).join(' / ')} s)` : '';
    const raws = r.watchdog.rawSweeps ?? [];
    const raw = raws.length > 0 ? median(raws) : undefined;
    if (raw)
      rows.push([
        `raw SQL sweep: ${n0(raw.due)} due timed out by one statement (same changes)`,
        `${raw.seconds.toFixed(2)} s${rounds(raws)}`,
        'ceiling',
        '',
      ]);
    // Sweeps of one size repeated (rounds): the median one, with every round's time.
    for (const due of [...new Set(r.watchdog.sweeps.map((w) => w.due))]) {
      const all = r.watchdog.sweeps.filter((w) => w.due === due);
      const s = median(all);
      const isTarget = due === 100_000 * r.scale;
      const vsRaw =
        raw && raw.due === due ? ` = ${(s.seconds / raw.seconds).toFixed(2)}× the raw SQL sweep's time` : '';
      rows.push([
        `watchdog, ${n0(due)} due among ${n0(s.rows)} rows (batch ${s.batchSize})`,
        `${s.seconds.toFixed(2)} s (${n0(s.perSecond)} jobs/s)${rounds(all)}${vsRaw}`,
        isTarget && r.scale === 1 ? '≤ 4 s' : '',
        isTarget && r.scale === 1 ? ok(s.seconds <= 4) : '',
      ]);
    }
    const i = r.watchdog.idle;
    rows.push([
      `watchdog idle sweep (nothing due) at ${n0(i.rows)} rows, median of ${i.sweeps}`,
      `${i.medianMs.toFixed(2)} ms (min ${i.minMs.toFixed(2)}, max ${i.maxMs.toFixed(2)})`,
      '≤ 2 ms',
      ok(i.medianMs <= 2),
    ]);
  }
  if (r.cpu) {
    rows.push([
      'CPU per event: hydrate + decide() + row diff',
      `${r.cpu.machineUs.toFixed(2)} µs${r.cpu.runsUs ? ` (median of ${r.cpu.runsUs.map((u) => u.toFixed(1)).join(' / ')})` : ''}; plain switch: ${r.cpu.switchUs.toFixed(2)} µs`,
      '≤ 30 µs',
      ok(r.cpu.machineUs <= 30),
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
      '≤ +10 %',
      ok(Math.abs(growth) <= 0.1),
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
  const cpuRows = [
    ...r.throughput.map((t) => [
      `${t.name}${t.logLevel ? `, ${t.logLevel}` : ''}`,
      us(t.cpu.nodeUs),
      us(t.cpu.postgresUs),
      us(t.cpu.natsUs),
    ]),
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
    "CPU time per envelope, µs (user + system from /proc; postgres = the consumer's own backends, so WAL writer and",
    'checkpointer are not counted; compare rows of one run rather than runs of different days):',
    '',
    '| run | node (this process) | postgres | nats-server |',
    '|---|---|---|---|',
    ...cpuRows.map((c) => `| ${c.join(' | ')} |`),
  ];
  return `${header.join('  \n')}\n\n${lines.join('\n')}\n${cpuRows.length > 0 ? `\n${cpuTable.join('\n')}\n` : ''}`;
}
