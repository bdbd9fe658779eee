/**
 * `npm run bench` (bench/README.md): the daemon against its ceilings in one run on this machine, the
 * compared runs taking turns over `--rounds`; the tables on stdout; a full run records itself.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { cpus, totalmem } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Command, InvalidArgumentError } from '../src/cli/commander.js';
import { oneOrMoreOf, wholeNumber } from '../src/cli/plumbing.js';
import { applyV8Flags } from '../src/process/v8Flags.js';
import { findNatsServerBinary } from '../workshop/localServers/natsServer.js';
import { CEILING_NAME } from './ceiling.js';
import { measureCliStartup } from './cliStartup.js';
import { median, n0, startBenchEnv, type CpuSplit } from './env.js';
import { measureFlood } from './flood.js';
import { measureGrown } from './grown.js';
import { measureHttp, renderHttp } from './http.js';
import { measureLatency, type LatencyResult } from './latency.js';
import { measurePooler } from './pooler.js';
import { collectionPauses, recordRun, renderTable, type BenchReport } from './report.js';
import { measureCeiling, measureInbox, measureProcess, rowShapes } from './throughput.js';
import type { Compared, ThroughputResult } from './throughput.js';
import { measureWatchdogInChild } from './watchdog.js';

/** The sections of a full run, and those on request (`drain`, `grown`, `http` by their flags too). */
const FULL = ['inbox', 'cold', 'latency', 'watchdog', 'cli', 'pooler'] as const;
const SECTIONS = [...FULL, 'drain', 'grown', 'http', 'flood'] as const;
const scale = (v: string) => {
  if (Number(v) > 0) return Number(v);
  throw new InvalidArgumentError('must be a number above 0');
};

const o = new Command('bench')
  .description('measure the daemon against its ceilings, side by side, on this machine')
  .option('--scale <n>', 'multiply every size', scale, 1)
  .option('--rounds <n>', 'rounds of the compared runs (medians reported)', wholeNumber(1), 3)
  .option('--latency-rounds <n>', 'rounds of the latency target', wholeNumber(1), 5)
  .option('--drain', 'add the drain section to a full run (several minutes)')
  .option('--grown', 'add the grown section to a full run (a generated history: many minutes)')
  .option('--grown-jobs <n>', "finished jobs in the grown section's history", wholeNumber(1), 5_000_000)
  .option('--http', 'add the http section to a full run (a generated history: many minutes)')
  .option('--http-jobs <n>', "jobs in the http section's history", wholeNumber(1), 5_000_000)
  .option(
    '--only <sections>',
    `run some sections only (${SECTIONS.join(',')}); records nothing`,
    oneOrMoreOf(SECTIONS),
  )
  .option('--dry-run', 'a full run that records nothing')
  .allowExcessArguments(false)
  .parse(process.argv)
  .opts<
    Record<'scale' | 'rounds' | 'latencyRounds' | 'grownJobs' | 'httpJobs', number> & {
      [flag in 'drain' | 'grown' | 'http' | 'dryRun']?: boolean;
    } & { only?: Array<(typeof SECTIONS)[number]> }
  >();
const only = new Set(o.only ?? [...FULL, ...(['drain', 'grown', 'http'] as const).filter((s) => o[s])]);
const record = o.only === undefined && o.dryRun !== true;

const repoRoot = fileURLToPath(new URL('../..', import.meta.url));
const log = (line: string) => process.stderr.write(line + '\n');
const git = (...args: string[]) =>
  spawnSync('git', args, { cwd: repoRoot, encoding: 'utf8' }).stdout?.trim() ?? '';
const us = (v: number | null) => `${v?.toFixed(0) ?? '?'} µs`;
const cpuText = (c: CpuSplit) => `node ${us(c.nodeUs)}, postgres ${us(c.postgresUs)}, nats ${us(c.natsUs)}`;

