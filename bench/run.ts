/**
 * `npm run bench`: the daemon against its ceilings, side by side, in one run, on this machine.
 *
 *   1. start a private nats-server and create a fresh database (dropped at the end);
 *   2. warm up (JIT) each consumer on a small untimed run, and check that the ceiling leaves the
 *      same rows as the inbox;
 *   3. throughput: the ceiling (bench/ceiling.ts) and the daemon's inbox batched at warn and at
 *      info, taking turns over the rounds;
 *   4. cold start: a daemon process started on a backlog, in turns with the ceiling;
 *   5. drain (with --drain): a daemon process on a backlog of 1 000 000, its RSS sampled;
 *   5½. tracing: a daemon process with tracing on, exporting to a local OTLP receiver, in turns
 *      with the same process with tracing off;
 *   6. latency publish → commit at half the daemon's batched maximum, over its rounds;
 *   7. watchdog: due jobs among 1 000 000 rows, against one SQL statement, then idle sweeps;
 *   8. memory over 1 000 000 events (a child process);
 *   9. print the markdown table; a full run records itself (bench/record.ts).
 *
 * Flags (`--help`): `--scale N` multiplies every size (default 1: a few minutes); `--only a,b`
 * runs some sections and records nothing.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { cpus, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, InvalidArgumentError } from 'commander';
import { findNatsServerBinary } from '../src/localServers/natsServer.js';
import { startBenchEnv, type BenchEnv } from './env.js';
import { measureLatency, type LatencyResult } from './latency.js';
import type { MemoryResult } from './memory.js';
import type { CpuSplit } from './processCpu.js';
import { recordRun } from './record.js';
import { renderTable, TRACING_ROWS, type BenchReport } from './report.js';
import { CEILING_NAME } from './ceiling.js';
import {
  measureCeiling,
  measureDaemonProcess,
  measureInbox,
  rowShapes,
  type ThroughputResult,
} from './throughput.js';
import type { WatchdogChildArgs } from './child.js';
import type { WatchdogResult } from './watchdog.js';
import { startOtlpReceiver } from '../src/tracing/otlpReceiver.js';

const SECTIONS = ['inbox', 'cold', 'tracing', 'latency', 'watchdog', 'memory', 'drain'] as const;
/** The sections of a full run; `drain` takes several minutes and runs with `--drain`. */
const FULL_RUN: readonly Section[] = SECTIONS.filter((s) => s !== 'drain');
type Section = (typeof SECTIONS)[number];

interface Args {
  scale: number;
  rounds: number;
  /** Rounds of the latency target. */
  latencyRounds: number;
  only: Set<Section>;
  /** Publish rate of the latency section; by default half the batched maximum of the run. */
  latencyRate: number | undefined;
  /** Record the run (latest result, history, docs): a full run at the default rate, unless --dry-run. */
  record: boolean;
}

const positiveNumber = (flag: string) => (v: string) => {
  const n = Number(v);
  if (!(n > 0)) throw new InvalidArgumentError(`${flag} must be a positive number`);
  return n;
};
const positiveInteger = (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('must be a positive integer');
  return n;
};
const sectionList = (v: string) => {
  const names = v.split(',');
  for (const n of names)
    if (!(SECTIONS as readonly string[]).includes(n))
      throw new InvalidArgumentError(`unknown section ${n} (${SECTIONS.join(', ')})`);
  return new Set(names as Section[]);
};

function parseArgs(argv: string[]): Args {
  const program = new Command('bench')
    .description('measure the daemon against its ceilings, side by side, on this machine')
    .option('--scale <n>', 'multiply every size', positiveNumber('--scale'), 1)
    .option('--rounds <n>', 'rounds of the compared runs (medians reported)', positiveInteger, 3)
    .option('--latency-rounds <n>', 'rounds of the latency target', positiveInteger, 5)
    .option('--drain', 'add the drain section to a full run (several minutes)')
    .option(
      '--only <sections>',
      `run some sections only (${SECTIONS.join(',')}); records nothing`,
      sectionList,
    )
    .option(
      '--latency-rate <n>',
      'latency at this publish rate; records nothing',
      positiveNumber('--latency-rate'),
    )
    .option('--dry-run', 'a full run that records nothing')
    .allowExcessArguments(false)
    .parse(argv, { from: 'user' });
  const o = program.opts<{
    scale: number;
    rounds: number;
    latencyRounds: number;
    drain?: boolean;
    only?: Set<Section>;
    latencyRate?: number;
    dryRun?: boolean;
  }>();
  return {
    scale: o.scale,
    rounds: o.rounds,
    latencyRounds: o.latencyRounds,
    only: o.only ?? new Set([...FULL_RUN, ...(o.drain ? (['drain'] as const) : [])]),
    latencyRate: o.latencyRate,
    record: o.only === undefined && o.latencyRate === undefined && o.dryRun !== true,
  };
}

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = join(here, '..', '..');
const log = (line: string) => process.stderr.write(line + '\n');

