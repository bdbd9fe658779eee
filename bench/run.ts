/**
 * `npm run bench`: every measurement of issue 7 side by side, in one run, on this machine.
 *
 *   1. start a private nats-server and create a fresh database (dropped at the end);
 *   2. warm up (JIT) each consumer on a small untimed run;
 *   3. throughput: the raw consumer (per message, batched), then the daemon's inbox (per message,
 *      batched; logging at warn and at info);
 *   4. latency publish → commit at half the daemon's batched maximum;
 *   5. watchdog: due jobs among 1 000 000 rows, then idle sweeps;
 *   6. CPU per event and memory over 1 000 000 events (child processes);
 *   7. print the markdown table, write bench/results/<date>-<commit>.{json,md}, update the table
 *      in bench/README.md.
 *
 * Flags: `--scale N` multiplies every size (default 1: a few minutes); `--only a,b` runs some
 * sections (raw, inbox, latency, watchdog, cpu, memory) and writes nothing unless `--write`.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { cpus, totalmem } from 'node:os';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { findNatsServerBinary } from '../src/localServers/natsServer.js';
import type { CpuResult } from './cpu.js';
import { startBenchEnv, type BenchEnv } from './env.js';
import { measureLatency, type LatencyResult } from './latency.js';
import type { MemoryResult } from './memory.js';
import type { CpuSplit } from './processCpu.js';
import { renderTable, type BenchReport } from './report.js';
import { measureInbox, measureRaw, type ThroughputResult } from './throughput.js';
import { measureWatchdog } from './watchdog.js';

const SECTIONS = ['raw', 'inbox', 'latency', 'watchdog', 'cpu', 'memory'] as const;
type Section = (typeof SECTIONS)[number];

interface Args {
  scale: number;
  rounds: number;
  only: Set<Section>;
  write: boolean;
  /** Publish rate of the latency section; by default half the batched maximum of the run. */
  latencyRate: number | undefined;
}

function parseArgs(argv: string[]): Args {
  let scale = 1;
  let rounds = 3;
  let only: Set<Section> = new Set(SECTIONS);
  let write: boolean | undefined;
  let latencyRate: number | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const value = () => {
      const v = a.includes('=') ? a.slice(a.indexOf('=') + 1) : argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      return v;
    };
    if (a.startsWith('--scale')) {
      scale = Number(value());
      if (!(scale > 0)) throw new Error('--scale must be a positive number');
    } else if (a.startsWith('--rounds')) {
      rounds = Number(value());
      if (!Number.isInteger(rounds) || rounds < 1) throw new Error('--rounds must be a positive integer');
    } else if (a.startsWith('--only')) {
      const names = value().split(',');
      for (const n of names)
        if (!(SECTIONS as readonly string[]).includes(n))
          throw new Error(`--only: unknown section ${n} (${SECTIONS.join(', ')})`);
      only = new Set(names as Section[]);
      write ??= false;
    } else if (a.startsWith('--latency-rate')) {
      latencyRate = Number(value());
      if (!(latencyRate > 0)) throw new Error('--latency-rate must be a positive number');
      write ??= false;
    } else if (a === '--write') write = true;
    else if (a === '--help' || a === '-h') {
      process.stdout.write(
        'usage: npm run bench -- [--scale N] [--rounds N] [--only raw,inbox,latency,watchdog,cpu,memory] [--latency-rate N] [--write]\n',
      );
      process.exit(0);
    } else throw new Error(`unknown argument ${a}`);
  }
  return { scale, rounds, only, write: write ?? true, latencyRate };
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
 * By default V8 grows the young generation while the allocation rate stays high (seen: RSS 71 →
 * 110 MiB between 300 000 and 400 000 events, the heap in use flat at 4.6 MiB), and the parallel
 * collector's threads move RSS by ±15 % from run to run: with these flags RSS follows what the
 * run retains. The same run with V8's defaults is reported beside it.
 */
export const MEMORY_V8_FLAGS = [
  '--min-semi-space-size=16',
  '--max-semi-space-size=16',
  '--single-threaded-gc',
];