const s = o.scale;
const sizes = {
  batched: Math.round(30_000 * s),
  backlog: Math.round(50_000 * s),
  drain: Math.round(1_000_000 * s),
  watchdogRows: Math.round(1_000_000 * s),
  watchdogDue: Math.round(100_000 * s),
  pooler: Math.round(20_000 * s),
  ...{ warmup: 3_000, cliRuns: 15, latencySeconds: 10 * s },
};
// The daemon's loops run in this process as they run in the daemon's: with its V8 settings.
applyV8Flags();
const started = Date.now();
log(`bench: scale ${s}, sections ${[...only].join(', ')}`);
const env = await startBenchEnv();
process.once('SIGINT', () => void env.close().finally(() => process.exit(130)));
const cfg = env.config();
const defaults = ['INBOX_BATCH_SIZE', 'INBOX_CONCURRENCY', 'DB_POOL_SIZE', 'WATCHDOG_BATCH_SIZE'] as const;
const { rows: server } = await env.pool.query<{ v: string }>(`SELECT current_setting('server_version') AS v`);
const report: BenchReport = {
  date: new Date().toISOString(),
  commit: git('rev-parse', '--short', 'HEAD') || 'unknown',
  dirty: git('status', '--porcelain') !== '',
  scale: s,
  machine: [
    `${cpus().length} × ${cpus()[0]?.model ?? 'unknown'}, ${Math.round(totalmem() / 2 ** 30)} GiB; Node ${process.version}`,
    `PostgreSQL ${server[0]!.v}`,
    execFileSync(findNatsServerBinary(), ['--version'], { encoding: 'utf8' }).trim(),
  ].join('; '),
  defaults: Object.fromEntries([...defaults, 'WATCHDOG_CONCURRENCY' as const].map((k) => [k, cfg[k]])),
};

async function runOnce(fn: () => Promise<ThroughputResult>): Promise<ThroughputResult> {
  const r = await fn();
  log(
    `  ${r.name}: ${n0(r.perSecond)} envelopes/s (${r.envelopes} in ${r.seconds.toFixed(2)} s; CPU per envelope: ${cpuText(r.cpu)})` +
      (r.startupSeconds !== undefined ? `; start → first delivery ${r.startupSeconds.toFixed(2)} s` : '') +
      (r.maxRssBytes !== undefined ? `; max RSS ${(r.maxRssBytes / 2 ** 20).toFixed(0)} MiB` : ''),
  );
  return r;
}

/** Runs taking turns over the rounds, so a slow minute hits every side alike; each its median round. */
const compared: Compared = async (runs) => {
  const results = runs.map((): ThroughputResult[] => []);
  for (let round = 1; round <= o.rounds; round++) {
    if (o.rounds > 1) log(`round ${round} of ${o.rounds}`);
    for (const [i, fn] of runs.entries()) results[i]!.push(await runOnce(fn));
  }
  return results.map((rs) => ({
    ...median(rs, (r) => r.perSecond),
    roundsPerSecond: rs.map((r) => r.perSecond),
  }));
};

const backlog = (n: number) => `, backlog of ${n0(n)}`;
const daemonProcess = (name: string, n: number) => () =>
  measureProcess(env, { name: `${name}${backlog(n)}`, kind: 'daemon', logLevel: 'warn' }, n);

