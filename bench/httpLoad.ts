/**
 * The `http` section's clients: wrk (Debian's package), a C load generator whose own CPU per
 * request is small beside the daemon's, so that the section measures what the requests cost the
 * daemon rather than what a client costs the two cores they share. `concurrency` connections
 * each send a request, wait for its answer, then rest `waveMs`, spread over /metrics, /statechart,
 * /statechart.json and /readyz, until `stop`.
 */
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { acceptsTcp } from '../workshop/localServers/freePort.js';

/** What the clients of one loaded run saw. */
export interface HttpLoad {
  requests: number;
  /** Answers other than 2xx, and connections refused, cut or timed out. */
  failures: number;
  perSecond: number;
  p50Ms: number | null;
  p99Ms: number | null;
  maxMs: number | null;
  /** The clients' own CPU, as a share of one core over their run. */
  cpuShare: number;
  /** `recognition_http_figures_reads_total` at the run's end: the daemon's reads in its life. */
  figuresReads: number | null;
}

const SCRIPT = `
local paths = { "/metrics", "/statechart", "/statechart.json", "/readyz" }
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", paths[(n % #paths) + 1])
end
delay = function() return tonumber(os.getenv("WAVE_MS")) end
done = function(s, latency)
  local e = s.errors
  io.write(string.format(
    '{"requests":%d,"us":%d,"failures":%d,"p50":%f,"p99":%f,"max":%f}\\n',
    s.requests, s.duration, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
`;

/** wrk's path; throws with how to install it when it is missing. */
function wrkBinary(): string {
  const found = spawnSync('sh', ['-c', 'command -v wrk'], { encoding: 'utf8' }).stdout.trim();
  if (!found)
    throw new Error("the http section needs wrk: install Debian's wrk package (apt-get install -y wrk)");
  return found;
}

/** CPU seconds (user + system) of process `pid` so far, from /proc. */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  // utime and stime, fields 14 and 15 of stat(5), counted from field 3; in clock ticks of 1/100 s.
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/**
 * Start the clients once `baseUrl`'s port accepts connections (the daemon's start is part of the
 * timed run); `stop` ends them and resolves with what they saw.
 */
export function startHttpLoad(
  baseUrl: string,
  concurrency: number,
  waveMs: number,
): { stop(): Promise<HttpLoad> } {
  const binary = wrkBinary();
  const script = join(tmpdir(), `rc-bench-http-${process.pid}.lua`);
  writeFileSync(script, SCRIPT);
  const port = Number(new URL(baseUrl).port);
  let stopped = false;
  const running = (async () => {
    while (!stopped && !(await acceptsTcp(port))) await new Promise((r) => setTimeout(r, 20));
    if (stopped) return undefined;
    const child = spawn(
      binary,
      ['-t1', `-c${concurrency}`, '-d1h', '--timeout', '10s', '-s', script, baseUrl],
      {
        env: { ...process.env, WAVE_MS: String(waveMs) },
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    return { child, exited, output: () => out, startedAt: performance.now() };
  })();
  return {
    async stop() {
      stopped = true;
      const run = await running;
      const metrics = await fetch(`${baseUrl}/metrics`).then(
        (r) => r.text(),
        () => '',
      );
      const reads = [
        ...metrics.matchAll(/^recognition_http_figures_reads_total\{result="(?:ok|failed)"\} (\S+)$/gm),
      ];
      const figuresReads = reads.length ? reads.reduce((a, m) => a + Number(m[1]), 0) : null;
      if (!run) {
        return {
          requests: 0,
          failures: 0,
          perSecond: 0,
          p50Ms: null,
          p99Ms: null,
          maxMs: null,
          cpuShare: 0,
          figuresReads,
        };
      }
      const seconds = (performance.now() - run.startedAt) / 1000;
      const cpu = cpuSeconds(run.child.pid!);
      run.child.kill('SIGINT');
      await run.exited;
      const line = run.output().trim().split('\n').at(-1) ?? '';
      const s = JSON.parse(line) as {
        requests: number;
        us: number;
        failures: number;
        p50: number;
        p99: number;
        max: number;
      };
      return {
        requests: s.requests,
        failures: s.failures,
        perSecond: s.requests / (s.us / 1e6),
        p50Ms: s.p50,
        p99Ms: s.p99,
        maxMs: s.max,
        cpuShare: cpu / seconds,
        figuresReads,
      };
    },
  };
}
