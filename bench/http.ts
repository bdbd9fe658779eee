/**
 * The `http` section: what the HTTP endpoints cost the inbox on a database with a history of
 * `jobs` jobs (workshop/localServers/jobHistory.ts, random file ids as uploaders give them,
 * vacuumed and analysed). The daemon's inbox with its HTTP endpoints runs twice on the same
 * backlog, in turns over the rounds: with nobody asking, and under waves of `concurrency`
 * concurrent requests to /metrics, /statechart, /statechart.json and /readyz, one wave a second,
 * sent by wrk (bench/httpLoad.ts). Then, on the idle daemon, single /metrics
 * scrapes one after another, and the figures statement itself on the history.
 */
import { openDb } from '../src/db/database.js';
import { readFigures } from '../src/db/figures.js';
import { METRICS_REUSE_MS } from '../src/http/server.js';
import { freePort } from '../workshop/localServers/freePort.js';
import { generateJobHistory } from '../workshop/localServers/jobHistory.js';
import { checkpoint, startBenchEnv, type BenchEnv } from './env.js';
import { startHttpLoad, type HttpLoad } from './httpLoad.js';
import { percentile } from './latency.js';
import { measureInbox, startInboxDaemon, type ThroughputResult, type TimedHooks } from './throughput.js';

export type HttpResult = Awaited<ReturnType<typeof measureHttp>>;

const WAVE_MS = 1_000;
const SCRAPES = 20;

/** Generate the history: about `jobs` jobs, a fifth of them retried attempts. */
async function growHistory(env: BenchEnv, jobs: number) {
  const started = performance.now();
  const client = await env.pool.connect();
  try {
    const c = await generateJobHistory(client, {
      files: Math.round(jobs * 0.8),
      retryEvery: 4,
      randomFileIds: true,
    });
    // A long-lived table is vacuumed (its visibility map set) and analysed.
    await client.query('VACUUM ANALYZE s3_object, stored_file, recognition_job, recognition_job_transition');
    await checkpoint(env.pool);
    env.history = true;
    return { jobs: c.jobs, transitions: c.transitions, seconds: (performance.now() - started) / 1000 };
  } finally {
    client.release();
  }
}

/** Timed hooks that run the clients while the run's clock runs; `loads` gets what they saw. */
function clientsBeside(baseUrl: string, concurrency: number, loads: HttpLoad[]): TimedHooks {
  let clients: { stop(): Promise<HttpLoad> } | undefined;
  return {
    started() {
      clients = startHttpLoad(baseUrl, concurrency, WAVE_MS);
      return Promise.resolve();
    },
    async ended() {
      if (clients) loads.push(await clients.stop());
    },
  };
}

const byValue = (a: number, b: number) => a - b;

