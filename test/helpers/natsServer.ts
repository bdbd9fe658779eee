import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { randomUUID } from 'node:crypto';

import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, StorageType } from '@nats-io/jetstream';

import { freePort } from './freePort.js';

/** Cluster membership of one server started by {@link startNatsServer}. */
export interface NatsClusterOptions {
  /** Cluster name; every member of one cluster must use the same one. */
  name: string;
  /** Loopback port of this server's route listener. */
  port: number;
  /** Route URLs of the other members, e.g. `nats-route://127.0.0.1:6222`. */
  routes: string[];
}

/** Options of {@link startNatsServer}; every field is optional. */
export interface NatsServerOptions {
  /** Require this user name (with {@link NatsServerOptions.password}) from clients. */
  user?: string;
  /** Password for {@link NatsServerOptions.user}. */
  password?: string;
  /** Require this token from clients (exclusive with user/password). */
  token?: string;
  /** Serve TLS with this certificate and key (PEM file paths). */
  tls?: { cert: string; key: string };
  /**
   * Extra text appended verbatim to the generated config file, e.g. an `authorization { users: [...] }` block
   * with permissions, `max_payload`, `http_port`. Must not repeat a block the helper writes itself
   * (`listen`, `server_name`, `jetstream`, and `authorization`/`tls`/`cluster` when those options are set).
   */
  configText?: string;
  /** Make the server a member of a cluster. */
  cluster?: NatsClusterOptions;
  /** `server_name`; defaults to a unique name. JetStream clustering requires distinct names. */
  serverName?: string;
  /** Client port on 127.0.0.1; defaults to a free one. */
  port?: number;
  /** JetStream store directory; defaults to a fresh temp dir that {@link NatsServerHandle.cleanup} removes. */
  storeDir?: string;
}

/** A running (or stopped) nats-server child process started by {@link startNatsServer}. */
export interface NatsServerHandle {
  /** `nats://127.0.0.1:PORT` (TLS is negotiated by the client when {@link NatsServerOptions.tls} is set). */
  readonly url: string;
  /** Client port; stays the same across {@link NatsServerHandle.restart}. */
  readonly port: number;
  /** JetStream store directory (the server keeps its data under `<storeDir>/jetstream`). */
  readonly storeDir: string;
  /** `server_name` of this server. */
  readonly serverName: string;
  /** Path of the generated config file. */
  readonly configFile: string;
  /** Whether the process is currently running. */
  isRunning(): boolean;
  /** The last ~64 KiB of the server's stdout+stderr (its log), across restarts. */
  output(): string;
  /** SIGTERM (graceful shutdown) and resolve once the process has exited; SIGKILL after 15 s. No-op if stopped. */
  stop(): Promise<void>;
  /** SIGKILL (crash) and resolve once the process has exited. No-op if stopped. */
  kill(): Promise<void>;
  /**
   * Start the server again with the same port, store dir and config (stopping it gracefully first if it is
   * running) and resolve once it accepts TCP connections.
   */
  restart(): Promise<void>;
  /** {@link NatsServerHandle.stop}, then remove the config dir and the store dir if the helper created it. */
  cleanup(): Promise<void>;
}

/** A cluster started by {@link startNatsCluster}. */
export interface NatsClusterHandle {
  /** Cluster name shared by all members. */
  readonly name: string;
  /** One handle per member, in order. */
  readonly servers: NatsServerHandle[];
  /** Client URLs of the members, in the same order as {@link NatsClusterHandle.servers}. */
  readonly urls: string[];
  /** Stop every member (graceful). */
  stop(): Promise<void>;
  /** Clean up every member (stop + remove their temp dirs). */
  cleanup(): Promise<void>;
}

const NOT_FOUND_MESSAGE =
  "nats-server not found: install Debian's nats-server package (apt-get install nats-server)";
const OUTPUT_LIMIT = 64 * 1024;
const START_TIMEOUT_MS = 10_000;
const STOP_TIMEOUT_MS = 15_000;

/** Every child this module started that may still be alive; killed if the test process exits. */
const liveChildren = new Set<ChildProcess>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const child of liveChildren) child.kill('SIGKILL');
  });
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * Locates the nats-server binary: `$NATS_SERVER_BIN` if set, else the first `nats-server` on `PATH`, else
 * `/usr/sbin/nats-server`. Throws an Error telling how to install it when none is found.
 */
export function findNatsServerBinary(): string {
  const fromEnv = process.env['NATS_SERVER_BIN'];
  if (fromEnv && isExecutable(fromEnv)) return fromEnv;
  for (const dir of (process.env['PATH'] ?? '').split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, 'nats-server');
    if (isExecutable(candidate)) return candidate;
  }
  if (isExecutable('/usr/sbin/nats-server')) return '/usr/sbin/nats-server';
  throw new Error(NOT_FOUND_MESSAGE);
}