try {
  if (only.has('inbox') || only.has('latency') || only.has('cold')) {
    log('warm-up (untimed)');
    // The ceiling must leave the rows the inbox leaves for the same envelopes.
    await measureInbox(env, { name: 'warm-up', logLevel: 'warn' }, sizes.warmup);
    const inboxRows = await rowShapes(env.pool);
    await measureCeiling(env, sizes.warmup);
    const ceilingRows = await rowShapes(env.pool);
    if (ceilingRows !== inboxRows)
      throw new Error(`the ceiling left other rows than the inbox:\n${ceilingRows}\n${inboxRows}`);
    log('  the ceiling and the inbox left the same rows');
  }
  if (only.has('inbox')) {
    log(`inbox: the ceiling and the daemon's inbox, ${o.rounds} round(s)`);
    const inbox = (logLevel: 'warn' | 'info') => () =>
      measureInbox(env, { name: `inbox, batched, LOG_LEVEL=${logLevel}`, logLevel }, sizes.batched);
    const [ceiling, warn, info] = await compared([
      () => measureCeiling(env, sizes.batched),
      inbox('warn'),
      inbox('info'),
    ]);
    report.inbox = { ceiling: ceiling!, warn: warn!, info: info! };
  }
  if (only.has('cold')) {
    // The daemon as shipped started on a backlog, beside the ceiling warm here and started cold alike.
    log(`cold: daemon processes on a backlog of ${n0(sizes.backlog)}`);
    const of = backlog(sizes.backlog);
    const name = `${CEILING_NAME}, a process started cold${of}`;
    const [ceiling, ceilingProcess, daemon] = await compared([
      () => measureCeiling(env, sizes.backlog, { name: CEILING_NAME + of }),
      () => measureProcess(env, { name, kind: 'ceiling', logLevel: 'warn' }, sizes.backlog),
      daemonProcess('daemon process, cold start (first delivery → last ack), LOG_LEVEL=warn', sizes.backlog),
    ]);
    report.cold = { ceiling: ceiling!, ceilingProcess: ceilingProcess!, daemon: daemon! };
  }
  if (only.has('latency')) {
    const batched =
      report.inbox?.warn ?? (await measureInbox(env, { name: 'rate', logLevel: 'warn' }, sizes.batched));
    const rate = Math.round(batched.perSecond / 2);
    log(`latency at ${n0(rate)} envelopes/s for ${sizes.latencySeconds} s, ${o.latencyRounds} round(s)`);
    [report.latencyRounds, report.latencyCeilingRounds] = [[], []];
    const line = (r: LatencyResult) =>
      `p50 ${r.p50Ms.toFixed(1)} ms, p99 ${r.p99Ms.toFixed(1)} ms, max ${r.maxMs.toFixed(1)} ms (publisher lag ${r.publisherLagMs.toFixed(1)} ms; ${collectionPauses(r)})`;
    // Each round the ceiling's consumer, then the daemon, at the same rate.
    for (let i = 0; i < o.latencyRounds; i++) {
      const c = await measureLatency(env, rate, sizes.latencySeconds, 'ceiling');
      const d = await measureLatency(env, rate, sizes.latencySeconds, 'daemon');
      log(`  ceiling ${line(c)}\n  daemon  ${line(d)}`);
      report.latencyCeilingRounds.push(c);
      report.latencyRounds.push(d);
    }
  }
  if (only.has('watchdog')) {
    const { watchdogRows: rows, watchdogDue: due } = sizes;
    log(`watchdog: ${n0(due)} due among ${n0(rows)} rows, ${o.rounds} round(s)`);
    const urls = { databaseUrl: env.databaseUrl, natsUrl: env.nats.url };
    report.watchdog = measureWatchdogInChild({ ...urls, rows, due, rounds: o.rounds });
  }
  if (only.has('cli')) {
    log(`cli: the command's start-up beside node -e 0, ${sizes.cliRuns} runs each`);
    report.cli = measureCliStartup(sizes.cliRuns);
    for (const c of Object.values(report.cli.commands)) log(`  ${c.label}: ${c.wallMs.toFixed(0)} ms`);
  }
  if (only.has('drain')) {
    log(`drain: a daemon process on a backlog of ${n0(sizes.drain)}, RSS sampled`);
    report.drain = await runOnce(daemonProcess('daemon process, drain, LOG_LEVEL=warn', sizes.drain));
  }
  if (only.has('grown')) {
    log(`grown: the empty database beside one with a history of ${n0(o.grownJobs)} finished jobs`);
    report.grown = await measureGrown(env, { ...sizes, jobs: o.grownJobs, rounds: o.rounds }, compared, log);
  }
  if (only.has('http')) {
    log(
      `http: the inbox with and without 200 concurrent HTTP requests or 5 consoles, on a history of ${n0(o.httpJobs)} jobs`,
    );
    const args = { ...sizes, jobs: o.httpJobs, concurrency: 200, pollers: 5 };
    report.http = await measureHttp(args, compared, log);
  }
  if (only.has('pooler')) {
    log(
      `pooler: the inbox directly and through PgBouncer on ${n0(sizes.pooler)} results, ${o.rounds} round(s)`,
    );
    report.pooler = await measurePooler(env, sizes.pooler, compared);
  }
  if (only.has('flood')) {
    log('flood: a daemon process against schema-invalid envelopes among good results');
    await measureFlood(env, log);
  }
} finally {
  await env.close();
}
report.durationSeconds = (Date.now() - started) / 1000;
process.stdout.write('\n' + renderTable(report) + '\n');
if (report.http) process.stdout.write('\n' + renderHttp(report.http));
if (record) recordRun(repoRoot, report, log);