function git(args: string[]): string {
  try {
    return execFileSync('git', args, {
      cwd: repoRoot,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
  } catch {
    return '';
  }
}

/**
 * V8 flags of the memory child: a young generation of a fixed size, collected on the main thread.
 * By default V8 grows the young generation while the allocation rate stays high (RSS grows by
 * tens of MiB while the heap in use stays flat), and the parallel collector's threads move RSS
 * by ±15 % from run to run: with these flags RSS follows what the run retains. The same run with V8's defaults is reported beside it.
 */
export const MEMORY_V8_FLAGS = [
  '--min-semi-space-size=16',
  '--max-semi-space-size=16',
  '--single-threaded-gc',
];

/** Run bench/child.ts with `args` (its progress on this process's stderr); its JSON result. */
function child<T>(args: string[], v8Flags: string[] = []): T {
  const r = spawnSync(process.execPath, ['--expose-gc', ...v8Flags, join(here, 'child.js'), ...args], {
    encoding: 'utf8',
    maxBuffer: 16 * 1024 * 1024,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  if (r.status !== 0) throw new Error(`child ${args.join(' ')} failed (${r.status}); its output is above`);
  return JSON.parse(r.stdout) as T;
}

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
const cpuText = (c: CpuSplit) =>
  [
    `node ${c.nodeUs?.toFixed(0) ?? '?'} µs`,
    `postgres ${c.postgresUs?.toFixed(0) ?? '?'} µs`,
    ...(c.natsUs !== null ? [`nats ${c.natsUs.toFixed(0)} µs`] : []),
  ].join(', ');

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const s = args.scale;
  const sizes = {
    batched: Math.round(30_000 * s),
    backlog: Math.round(50_000 * s),
    drain: Math.round(1_000_000 * s),
    warmup: 3_000,
    latencySeconds: 10 * s,
    watchdogRows: Math.round(1_000_000 * s),
    watchdogDue: [Math.round(10_000 * s), Math.round(100_000 * s)],
    idleSweeps: 25,
    memory: [Math.round(100_000 * s), Math.round(1_000_000 * s)],
  };
  const started = Date.now();
  log(`bench: scale ${s}, sections ${[...args.only].join(', ')}`);
  const env: BenchEnv = await startBenchEnv();
  const cleanup = () => {
    void env.close().finally(() => process.exit(130));
  };
  process.once('SIGINT', cleanup);
  const report: BenchReport = {
    date: new Date().toISOString(),
    commit: git(['rev-parse', '--short', 'HEAD']) || 'unknown',
    dirty: git(['status', '--porcelain']) !== '',
    scale: s,
    machine: {
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model ?? 'unknown',
      memoryGiB: Math.round(totalmem() / 2 ** 30),
      node: process.version,
      postgres: '',
      natsServer: '',
    },
    defaults: {},
    throughput: [],
  };
  try {
    report.machine.postgres = (
      await env.pool.query<{ v: string }>(`SELECT current_setting('server_version') AS v`)
    ).rows[0]!.v;
    report.machine.natsServer = execFileSync(findNatsServerBinary(), ['--version'], {
      encoding: 'utf8',
    }).trim();
    const cfg = env.config();
    report.defaults = {
      INBOX_BATCH_SIZE: cfg.INBOX_BATCH_SIZE,
      INBOX_CONCURRENCY: cfg.INBOX_CONCURRENCY,
      DB_POOL_SIZE: cfg.DB_POOL_SIZE,
      WATCHDOG_BATCH_SIZE: cfg.WATCHDOG_BATCH_SIZE,
      WATCHDOG_CONCURRENCY: cfg.WATCHDOG_CONCURRENCY,
    };

    const runOnce = async (label: string, fn: () => Promise<ThroughputResult>) => {
      const r = await fn();
      log(
        `  ${label}: ${fmt(r.perSecond)} envelopes/s (${r.envelopes} in ${r.seconds.toFixed(2)} s; CPU per envelope: ${cpuText(r.cpu)})` +
          (r.startupSeconds !== undefined
            ? `; start → first delivery ${r.startupSeconds.toFixed(2)} s`
            : '') +
          (r.maxRssBytes !== undefined ? `; max RSS ${(r.maxRssBytes / 2 ** 20).toFixed(0)} MiB` : ''),
      );
      return r;
    };
    /**
     * The runs that are compared with each other, taking turns over `rounds` rounds (so a slow
     * minute of the machine hits every side alike); each one reported as its median run.
     */
    const compared = async (runs: Array<[label: string, fn: () => Promise<ThroughputResult>]>) => {
      const results = runs.map((): ThroughputResult[] => []);
      for (let round = 1; round <= args.rounds; round++) {
        if (args.rounds > 1) log(`round ${round} of ${args.rounds}`);
        for (const [i, [label, fn]] of runs.entries()) results[i]!.push(await runOnce(label, fn));
      }
      const medians = results.map((rs) => {
        const sorted = [...rs].sort((a, b) => a.perSecond - b.perSecond);
        return {
          ...sorted[Math.floor((sorted.length - 1) / 2)]!,
          roundsPerSecond: rs.map((r) => r.perSecond),
        };
      });
      report.throughput.push(...medians);
      return medians;
    };
    const batched = { name: 'inbox, batched (defaults)' };
    const inbox = args.only.has('inbox');

    if (inbox || args.only.has('latency') || args.only.has('cold')) {
      log('warm-up (untimed)');
      // The ceiling must leave the rows the inbox leaves for the same envelopes.
      await measureInbox(env, { ...batched, logLevel: 'warn' }, sizes.warmup);
      const inboxRows = await rowShapes(env.pool);
      await measureCeiling(env, sizes.warmup);
      const ceilingRows = await rowShapes(env.pool);
      if (ceilingRows !== inboxRows) {
        throw new Error(`the ceiling left other rows than the inbox:\n${ceilingRows}\n${inboxRows}`);
      }
      log('  the ceiling and the inbox left the same rows');
    }
    let batchedMax: number | undefined;
    if (inbox) {
      log(`throughput: the ceiling and the daemon's inbox, ${args.rounds} round(s)`);
      const b = await compared([
        ['ceiling', () => measureCeiling(env, sizes.batched)],
        ['inbox, batched, warn', () => measureInbox(env, { ...batched, logLevel: 'warn' }, sizes.batched)],
        ['inbox, batched, info', () => measureInbox(env, { ...batched, logLevel: 'info' }, sizes.batched)],
      ]);
      batchedMax = b[1]!.perSecond;
    }
    if (args.only.has('cold')) {
      log(`cold start: a daemon process on a backlog of ${fmt(sizes.backlog)}, in turns with the ceiling`);
      await compared([
        [
          `ceiling, ${fmt(sizes.backlog)} backlog`,
          () =>
            measureCeiling(env, sizes.backlog, { name: `${CEILING_NAME}, backlog of ${fmt(sizes.backlog)}` }),
        ],
        [
          'daemon process, cold start',
          () =>
            measureDaemonProcess(
              env,
              { name: `daemon process, cold start on a backlog of ${fmt(sizes.backlog)}`, logLevel: 'warn' },
              sizes.backlog,
            ),
        ],
      ]);
    }
    if (args.only.has('tracing')) {
      log('tracing: a daemon process exporting to a local OTLP receiver, in turns with the same process off');
      const receiver = await startOtlpReceiver();
      const on = { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: receiver.tracesUrl, OTEL_SDK_DISABLED: 'false' };
      try {
        await compared([
          [
            'daemon process, tracing off',
            () => measureDaemonProcess(env, { name: TRACING_ROWS.off, logLevel: 'warn' }, sizes.batched),
          ],
          [
            'daemon process, tracing on',
            () =>
              measureDaemonProcess(env, { name: TRACING_ROWS.on, logLevel: 'warn', env: on }, sizes.batched),
          ],
        ]);
        report.tracing = {
          spansReceived: receiver.spans().length,
          exportRequests: receiver.requests(),
          runs: args.rounds,
        };
        // A daemon that exported nothing did not trace: the comparison would be of off with off.
        if (report.tracing.spansReceived === 0)
          throw new Error('the daemon with tracing on exported no span');
        log(
          `  the receiver got ${fmt(report.tracing.spansReceived)} spans in ${report.tracing.exportRequests} export requests`,
        );
      } finally {
        await receiver.close();
      }
    }
    if (args.only.has('drain')) {
      log(`drain: a daemon process on a backlog of ${fmt(sizes.drain)}, RSS sampled`);
      const t0 = performance.now();
      report.drain = await runOnce('daemon process, drain', () =>
        measureDaemonProcess(
          env,
          { name: `daemon process, drain of a backlog of ${fmt(sizes.drain)}`, logLevel: 'warn' },
          sizes.drain,
        ),
      );
      log(
        `  (the drain section took ${((performance.now() - t0) / 1000).toFixed(0)} s with its preparation)`,
      );
    }
    if (args.only.has('latency')) {
      // --latency-rate: a fixed rate, to compare configurations or builds at the same load.
      const rate =
        args.latencyRate ??
        Math.round(
          (batchedMax ??
            (await measureInbox(env, { ...batched, logLevel: 'warn' }, sizes.batched)).perSecond) / 2,
        );
      log(
        `latency at ${fmt(rate)} envelopes/s for ${sizes.latencySeconds} s, ${args.latencyRounds} round(s)`,
      );
      const fixed = args.latencyRate === undefined ? {} : { fixedRate: true };
      const once = async (publish: 'core' | 'jetstream') => {
        const r: LatencyResult = {
          ...(await measureLatency(env, rate, sizes.latencySeconds, 'warn', publish)),
          ...fixed,
        };
        log(
          `  ${publish} publish: p50 ${r.p50Ms.toFixed(1)} ms, p99 ${r.p99Ms.toFixed(1)} ms, max ${r.maxMs.toFixed(1)} ms (publisher lag ${r.publisherLagMs.toFixed(1)} ms)`,
        );
        return r;
      };
      // The target, with the lightest publisher, over its rounds; then the same with
      // JetStream-acknowledged publishing, one round, reported (see bench/latencyPublisher.ts).
      report.latencyRounds = [];
      for (let i = 0; i < args.latencyRounds; i++) report.latencyRounds.push(await once('core'));
      report.latency = [...report.latencyRounds].sort((a, b) => a.p99Ms - b.p99Ms)[
        Math.floor((report.latencyRounds.length - 1) / 2)
      ];
      report.latencyJetStream = await once('jetstream');
    }
    if (args.only.has('watchdog')) {
      log(`watchdog: ${fmt(sizes.watchdogRows)} rows`);
      // The target sweep (the last size) is repeated `rounds` times, on newly due rows each time.
      const dues = [
        ...sizes.watchdogDue.slice(0, -1),
        ...Array.from({ length: args.rounds }, () => sizes.watchdogDue.at(-1)!),
      ];
      // In a process of its own, as the daemon runs it, not in this one with what the earlier
      // sections left in its heap: the sweep's node CPU is part of what is timed.
      const watchdogArgs: WatchdogChildArgs = {
        databaseUrl: env.databaseUrl,
        natsUrl: env.natsUrl,
        rows: sizes.watchdogRows,
        dues,
        idleSweeps: sizes.idleSweeps,
      };
      const w = child<WatchdogResult>(['watchdog', JSON.stringify(watchdogArgs)]);
      for (const sw of w.sweeps) {
        log(
          `  ${fmt(sw.due)} due: ${sw.seconds.toFixed(2)} s (${fmt(sw.perSecond)} jobs/s; CPU per job: ${cpuText(sw.cpu)})`,
        );
      }
      log(`  idle sweep: median ${w.idle.medianMs.toFixed(2)} ms`);
      report.watchdog = w;
    }
    if (args.only.has('memory')) {
      log('memory (child process)');
      const m: MemoryResult = {
        ...child<MemoryResult>(['memory', sizes.memory.join(',')], MEMORY_V8_FLAGS),
        v8Flags: MEMORY_V8_FLAGS,
        withDefaultFlags: child<MemoryResult>(['memory', sizes.memory.join(',')]),
      };
      log(
        `  ${m.checkpoints.map((c) => `${fmt(c.events)} events: ${(c.rssBytes / 2 ** 20).toFixed(1)} MiB`).join(', ')}`,
      );
      report.memory = m;
    }
  } finally {
    await env.close();
  }
  report.durationSeconds = (Date.now() - started) / 1000;

  const table = renderTable(report);
  process.stdout.write('\n' + table + '\n');
  if (args.record) recordRun(repoRoot, report, table, log);
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