/** Quotes a value as a NATS config string. */
function q(value: string): string {
  return JSON.stringify(value);
}

function renderConfig(port: number, serverName: string, storeDir: string, opts: NatsServerOptions): string {
  const lines: string[] = [
    `listen: ${q(`127.0.0.1:${port}`)}`,
    `server_name: ${q(serverName)}`,
    `jetstream {`,
    `  store_dir: ${q(storeDir)}`,
    `}`,
  ];
  if (opts.token !== undefined) {
    if (opts.user !== undefined) throw new Error('startNatsServer: token and user/password are exclusive');
    lines.push(`authorization {`, `  token: ${q(opts.token)}`, `}`);
  } else if (opts.user !== undefined) {
    lines.push(`authorization {`, `  user: ${q(opts.user)}`, `  password: ${q(opts.password ?? '')}`, `}`);
  }
  if (opts.tls) {
    lines.push(`tls {`, `  cert_file: ${q(opts.tls.cert)}`, `  key_file: ${q(opts.tls.key)}`, `}`);
  }
  if (opts.cluster) {
    lines.push(
      `cluster {`,
      `  name: ${q(opts.cluster.name)}`,
      `  listen: ${q(`127.0.0.1:${opts.cluster.port}`)}`,
      `  routes: [`,
      ...opts.cluster.routes.map((r) => `    ${q(r)}`),
      `  ]`,
      `}`,
    );
  }
  if (opts.configText) lines.push(opts.configText);
  return lines.join('\n') + '\n';
}

/** Resolves true once 127.0.0.1:port accepts a TCP connection (closing it at once), false on error. */
function tryTcp(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = netConnect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => {
      socket.destroy();
      resolve(false);
    });
    socket.setTimeout(1_000, () => {
      socket.destroy();
      resolve(false);
    });
  });
}

