import { writeFile } from 'node:fs/promises';
import { connect as netConnect } from 'node:net';
import { delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { randomUUID } from 'node:crypto';

import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, StorageType } from '@nats-io/jetstream';

import {
  createOutputTail,
  createTempDir,
  hasExited,
  isExecutable,
  spawnServer,
  stopChild,
} from './childProcesses.js';
import type { LocalServerHandle, LocalServerOptions, ServerChild } from './childProcesses.js';
import { freePort } from './freePort.js';
import { MissingServerBinaryError } from './missingBinary.js';

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
export interface NatsServerOptions extends LocalServerOptions {
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
  /** JetStream store directory; defaults to a fresh temp dir that {@link NatsServerHandle.cleanup} removes. */
  storeDir?: string;
}

/** A running (or stopped) nats-server child process started by {@link startNatsServer}. */
export interface NatsServerHandle extends LocalServerHandle {
  /** `nats://127.0.0.1:PORT` (TLS is negotiated by the client when {@link NatsServerOptions.tls} is set). */
  readonly url: string;
  /** JetStream store directory (the server keeps its data under `<storeDir>/jetstream`). */
  readonly storeDir: string;
  /** `server_name` of this server. */
  readonly serverName: string;
  /** Path of the generated config file. */
  readonly configFile: string;
  /** The running process's pid (it changes with a restart); null while stopped. */
  pid(): number | null;
  /** SIGTERM (graceful shutdown) and resolve once the process has exited; SIGKILL after 15 s. No-op if stopped. */
  stop(): Promise<void>;
  /**
   * Start the server again with the same port, store dir and config (stopping it gracefully first if it is
   * running) and resolve once it accepts TCP connections.
   */
  restart(): Promise<void>;
  /**
   * Freeze the server (SIGSTOP): its sockets stay open and nothing answers, as with a server that
   * hangs. {@link NatsServerHandle.resume} thaws it; stop, kill, restart and cleanup thaw it first.
   */
  pause(): void;
  /** Thaw a server frozen by {@link NatsServerHandle.pause} (SIGCONT). No-op if it is not frozen. */
  resume(): void;
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

const START_TIMEOUT_MS = 10_000;
const STOP_TIMEOUT_MS = 15_000;

/**
 * Locates the nats-server binary: `$NATS_SERVER_BIN` if set, else the first `nats-server` on `PATH`, else
 * `/usr/sbin/nats-server`. Throws {@link MissingServerBinaryError} (with the install command) when none is found.
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
  throw new MissingServerBinaryError('nats-server', 'nats-server', 'set NATS_SERVER_BIN');
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
 * - A server still alive when this process exits is SIGKILLed, and the temp dirs are removed.
 */
export async function startNatsServer(opts: NatsServerOptions = {}): Promise<NatsServerHandle> {
  const binary = findNatsServerBinary();
  const port = opts.port ?? (await freePort());
  const serverName = opts.serverName ?? `test-${randomUUID().slice(0, 8)}`;
  const ownStore = opts.storeDir === undefined ? await createTempDir('nats-store-') : undefined;
  const storeDir = opts.storeDir ?? ownStore!.path;
  const confDir = await createTempDir('nats-conf-');
  const configFile = join(confDir.path, 'nats-server.conf');
  const removeDirs = async (): Promise<void> => {
    await confDir.remove();
    await ownStore?.remove();
  };

  let child: ServerChild | undefined;
  const output = createOutputTail();
  const running = (): boolean => child !== undefined && !hasExited(child.proc);

  async function launch(): Promise<void> {
    child = spawnServer(binary, ['-c', configFile], {
      detached: opts.ownProcessGroup === true,
      onOutput: output.append,
    });
    const { proc, spawnError } = child;
    const deadline = Date.now() + START_TIMEOUT_MS;
    for (;;) {
      const failedSpawn = spawnError();
      if (failedSpawn) throw new Error(`nats-server (${binary}) failed to spawn: ${failedSpawn.message}`);
      if (hasExited(proc)) {
        throw new Error(
          `nats-server exited during startup (code ${proc.exitCode}, signal ${proc.signalCode}) on port ${port}:\n${output.text()}`,
        );
      }
      if (await tryTcp(port)) {
        // Something accepted: make sure it is our process and not a port thief.
        if (!hasExited(proc)) return;
        continue;
      }
      if (Date.now() > deadline) {
        await stopChild(proc, 'SIGKILL', STOP_TIMEOUT_MS);
        throw new Error(
          `nats-server did not accept connections on 127.0.0.1:${port} within 10 s:\n${output.text()}`,
        );
      }
      await sleep(50);
    }
  }

  let frozen = false;
  const thaw = () => {
    if (frozen && running()) child!.proc.kill('SIGCONT');
    frozen = false;
  };
  const signalAndWait = (signal: NodeJS.Signals) => {
    // A frozen process acts on no signal but SIGKILL until it is thawed.
    thaw();
    return stopChild(child?.proc, signal, STOP_TIMEOUT_MS);
  };
  const handle: NatsServerHandle = {
    url: `nats://127.0.0.1:${port}`,
    port,
    storeDir,
    serverName,
    configFile,
    pid: () => (running() ? (child?.proc.pid ?? null) : null),
    isRunning: running,
    output: output.text,
    stop: () => signalAndWait('SIGTERM'),
    kill: () => signalAndWait('SIGKILL'),
    async restart() {
      await signalAndWait('SIGTERM');
      await launch();
    },
    async cleanup() {
      await signalAndWait('SIGTERM');
      await removeDirs();
    },
    pause() {
      if (!running()) throw new Error('nats-server is not running');
      child!.proc.kill('SIGSTOP');
      frozen = true;
    },
    resume: thaw,
  };

  try {
    await writeFile(configFile, renderConfig(port, serverName, storeDir, opts));
    await launch();
  } catch (err) {
    await removeDirs();
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