/** The section; `compared` takes the runs in turns over the rounds, as other sections do. */
export async function measureHttp(
  o: { jobs: number; batched: number; warmup: number; concurrency: number },
  compared: (runs: Array<() => Promise<ThroughputResult>>) => Promise<ThroughputResult[]>,
  log: (line: string) => void,
) {
  const env = await startBenchEnv();
  try {
    const history = await growHistory(env, o.jobs);
    log(`  generated: ${JSON.stringify(history)}`);
    const port = await freePort();
    const baseUrl = `http://127.0.0.1:${port}`;
    const intervalMs = env.config().HTTP_FIGURES_INTERVAL_MS;
    await measureInbox(env, { name: 'warm-up', logLevel: 'warn', httpPort: port }, o.warmup);
    const loads: HttpLoad[] = [];
    const of = `a history of ${history.jobs} jobs`;
    const [quiet, loaded] = await compared([
      () =>
        measureInbox(
          env,
          { name: `inbox, batched, LOG_LEVEL=warn, ${of}, HTTP idle`, logLevel: 'warn', httpPort: port },
          o.batched,
        ),
      () =>
        measureInbox(
          env,
          {
            name: `inbox, batched, LOG_LEVEL=warn, ${of}, ${o.concurrency} concurrent requests a second`,
            logLevel: 'warn',
            httpPort: port,
            timed: clientsBeside(baseUrl, o.concurrency, loads),
          },
          o.batched,
        ),
    ]);
    for (const l of loads) log(`  clients: ${JSON.stringify(l)}`);

    // Single scrapes of the idle daemon, each past the reuse of the last one's body: every one renders.
    const daemon = await startInboxDaemon(env, 'warn', undefined, {}, port);
    const scrapeMs: number[] = [];
    let body = '';
    try {
      for (let i = 0; i <= SCRAPES; i++) {
        const started = performance.now();
        const res = await fetch(`${baseUrl}/metrics`);
        body = await res.text();
        if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
        if (i > 0) scrapeMs.push(performance.now() - started);
        await new Promise((r) => setTimeout(r, METRICS_REUSE_MS + 50));
      }
    } finally {
      await daemon.stop();
    }
    scrapeMs.sort(byValue);
    const jobsLines = body.split('\n').filter((l) => /^recognition_jobs(_estimated)?\{/.test(l));
    log(`  /metrics on ${of}: ${jobsLines.join('; ')}`);

    // The figures statement itself, on one connection, as the daemon runs it.
    const f = openDb(env.databaseUrl, { max: 1 });
    const readMs: number[] = [];
    try {
      for (let i = 0; i <= 10; i++) {
        const started = performance.now();
        await readFigures(f.db);
        if (i > 0) readMs.push(performance.now() - started);
      }
    } finally {
      await f.close();
    }
    readMs.sort(byValue);
    return {
      history,
      concurrency: o.concurrency,
      waveMs: WAVE_MS,
      intervalMs,
      quiet: quiet!,
      loaded: loaded!,
      ratio: loaded!.perSecond / quiet!.perSecond,
      loads,
      scrape: {
        runs: SCRAPES,
        p50Ms: percentile(scrapeMs, 50),
        p95Ms: percentile(scrapeMs, 95),
        maxMs: scrapeMs[scrapeMs.length - 1]!,
      },
      figuresRead: { runs: readMs.length, p50Ms: percentile(readMs, 50), maxMs: readMs[readMs.length - 1]! },
    };
  } finally {
    await env.close();
  }
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
  const reads = r.loads
    .map(
      (l) =>
        `${l.figuresReads ?? '?'} reads in the run's ${r.loaded.seconds.toFixed(1)} s and the daemon's start`,
    )
    .join('; ');
  return (
    [
      `HTTP endpoints on a history of ${r.history.jobs.toLocaleString('en-US')} jobs ` +
        `(${r.history.transitions.toLocaleString('en-US')} transitions), HTTP_FIGURES_INTERVAL_MS=${r.intervalMs}:`,
      `- inbox with the endpoints idle: ${Math.round(r.quiet.perSecond)} envelopes/s (rounds: ${(r.quiet.roundsPerSecond ?? []).map(Math.round).join(', ')})`,
      `- inbox under ${r.concurrency} concurrent requests every ${r.waveMs / 1000} s: ${Math.round(r.loaded.perSecond)} envelopes/s (rounds: ${(r.loaded.roundsPerSecond ?? []).map(Math.round).join(', ')})`,
      `- ratio loaded / idle: ${r.ratio.toFixed(2)}× (target ≥ 0.90: ${r.ratio >= 0.9 ? 'met' : 'NOT met'})`,
      ...r.loads.map(
        (l, i) =>
          `- clients, round ${i + 1}: ${l.requests} answered (${l.perSecond.toFixed(0)}/s), ${l.failures} failed, p50 ${ms(l.p50Ms)}, p99 ${ms(l.p99Ms)}, max ${ms(l.maxMs)}; the clients' process took ${(l.cpuShare * 100).toFixed(0)} % of a core`,
      ),
      `- the daemon's node CPU per request (loaded minus idle, median runs): ${perRequestMs(r).toFixed(2)} ms`,
      `- figures statement runs: ${reads} (at most one per interval)`,
      `- one /metrics scrape, idle daemon, each rendered afresh: p50 ${ms(r.scrape.p50Ms)}, p95 ${ms(r.scrape.p95Ms)}, max ${ms(r.scrape.maxMs)} over ${r.scrape.runs} (target ≤ 50 ms, read on the p95: ${r.scrape.p95Ms <= 50 ? 'met' : 'NOT met'})`,
      `- the figures statement itself: p50 ${ms(r.figuresRead.p50Ms)}, max ${ms(r.figuresRead.maxMs)} over ${r.figuresRead.runs}`,
    ].join('\n') + '\n'
  );
}
