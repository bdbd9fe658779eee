/**
 * The `http` section's clients, a process of their own (forked by bench/http.ts) so that their
 * work is not the daemon's: waves of `concurrency` requests at once, one wave every `waveMs`,
 * spread over /metrics, /statechart, /statechart.json and /readyz, until the parent says `stop`;
 * then they send what they saw (requests, failures, latency percentiles) and exit.
 */
import { percentile } from './latency.js';

const [baseUrl, concurrencyArg, waveMsArg] = process.argv.slice(2);
const concurrency = Number(concurrencyArg);
const waveMs = Number(waveMsArg);
const PATHS = ['/metrics', '/statechart', '/statechart.json', '/readyz'];

let stopping = false;
process.on('message', (m) => {
  if (m === 'stop') stopping = true;
});

const ms: number[] = [];
let failures = 0;
let refused = 0;
let lastMetrics = '';
const started = performance.now();
const cpu0 = process.cpuUsage();
while (!stopping) {
  const wave = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async (_, i) => {
      const t = performance.now();
      try {
        const path = PATHS[i % PATHS.length]!;
        const res = await fetch(`${baseUrl}${path}`);
        const body = await res.text();
        if (path === '/metrics' && res.status === 200) lastMetrics = body;
        if (res.status === 200) ms.push(performance.now() - t);
        else failures++;
      } catch {
        // Before the daemon listens (its start is in the timed run) and after it stops.
        refused++;
      }
    }),
  );
  await new Promise((r) => setTimeout(r, Math.max(0, waveMs - (performance.now() - wave))));
}
const seconds = (performance.now() - started) / 1000;
const cpu = process.cpuUsage(cpu0);
ms.sort((a, b) => a - b);
/** The daemon's figures reads over its life so far, from its last /metrics. */
const reads = [
  ...lastMetrics.matchAll(/^recognition_http_figures_reads_total\{result="(?:ok|failed)"\} (\S+)$/gm),
];
process.send?.(
  {
    requests: ms.length,
    failures,
    refused,
    perSecond: ms.length / seconds,
    p50Ms: ms.length ? percentile(ms, 50) : null,
    p99Ms: ms.length ? percentile(ms, 99) : null,
    maxMs: ms.length ? ms[ms.length - 1]! : null,
    /** The clients' own CPU, as a share of one core over the run. */
    cpuShare: (cpu.user + cpu.system) / 1e6 / seconds,
    figuresReads: reads.length ? reads.reduce((a, m) => a + Number(m[1]), 0) : null,
  },
  () => process.exit(0),
);
