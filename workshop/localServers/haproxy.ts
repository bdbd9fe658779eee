/**
 * HAProxy on a loopback port in front of a local Patroni cluster (see patroni.ts): clients reach
 * whichever member Patroni's REST API reports as the primary. Debian's `haproxy` package brings the
 * binary.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';

import {
  createOutputTail,
  createTempDir,
  isExecutable,
  spawnServer,
  startedServer,
} from './childProcesses.js';
import type { LocalServerHandle } from './childProcesses.js';
import { acceptsTcp, freePort } from './freePort.js';
import { MissingServerBinaryError } from './missingBinary.js';

/** One PostgreSQL server behind HAProxy, checked through its Patroni REST API. */
export interface HaproxyBackend {
  /** Server name in HAProxy (the Patroni member's name). */
  name: string;
  /** PostgreSQL port on 127.0.0.1. */
  pgPort: number;
  /** Patroni REST port on 127.0.0.1. */
  restPort: number;
}

/** A state change HAProxy reported for a server, with when this process read it. */
export interface HaproxyServerEvent {
  /** `Date.now()` when the line arrived. */
  at: number;
  server: string;
  state: 'UP' | 'DOWN';
}

/** A running HAProxy started by {@link startHaproxy}. */
export interface HaproxyHandle extends LocalServerHandle {
  /** Every server state change HAProxy logged, in order. */
  readonly events: readonly HaproxyServerEvent[];
  /** The generated configuration, as written. */
  readonly config: string;
}

/** Options of {@link startHaproxy}. */
export interface HaproxyOptions {
  backends: HaproxyBackend[];
  /** The health check's interval (ms); the check needs 2 failures to mark a server down, 1 success up. */
  checkIntervalMs?: number;
}

/** `$HAPROXY_BIN`, else `/usr/sbin/haproxy`. Throws {@link MissingServerBinaryError} when neither is there. */
export function findHaproxyBinary(): string {
  const fromEnv = process.env['HAPROXY_BIN'];
  if (fromEnv && isExecutable(fromEnv)) return fromEnv;
  if (isExecutable('/usr/sbin/haproxy')) return '/usr/sbin/haproxy';
  throw new MissingServerBinaryError('haproxy', 'haproxy', 'set HAPROXY_BIN');
}

/**
 * The configuration: TCP mode; a server is in rotation while `GET /primary` on its Patroni REST
 * port answers 200, so writes reach the primary only; `on-marked-down shutdown-sessions` closes
 * the connections of a server as soon as it leaves rotation, so a client never keeps writing to a
 * demoted primary (it would get read-only errors there) nor waits on a dead one until TCP gives up.
 * `retries 0`: a connection to a server that refuses it fails at once, and the client retries
 * through HAProxy, which by then may route to the new primary; HAProxy's own retries would keep
 * the client on the old server for a second per retry.
 */
export function haproxyConfig(port: number, opts: HaproxyOptions): string {
  const inter = opts.checkIntervalMs ?? 500;
  return [
    'global',
    '  maxconn 2000',
    'defaults',
    '  mode tcp',
    '  retries 0',
    '  timeout connect 2s',
    '  timeout client 30m',
    '  timeout server 30m',
    '  timeout check 2s',
    'listen postgres',
    `  bind 127.0.0.1:${port}`,
    '  option httpchk GET /primary',
    '  http-check expect status 200',
    `  default-server inter ${inter}ms fastinter ${inter}ms downinter ${inter}ms fall 2 rise 1 on-marked-down shutdown-sessions`,
    ...opts.backends.map((b) => `  server ${b.name} 127.0.0.1:${b.pgPort} check port ${b.restPort}`),
    '',
  ].join('\n');
}

/**
 * Starts HAProxy in the foreground on a free loopback port with {@link haproxyConfig}.
 *
 * Contract: resolves once the port accepts TCP connections (at most ~10 s); rejects with HAProxy's
 * output otherwise. Server state changes (`Server postgres/<name> is UP|DOWN`) are recorded in
 * `events` as they arrive. SIGKILLed when this process exits.
 */
export async function startHaproxy(opts: HaproxyOptions): Promise<HaproxyHandle> {
  const binary = findHaproxyBinary();
  const port = await freePort();
  const dir = await createTempDir('haproxy-');
  const config = haproxyConfig(port, opts);
  const configFile = join(dir.path, 'haproxy.cfg');
  await writeFile(configFile, config);
  const output = createOutputTail();
  const events: HaproxyServerEvent[] = [];
  let pending = '';
  const onOutput = (chunk: Buffer): void => {
    output.append(chunk);
    pending += chunk.toString('utf8');
    let nl: number;
    while ((nl = pending.indexOf('\n')) >= 0) {
      const line = pending.slice(0, nl);
      pending = pending.slice(nl + 1);
      const m = /Server postgres\/(\S+) is (UP|DOWN)/.exec(line);
      if (m) events.push({ at: Date.now(), server: m[1]!, state: m[2] as 'UP' | 'DOWN' });
    }
  };
  const child = spawnServer(binary, ['-db', '-f', configFile], { cwd: dir.path, onOutput });
  const server = await startedServer({
    name: 'haproxy',
    where: `127.0.0.1:${port}`,
    child,
    dir,
    output,
    ready: () => acceptsTcp(port),
    startTimeoutMs: 10_000,
    stopTimeoutMs: 10_000,
  });
  return { port, events, config, ...server };
}