function waitForExit(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

/**
 * Starts a nats-server child process with JetStream, bound to 127.0.0.1 only.
 *
 * Contract:
 * - The client port is `opts.port` or a free loopback port; the store dir is `opts.storeDir` or a fresh
 *   `mkdtemp` dir; a config file (listen, server_name, jetstream store_dir, auth, tls, cluster, then
 *   `opts.configText`) is always written to a private temp dir and passed with `-c`.
 * - Resolves once the port accepts TCP connections (polled, at most ~10 s). Rejects with an Error carrying the
 *   server's output if it exits first or the deadline passes (the process is then killed).
 * - The binary is found by {@link findNatsServerBinary}; rejects with an install hint if it is missing.
 * - Children still alive when the test process exits are SIGKILLed.
 */
export async function startNatsServer(opts: NatsServerOptions = {}): Promise<NatsServerHandle> {
  const binary = findNatsServerBinary();
  installExitHook();
  const port = opts.port ?? (await freePort());
  const serverName = opts.serverName ?? `test-${randomUUID().slice(0, 8)}`;
  const ownsStore = opts.storeDir === undefined;
  const storeDir = opts.storeDir ?? (await mkdtemp(join(tmpdir(), 'nats-store-')));
  const confDir = await mkdtemp(join(tmpdir(), 'nats-conf-'));
  const configFile = join(confDir, 'nats-server.conf');
  await writeFile(configFile, renderConfig(port, serverName, storeDir, opts));

  let child: ChildProcess | undefined;
  let output = '';
  const append = (chunk: Buffer): void => {
    output += chunk.toString('utf8');
    if (output.length > OUTPUT_LIMIT) output = output.slice(output.length - OUTPUT_LIMIT);
  };
  const running = (): boolean => child !== undefined && child.exitCode === null && child.signalCode === null;

  async function launch(): Promise<void> {
    const proc = spawn(binary, ['-c', configFile], { stdio: ['ignore', 'pipe', 'pipe'] });
    child = proc;
    liveChildren.add(proc);
    proc.stdout?.on('data', append);
    proc.stderr?.on('data', append);
    let spawnError: Error | undefined;
    proc.once('error', (err) => {
      spawnError = err;
    });
    proc.once('exit', () => liveChildren.delete(proc));

    const deadline = Date.now() + START_TIMEOUT_MS;
    for (;;) {
      if (spawnError) throw new Error(`nats-server (${binary}) failed to spawn: ${spawnError.message}`);
      if (proc.exitCode !== null || proc.signalCode !== null) {
        throw new Error(
          `nats-server exited during startup (code ${proc.exitCode}, signal ${proc.signalCode}) on port ${port}:\n${output}`,
        );
      }
      if (await tryTcp(port)) {
        // Something accepted: make sure it is our process and not a port thief.
        if (proc.exitCode === null && proc.signalCode === null) return;
        continue;
      }
      if (Date.now() > deadline) {
        proc.kill('SIGKILL');
        await waitForExit(proc);
        throw new Error(
          `nats-server did not accept connections on 127.0.0.1:${port} within 10 s:\n${output}`,
        );
      }
      await sleep(50);
    }
  }

  async function signalAndWait(signal: NodeJS.Signals, timeoutMs: number): Promise<void> {
    const proc = child;
    if (!proc || !running()) return;
    const exited = waitForExit(proc);
    proc.kill(signal);
    const timedOut = await Promise.race([exited.then(() => false), sleep(timeoutMs).then(() => true)]);
    if (timedOut) {
      proc.kill('SIGKILL');
      await exited;
    }
  }

  const handle: NatsServerHandle = {
    url: `nats://127.0.0.1:${port}`,
    port,
    storeDir,
    serverName,
    configFile,
    isRunning: running,
    output: () => output,
    stop: () => signalAndWait('SIGTERM', STOP_TIMEOUT_MS),
    kill: () => signalAndWait('SIGKILL', STOP_TIMEOUT_MS),
    async restart() {
      await signalAndWait('SIGTERM', STOP_TIMEOUT_MS);
      await launch();
    },
    async cleanup() {
      await signalAndWait('SIGTERM', STOP_TIMEOUT_MS);
      await rm(confDir, { recursive: true, force: true });
      if (ownsStore) await rm(storeDir, { recursive: true, force: true });
    },
  };

  try {
    await launch();
  } catch (err) {
    await rm(confDir, { recursive: true, force: true });
    if (ownsStore) await rm(storeDir, { recursive: true, force: true });
    throw err;
  }
  return handle;
}

/**
 * Starts an n-member nats-server cluster with JetStream on loopback and waits until it has formed.
 *
 * Contract:
 * - Each member gets a free client port, a free route port, `server_name` `<cluster>-n<i>`, its own temp store
 *   dir, and routes to every other member; all members are started concurrently.
 * - Resolves once a memory stream with `num_replicas = min(n, 5)` can be created (and is then deleted) through a
 *   client connected to all members, i.e. the JetStream meta group has a leader and enough peers; retried for
 *   at most ~30 s, after which every member is cleaned up and the promise rejects with the last error and the
 *   members' logs.
 */
export async function startNatsCluster(n = 3): Promise<NatsClusterHandle> {
  if (!Number.isInteger(n) || n < 1)
    throw new Error(`startNatsCluster: n must be a positive integer, got ${n}`);
  const name = `c-${randomUUID().slice(0, 8)}`;
  const clientPorts: number[] = [];
  const routePorts: number[] = [];
  // Allocate sequentially so that no two members are handed the same just-freed port.
  const taken = new Set<number>();
  while (clientPorts.length + routePorts.length < 2 * n) {
    const p = await freePort();
    if (taken.has(p)) continue;
    taken.add(p);
    if (clientPorts.length < n) clientPorts.push(p);
    else routePorts.push(p);
  }

  const started = await Promise.allSettled(
    clientPorts.map((port, i) =>
      startNatsServer({
        port,
        serverName: `${name}-n${i}`,
        cluster: {
          name,
          port: routePorts[i]!,
          routes: routePorts.filter((_, j) => j !== i).map((p) => `nats-route://127.0.0.1:${p}`),
        },
      }),
    ),
  );
  const servers = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const failed = started.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) {
    await Promise.all(servers.map((s) => s.cleanup()));
    throw failed.reason;
  }

  const urls = servers.map((s) => s.url);
  const cluster: NatsClusterHandle = {
    name,
    servers,
    urls,
    async stop() {
      await Promise.all(servers.map((s) => s.stop()));
    },
    async cleanup() {
      await Promise.all(servers.map((s) => s.cleanup()));
    },
  };

  try {
    await waitForClusterFormed(urls, Math.min(n, 5), 30_000);
  } catch (err) {
    const logs = servers.map((s) => `--- ${s.serverName} ---\n${s.output().slice(-4_000)}`).join('\n');
    await cluster.cleanup();
    throw new Error(`NATS cluster ${name} did not form within 30 s: ${String(err)}\n${logs}`);
  }
  return cluster;
}

async function waitForClusterFormed(urls: string[], replicas: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let nc: NatsConnection | undefined;
  let lastError: unknown;
  try {
    while (Date.now() < deadline) {
      try {
        nc ??= await connect({ servers: urls, timeout: 2_000, maxReconnectAttempts: -1 });
        const jsm = await jetstreamManager(nc, { timeout: 2_000 });
        const probe = `cluster_probe_${randomUUID().replace(/-/g, '')}`;
        await jsm.streams.add({
          name: probe,
          subjects: [`${probe}.>`],
          num_replicas: replicas,
          storage: StorageType.Memory,
        });
        await jsm.streams.delete(probe);
        return;
      } catch (err) {
        lastError = err;
        await sleep(250);
      }
    }
    throw lastError instanceof Error ? lastError : new Error(String(lastError));
  } finally {
    if (nc) await nc.close().catch(() => undefined);
  }
}