function child<T>(args: string[], v8Flags: string[] = []): T {
  const r = spawnSync(process.execPath, ['--expose-gc', ...v8Flags, join(here, 'child.js'), ...args], {
    encoding: 'utf8',
    maxBuffer: 16 * 1024 * 1024,
  });
  if (r.status !== 0) throw new Error(`child ${args.join(' ')} failed (${r.status}): ${r.stderr}`);
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
    perMessage: Math.round(5_000 * s),
    batched: Math.round(30_000 * s),
    warmup: 3_000,
    latencySeconds: 10 * s,
    watchdogRows: Math.round(1_000_000 * s),
    watchdogDue: [Math.round(10_000 * s), Math.round(100_000 * s)],
    idleSweeps: 25,
    cpuEvents: Math.round(300_000 * s),
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
        `  ${label}: ${fmt(r.perSecond)} envelopes/s (${r.envelopes} in ${r.seconds.toFixed(2)} s; CPU per envelope: ${cpuText(r.cpu)})`,
      );
      return r;
    };
    /**
     * The runs that are compared with each other, interleaved over `rounds` rounds (so a slow
     * minute of the machine hits both sides alike); each one reported as its median run.
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
    const perMessage = { name: 'inbox, per message (batch 1, concurrency 8)', batchSize: 1, concurrency: 8 };
    const batched = { name: 'inbox, batched (defaults)' };

    if (args.only.has('raw') || args.only.has('inbox') || args.only.has('latency')) {
      log('warm-up (untimed)');
      if (args.only.has('raw')) {
        await measureRaw(env, 'message', sizes.warmup);
        await measureRaw(env, 'batch', sizes.warmup);
      }
      await measureInbox(env, { ...perMessage, logLevel: 'warn' }, sizes.warmup);
      await measureInbox(env, { ...batched, logLevel: 'warn' }, sizes.warmup);
    }
    const raw = args.only.has('raw');
    const inbox = args.only.has('inbox');
    let batchedMax: number | undefined;
    if (raw || inbox) {
      log(
        `throughput: ${[raw && 'raw consumer', inbox && 'daemon inbox'].filter(Boolean).join(' and ')}, ${args.rounds} round(s)`,
      );
      const perMessageRuns: Array<[string, () => Promise<ThroughputResult>]> = [];
      const batchedRuns: Array<[string, () => Promise<ThroughputResult>]> = [];
      if (raw) perMessageRuns.push(['raw, per message', () => measureRaw(env, 'message', sizes.perMessage)]);
      if (inbox)
        perMessageRuns.push([
          'inbox, per message, warn',
          () => measureInbox(env, { ...perMessage, logLevel: 'warn' }, sizes.perMessage),
        ]);
      if (raw) batchedRuns.push(['raw, batched', () => measureRaw(env, 'batch', sizes.batched)]);
      if (inbox)
        batchedRuns.push([
          'inbox, batched, warn',
          () => measureInbox(env, { ...batched, logLevel: 'warn' }, sizes.batched),
        ]);
      await compared(perMessageRuns);
      const b = await compared(batchedRuns);
      if (inbox) batchedMax = b[b.length - 1]!.perSecond;
    }
    if (inbox) {
      // At info (one log line per envelope, as SPEC §8 asks): reported, one round.
      report.throughput.push(
        await runOnce('inbox, per message, info', () =>
          measureInbox(env, { ...perMessage, logLevel: 'info' }, sizes.perMessage),
        ),
      );
      report.throughput.push(
        await runOnce('inbox, batched, info', () =>
          measureInbox(env, { ...batched, logLevel: 'info' }, sizes.batched),
        ),
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
      log(`latency at ${fmt(rate)} envelopes/s for ${sizes.latencySeconds} s`);
      const fixed = args.latencyRate === undefined ? {} : { fixedRate: true };
      // The target, with the lightest publisher; then the same with JetStream-acknowledged
      // publishing, reported (both described in bench/latencyPublisher.ts).
      for (const publish of ['core', 'jetstream'] as const) {
        const r: LatencyResult = {
          ...(await measureLatency(env, rate, sizes.latencySeconds, 'warn', publish)),
          ...fixed,
        };
        log(
          `  ${publish} publish: p50 ${r.p50Ms.toFixed(1)} ms, p99 ${r.p99Ms.toFixed(1)} ms, max ${r.maxMs.toFixed(1)} ms (publisher lag ${r.publisherLagMs.toFixed(1)} ms)`,
        );
        if (publish === 'core') report.latency = r;
        else report.latencyJetStream = r;
      }
    }
    if (args.only.has('watchdog')) {
      log(`watchdog: ${fmt(sizes.watchdogRows)} rows`);
      // The target sweep (the last size) is repeated `rounds` times, on newly due rows each time.
      const dues = [
        ...sizes.watchdogDue.slice(0, -1),
        ...Array.from({ length: args.rounds }, () => sizes.watchdogDue.at(-1)!),
      ];
      const w = await measureWatchdog(env, sizes.watchdogRows, dues, sizes.idleSweeps, log);
      for (const sw of w.sweeps) {
        log(
          `  ${fmt(sw.due)} due: ${sw.seconds.toFixed(2)} s (${fmt(sw.perSecond)} jobs/s; CPU per job: ${cpuText(sw.cpu)})`,
        );
      }
      log(`  idle sweep: median ${w.idle.medianMs.toFixed(2)} ms`);
      report.watchdog = w;
    }
    if (args.only.has('cpu')) {
      // Three fresh processes, the median one reported: V8's young-generation sizing makes a
      // single process land in a fast or a slow regime (seen: 14 vs 50 µs for the same code).
      log('cpu per event (3 child processes)');
      const runs = [0, 1, 2]
        .map(() => child<CpuResult>(['cpu', String(sizes.cpuEvents)]))
        .sort((a, b) => a.machineUs - b.machineUs);
      const c = { ...runs[1]!, runsUs: runs.map((r) => r.machineUs) };
      log(
        `  decide()+diff ${c.machineUs.toFixed(2)} µs (runs: ${c.runsUs.map((u) => u.toFixed(1)).join(', ')}), switch+diff ${c.switchUs.toFixed(2)} µs`,
      );
      report.cpu = c;
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
  if (args.write) {
    const dir = join(repoRoot, 'bench', 'results');
    mkdirSync(dir, { recursive: true });
    const base = join(dir, `${report.date.slice(0, 10)}-${report.commit}`);
    writeFileSync(`${base}.json`, JSON.stringify(report, null, 2) + '\n');
    writeFileSync(`${base}.md`, table + '\n');
    // The latest table, in both READMEs, between their markers.
    for (const readme of [join(repoRoot, 'bench', 'README.md'), join(repoRoot, 'README.md')]) {
      const text = readFileSync(readme, 'utf8');
      const start = '<!-- latest-bench:start -->';
      const end = '<!-- latest-bench:end -->';
      const a = text.indexOf(start);
      const b = text.indexOf(end);
      if (a >= 0 && b > a) {
        const source = relative(dirname(readme), `${base}.json`);
        writeFileSync(
          readme,
          `${text.slice(0, a + start.length)}\n\nFrom \`${source}\`:\n\n${table}\n${text.slice(b)}`,
        );
      }
    }
    log(`wrote ${relative(repoRoot, base)}.json and .md; updated README.md and bench/README.md`);
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
