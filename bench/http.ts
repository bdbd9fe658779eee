/**
 * The `http` section (bench/README.md, "http"): on a database with a generated history, the inbox
 * with its endpoints idle, under `concurrency` wrk connections each asking once a wave, and under
 * `pollers` reloading the console's overview, in turns; then single /metrics scrapes, each console
 * view's latency and the seq scans the overview costs, on the idle daemon; the figures statement.
 */
import { spawn, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { readFigures } from '../src/db/figures.js';
import { ROLLUP_KEEP_MS, rollUpTransitions } from '../src/db/rollup.js';
import { METRICS_REUSE_MS } from '../src/http/server.js';
import { acceptsTcp, freePort } from '../workshop/localServers/freePort.js';
import { processCpuMs } from '../workshop/processStats.js';
import { n0, percentile, sleep, timeRuns, withBenchEnv, withDb } from './env.js';
import { growHistory } from './grown.js';
import { measureInbox, startInboxDaemon, warnInbox } from './throughput.js';
import type { Compared, ThroughputResult, TimedHooks } from './throughput.js';

export type HttpResult = Awaited<ReturnType<typeof measureHttp>>;

const WAVE_MS = 1_000;
const SCRAPES = 20;
/** The daemon's endpoints wrk asks in turn. */
const HTTP_PATHS = ['/metrics', '/statechart', '/statechart.json', '/readyz'];

/** A loaded run's clients: `failures` non-2xx and failed connections, `cpuShare` their CPU over a core. */
export type HttpLoad = Record<'requests' | 'failures' | 'perSecond' | 'cpuShare', number> &
  Record<'p50Ms' | 'p99Ms' | 'maxMs' | 'figuresReads', number | null>;

/** wrk's script: the `PATHS` in turn, a rest of `WAVE_MS` after each answer, one JSON line at the end. */
const SCRIPT = `
local paths = {}
for p in string.gmatch(os.getenv("PATHS"), "[^,]+") do paths[#paths + 1] = p end
local n = 0
request = function() n = n + 1; return wrk.format("GET", paths[(n % #paths) + 1]) end
delay = function() return tonumber(os.getenv("WAVE_MS")) end
done = function(s, latency)
  local e = s.errors
  io.write(string.format(
    '{"requests":%d,"failures":%d,"perSecond":%f,"p50Ms":%f,"p99Ms":%f,"maxMs":%f}\\n',
    s.requests, e.connect + e.read + e.write + e.status + e.timeout, s.requests / (s.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
`;

/** Where wrk's connections ask: `paths` of `url`; the daemon's figure reads counted at `metricsUrl`. */
type Target = { url: string; paths: string[]; metricsUrl: string };

/**
 * Timed hooks that run wrk's `concurrency` connections while the run's clock runs, from when the
 * daemon's port accepts (its start is in the run); `loads` gets what each run's clients saw.
 */
function clientsBeside(at: Target, concurrency: number): TimedHooks & { loads: HttpLoad[] } {
  const loads: HttpLoad[] = [];
  const wrk = spawnSync('sh', ['-c', 'command -v wrk'], { encoding: 'utf8' }).stdout.trim();
  const missing = "the http section needs wrk: install Debian's wrk package (apt-get install -y wrk)";
  if (!wrk) throw new Error(missing);
  const script = join(tmpdir(), `rc-bench-http-${process.pid}.lua`);
  writeFileSync(script, SCRIPT);
  const port = Number(new URL(at.url).port);
  let stopped = false;
  let running: Promise<{ child: ReturnType<typeof spawn>; out: () => string; at: number } | undefined>;
  return {
    loads,
    started() {
      stopped = false;
      running = (async () => {
        while (!stopped && !(await acceptsTcp(port))) await sleep(20);
        if (stopped) return undefined;
        const args = ['-t1', `-c${concurrency}`, '-d1h', '--timeout', '10s', '-s', script, at.url];
        const env = { ...process.env, WAVE_MS: String(WAVE_MS), PATHS: at.paths.join(',') };
        const child = spawn(wrk, args, { env, stdio: ['ignore', 'pipe', 'inherit'] });
        let out = '';
        child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
        return { child, out: () => out, at: performance.now() };
      })();
      return Promise.resolve();
    },
    async ended() {
      stopped = true;
      const run = await running;
      const metrics = await fetch(`${at.metricsUrl}/metrics`).then((r) => r.text(), String);
      const counter = /^recognition_http_figures_reads_total\{result="(?:ok|failed)"\} (\S+)$/gm;
      const reads = [...metrics.matchAll(counter)].map((m) => Number(m[1]));
      const figuresReads = reads.length ? reads.reduce((a, b) => a + b, 0) : null;
      const none = { requests: 0, failures: 0, perSecond: 0, cpuShare: 0 };
      if (!run) return void loads.push({ ...none, p50Ms: null, p99Ms: null, maxMs: null, figuresReads });
      const cpuShare = (processCpuMs(run.child.pid!) ?? NaN) / (performance.now() - run.at);
      const exited = new Promise((resolve) => run.child.once('exit', resolve));
      run.child.kill('SIGINT');
      await exited;
      const seen = JSON.parse(run.out().trim().split('\n').at(-1) ?? '') as Omit<HttpLoad, 'cpuShare'>;
      loads.push({ ...seen, cpuShare, figuresReads });
    },
  };
}

/**
 * The history's transitions of the rollup's window taken through the product's rollup, as a
 * daemon running all along would have: the generator writes them with triggers off.
 */
const rollUpHistory = (databaseUrl: string) =>
  withDb(databaseUrl, 'bench-rollup', async (db) => {
    await sql`INSERT INTO recognition_transition_delta (job_id, from_status, to_status, event, at)
              SELECT job_id, from_status, to_status, event, at FROM recognition_job_transition
              WHERE at > now() - ${String(ROLLUP_KEEP_MS)}::bigint * interval '1 millisecond'`.execute(db);
    let deltas = 0;
    for (let b = await rollUpTransitions(db); b.deltas > 0; b = await rollUpTransitions(db))
      deltas += b.deltas;
    return deltas;
  });

/** Each console view's p95 over `runs` requests (after an untimed one), and the overview's seq scans. */
const consoleViews = (databaseUrl: string, url: string, runs = 40) =>
  withDb(databaseUrl, 'bench-console', async (db) => {
    const { rows } = await sql<Record<'job' | 'file' | 'service', string>>`
      SELECT id AS job, file_id AS file, target_service AS service
      FROM recognition_job WHERE status = 'error' ORDER BY created_at DESC LIMIT 1`.execute(db);
    const { job, file, service } = rows[0]!;
    const paths: Record<string, string> = {
      overview: '/',
      jobs: `/jobs?status=error&service=${service}`,
      job: `/jobs/${job}`,
      find: `/find?id=${file}`,
      quarantine: '/quarantine',
      services: '/services',
      audit: '/audit',
    };
    const seqScans = async () => {
      await sleep(1_500); // the statistics collector's flush
      const { rows: s } = await sql<{ n: string }>`
        SELECT sum(seq_scan)::text AS n FROM pg_stat_user_tables
        WHERE relname IN ('recognition_job', 'recognition_job_transition')`.execute(db);
      return Number(s[0]!.n);
    };
    const p95Ms: Record<string, number> = {};
    let overviewSeqScans = 0;
    for (const [view, path] of Object.entries(paths)) {
      const before = view === 'overview' ? await seqScans() : 0;
      const get = async () => {
        const res = await fetch(url + path, { redirect: 'manual' });
        await res.arrayBuffer();
        if (res.status >= 400) throw new Error(`${path} answered ${res.status}`);
      };
      p95Ms[view] = percentile(await timeRuns(runs, get), 95);
      if (view === 'overview') overviewSeqScans = (await seqScans()) - before;
    }
    return { runs, p95Ms, overviewSeqScans };
  });

/** The section; `compared` takes the runs in turns over the rounds, as other sections do. */
export async function measureHttp(
  o: { jobs: number; batched: number; warmup: number; concurrency: number; pollers: number },
  compared: Compared,
  log: (line: string) => void,
) {
  return withBenchEnv(async (env) => {
    const history = await growHistory(env, o.jobs, { randomIds: true, fillCrumbs: false }, log);
    const rolledUp = await rollUpHistory(env.databaseUrl);
    const [port, consolePort] = [await freePort(), await freePort()];
    const [baseUrl, consoleUrl] = [port, consolePort].map((p) => `http://127.0.0.1:${p}`) as [string, string];
    const intervalMs = env.config().HTTP_FIGURES_INTERVAL_MS;
    const of = `a history of ${history.jobs} jobs`;
    const overrides = { CONSOLE_PORT: String(consolePort), CONSOLE_HOST: '127.0.0.1' };
    const http = { logLevel: 'warn', httpPort: port, overrides } as const;
    await measureInbox(env, { name: 'warm-up', ...http }, o.warmup);
    const timed = clientsBeside({ url: baseUrl, paths: HTTP_PATHS, metricsUrl: baseUrl }, o.concurrency);
    const polling = clientsBeside({ url: consoleUrl, paths: ['/'], metricsUrl: baseUrl }, o.pollers);
    const [quiet, loaded, polled] = await compared([
      warnInbox(env, o.batched, `${of}, HTTP idle`, http),
      warnInbox(env, o.batched, `${of}, ${o.concurrency} concurrent requests a second`, { ...http, timed }),
      warnInbox(env, o.batched, `${of}, ${o.pollers} consoles reloading the overview`, {
        ...http,
        timed: polling,
      }),
    ]);
    const [loads, polls] = [timed.loads, polling.loads];
    for (const l of [...loads, ...polls]) log(`  clients: ${JSON.stringify(l)}`);

    // Single scrapes of the idle daemon, each past the reuse of the last one's body: every one renders.
    const daemon = await startInboxDaemon(env, http);
    let body = '';
    const scrapeOnce = async () => {
      const res = await fetch(`${baseUrl}/metrics`);
      body = await res.text();
      if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
    };
    const scrapeMs = await timeRuns(SCRAPES, scrapeOnce, METRICS_REUSE_MS + 50);
    const views = await consoleViews(env.databaseUrl, consoleUrl).finally(() => daemon.stop());
    const jobsLines = body.split('\n').filter((l) => /^recognition_jobs(_estimated)?\{/.test(l));
    log(`  /metrics on ${of}: ${jobsLines.join('; ')}`);

    // The figures statement itself, on one connection, as the daemon runs it.
    const readMs = await withDb(env.databaseUrl, 'recognition-core', (db) =>
      timeRuns(10, () => readFigures(db)),
    );
    const spread = (ms: number[]) => ({ runs: ms.length, p50Ms: percentile(ms, 50), maxMs: ms.at(-1)! });
    const scrape = { ...spread(scrapeMs), p95Ms: percentile(scrapeMs, 95) };
    const figuresRead = spread(readMs);
    const [q, l, c, { concurrency, pollers }] = [quiet!, loaded!, polled!, o];
    const ratio = l.perSecond / q.perSecond;
    const run = { history, concurrency, waveMs: WAVE_MS, intervalMs, quiet: q, loaded: l, ratio };
    const console = { pollers, polled: c, ratio: c.perSecond / q.perSecond, polls, rolledUp, ...views };
    return { ...run, loads, scrape, figuresRead, console };
  });
}

const ms = (n: number | null) => (n === null ? '?' : `${n.toFixed(1)} ms`);

/** The daemon's node CPU per answered request: the loaded run's above the idle one's. */
function perRequestMs(r: HttpResult): number {
  const extraMs = (((r.loaded.cpu.nodeUs ?? 0) - (r.quiet.cpu.nodeUs ?? 0)) * r.loaded.envelopes) / 1000;
  const requests = r.loads.reduce((a, l) => a + l.requests, 0) / Math.max(1, r.loads.length);
  return extraMs / Math.max(1, requests);
}

/** The section's lines under the run's table: the ratio and the scrape latency against their targets. */
export function renderHttp(r: HttpResult): string {
  const c = r.console;
  const during = `in the run's ${r.loaded.seconds.toFixed(1)} s and the daemon's start`;
  const reads = r.loads.map((l) => `${l.figuresReads ?? '?'} reads ${during}`).join('; ');
  const rounds = (t: ThroughputResult) => (t.roundsPerSecond ?? []).map(Math.round).join(', ');
  const views = Object.entries(c.p95Ms).map(([v, p]) => `${v} ${ms(p)}`);
  const client = (l: HttpLoad, i: number) =>
    `- clients, round ${i + 1}: ${l.requests} answered (${l.perSecond.toFixed(0)}/s), ${l.failures} failed, p50 ${ms(l.p50Ms)}, p99 ${ms(l.p99Ms)}, max ${ms(l.maxMs)}; the clients' process took ${(l.cpuShare * 100).toFixed(0)} % of a core`;
  return (
    [
      `HTTP endpoints on a history of ${n0(r.history.jobs)} jobs (${n0(r.history.transitions)} transitions), HTTP_FIGURES_INTERVAL_MS=${r.intervalMs}:`,
      `- inbox with the endpoints idle: ${Math.round(r.quiet.perSecond)} envelopes/s (rounds: ${rounds(r.quiet)})`,
      `- inbox under ${r.concurrency} concurrent requests every ${r.waveMs / 1000} s: ${Math.round(r.loaded.perSecond)} envelopes/s (rounds: ${rounds(r.loaded)})`,
      `- ratio loaded / idle: ${r.ratio.toFixed(2)}× (target ≥ 0.90: ${r.ratio >= 0.9 ? 'met' : 'NOT met'})`,
      ...r.loads.map(client),
      `- the daemon's node CPU per request (loaded minus idle, median runs): ${perRequestMs(r).toFixed(2)} ms`,
      `- figures statement runs: ${reads} (at most one per interval)`,
      `- one /metrics scrape, idle daemon, each rendered afresh: p50 ${ms(r.scrape.p50Ms)}, p95 ${ms(r.scrape.p95Ms)}, max ${ms(r.scrape.maxMs)} over ${r.scrape.runs} (target ≤ 50 ms, read on the p95: ${r.scrape.p95Ms <= 50 ? 'met' : 'NOT met'})`,
      `- the figures statement itself: p50 ${ms(r.figuresRead.p50Ms)}, max ${ms(r.figuresRead.maxMs)} over ${r.figuresRead.runs}`,
      `- inbox under ${c.pollers} consoles each reloading the overview once a second: ${Math.round(c.polled.perSecond)} envelopes/s (rounds: ${rounds(c.polled)}); ratio to idle ${c.ratio.toFixed(2)}× (target ≥ 0.95: ${c.ratio >= 0.95 ? 'met' : 'NOT met'})`,
      ...c.polls.map(client),
      `- console views, idle daemon, p95 over ${c.runs} each (the rollup holding the history's last ${ROLLUP_KEEP_MS / 86_400_000} days, ${n0(c.rolledUp)} transitions): ${views.join(', ')} (target ≤ 200 ms: ${Object.values(c.p95Ms).every((p) => p <= 200) ? 'met' : 'NOT met'})`,
      `- sequential scans of the job and transition tables while the overview answered ${c.runs + 1} times: ${c.overviewSeqScans} (target 0: ${c.overviewSeqScans === 0 ? 'met' : 'NOT met'})`,
    ].join('\n') + '\n'
  );
}
