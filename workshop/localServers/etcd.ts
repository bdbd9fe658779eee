/**
 * A one-member etcd on loopback ports, the store a local Patroni cluster keeps its leader key in
 * (see patroni.ts). Debian's `etcd-server` package brings the binary.
 */
import { join } from 'node:path';

import {
  createOutputTail,
  createTempDir,
  isExecutable,
  spawnServer,
  startedServer,
} from './childProcesses.js';
import type { LocalServerHandle } from './childProcesses.js';
import { freePort } from './freePort.js';
import { MissingServerBinaryError } from './missingBinary.js';

/** A running etcd started by {@link startEtcd}. */
export interface EtcdHandle extends LocalServerHandle {
  /** `127.0.0.1:PORT` of the client listener (what Patroni's `etcd3.hosts` takes). */
  readonly hostPort: string;
}

const START_TIMEOUT_MS = 30_000;

/** `$ETCD_BIN`, else `etcd` in `/usr/bin`. Throws {@link MissingServerBinaryError} when neither is there. */
export function findEtcdBinary(): string {
  const fromEnv = process.env['ETCD_BIN'];
  if (fromEnv && isExecutable(fromEnv)) return fromEnv;
  if (isExecutable('/usr/bin/etcd')) return '/usr/bin/etcd';
  throw new MissingServerBinaryError('etcd-server', 'etcd', 'set ETCD_BIN');
}

async function healthy(port: number): Promise<boolean> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(1_000) });
    const body = (await res.json()) as { health?: string };
    return res.ok && body.health === 'true';
  } catch {
    return false;
  }
}

/**
 * Starts a single-member etcd with its data in a fresh temporary directory.
 *
 * Contract: client and peer listeners on free 127.0.0.1 ports; resolves once `/health` answers
 * `{"health":"true"}` (at most ~30 s), else rejects with etcd's output (the process is killed and the
 * directory removed). The process is SIGKILLed when this process exits. `stop()` sends SIGTERM,
 * `kill()` SIGKILL; `cleanup()` stops it and removes the directory.
 */
export async function startEtcd(): Promise<EtcdHandle> {
  const binary = findEtcdBinary();
  const [clientPort, peerPort] = [await freePort(), await freePort()];
  const dir = await createTempDir('etcd-');
  const peer = `http://127.0.0.1:${peerPort}`;
  const client = `http://127.0.0.1:${clientPort}`;
  const args = [
    '--name',
    'e0',
    '--data-dir',
    join(dir.path, 'data'),
    '--listen-client-urls',
    client,
    '--advertise-client-urls',
    client,
    '--listen-peer-urls',
    peer,
    '--initial-advertise-peer-urls',
    peer,
    '--initial-cluster',
    `e0=${peer}`,
    '--log-level',
    'warn',
  ];
  const output = createOutputTail();
  const child = spawnServer(binary, args, { cwd: dir.path, onOutput: output.append });
  const server = await startedServer({
    name: 'etcd',
    where: client,
    child,
    dir,
    output,
    ready: () => healthy(clientPort),
    startTimeoutMs: START_TIMEOUT_MS,
    stopTimeoutMs: 15_000,
  });
  return { port: clientPort, hostPort: `127.0.0.1:${clientPort}`, ...server };
}
