/**
 * A real Prometheus for integration tests: Debian's `prometheus` binary as a child process on a
 * free loopback port, with its TSDB in a temporary directory and a generated configuration that
 * scrapes the given targets and loads the given rule files. `scripts/ensure-prometheus.sh`
 * installs the binary.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '../../workshop/localServers/freePort.js';

/** Options of {@link startPrometheus}. */
export interface PrometheusOptions {
  /** Scrape targets (`host:port`) of the one scrape job. */
  targets: string[];
  /** Name of the scrape job (the rules expect `recognition-core`). */
  jobName: string;
  /** Absolute paths of rule files to load. */
  ruleFiles: string[];
  /** Scrape and rule evaluation interval, e.g. `1s`. */
  interval: string;
}

/** A running Prometheus started by {@link startPrometheus}. */
export interface PrometheusHandle {
  /** `http://127.0.0.1:PORT` */
  readonly url: string;
  /** The last ~64 KiB of its log. */
  output(): string;
  /** `GET /api/v1/<path>` with `params`; returns `data` of a successful answer, throws otherwise. */
  api<T>(path: string, params?: Record<string, string>): Promise<T>;
  /** SIGTERM, wait for the exit (SIGKILL after 15 s), remove the storage and configuration. */
  cleanup(): Promise<void>;
}

const NOT_FOUND_MESSAGE =
  "prometheus not found: install Debian's prometheus package (apt-get install --no-install-recommends prometheus)";
const OUTPUT_LIMIT = 64 * 1024;
const START_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 15_000;

const liveChildren = new Set<ChildProcess>();
let exitHookInstalled = false;

/** `$PROMETHEUS_BIN`, else `prometheus` on PATH, else `/usr/bin/prometheus`; throws with an install hint. */
export function findPrometheusBinary(): string {
  const candidates = [
    process.env['PROMETHEUS_BIN'],
    ...(process.env['PATH'] ?? '').split(delimiter).map((d) => (d ? join(d, 'prometheus') : undefined)),
    '/usr/bin/prometheus',
  ];
  for (const c of candidates) {
    if (!c) continue;
    try {
      accessSync(c, fsConstants.X_OK);
      return c;
    } catch {
      // next candidate
    }
  }
  throw new Error(NOT_FOUND_MESSAGE);
}

function renderConfig(opts: PrometheusOptions): string {
  return (
    JSON.stringify(
      {
        global: { scrape_interval: opts.interval, evaluation_interval: opts.interval },
        rule_files: opts.ruleFiles,
        scrape_configs: [
          {
            job_name: opts.jobName,
            scrape_interval: opts.interval,
            scrape_timeout: opts.interval,
            static_configs: [{ targets: opts.targets }],
          },
        ],
      },
      null,
      2,
    ) + '\n'
  );
}

/**
 * Start Prometheus (YAML accepts the JSON configuration) and resolve once `/-/ready` answers 200
 * (polled, at most 30 s; then the process is killed and the promise rejects with its log).
 */
export async function startPrometheus(opts: PrometheusOptions): Promise<PrometheusHandle> {
  const binary = findPrometheusBinary();
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on('exit', () => liveChildren.forEach((c) => c.kill('SIGKILL')));
  }
  const dir = await mkdtemp(join(tmpdir(), 'prometheus-'));
  const configFile = join(dir, 'prometheus.yml');
  await writeFile(configFile, renderConfig(opts));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;

  const child = spawn(
    binary,
    [
      `--config.file=${configFile}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  liveChildren.add(child);
  let output = '';
  const append = (chunk: Buffer): void => {
    output = (output + chunk.toString('utf8')).slice(-OUTPUT_LIMIT);
  };
  child.stdout?.on('data', append);
  child.stderr?.on('data', append);
  const exited = new Promise<void>((resolve) =>
    child.once('exit', () => {
      liveChildren.delete(child);
      resolve();
    }),
  );
  let spawnError: Error | undefined;
  child.once('error', (err) => {
    spawnError = err;
  });

  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const timedOut = await Promise.race([
        exited.then(() => false),
        sleep(STOP_TIMEOUT_MS).then(() => true),
      ]);
      if (timedOut) {
        child.kill('SIGKILL');
        await exited;
      }
    }
    await rm(dir, { recursive: true, force: true });
  };

  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    if (spawnError) {
      await stop();
      throw new Error(`prometheus (${binary}) failed to spawn: ${spawnError.message}`);
    }
    if (child.exitCode !== null || child.signalCode !== null) {
      await stop();
      throw new Error(`prometheus exited during startup (code ${child.exitCode}):\n${output}`);
    }
    const ready = await fetch(`${url}/-/ready`).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ready) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`prometheus was not ready on ${url} within 30 s:\n${output}`);
    }
    await sleep(100);
  }

  return {
    url,
    output: () => output,
    async api<T>(path: string, params: Record<string, string> = {}): Promise<T> {
      const res = await fetch(`${url}/api/v1/${path}?${new URLSearchParams(params).toString()}`);
      const body = (await res.json()) as { status: string; data?: T; error?: string };
      if (body.status !== 'success') throw new Error(`prometheus ${path}: ${body.error ?? res.status}`);
      return body.data as T;
    },
    cleanup: stop,
  };
}
