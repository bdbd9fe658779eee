/**
 * PgBouncer on a loopback port of its own in front of a PostgreSQL server (the machine's, or a
 * private cluster): every database name a client asks for is passed through to that server, with
 * trust authentication, in transaction or session mode. Its ini and userlist live in a temporary
 * directory of its own. Debian's `pgbouncer` package brings the binary (1.18 on Debian 12, which
 * keeps no protocol-level prepared statement across transactions).
 */
import { chown, writeFile } from 'node:fs/promises';
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
import { postgresUser } from './pgCluster.js';

/** How PgBouncer hands server connections to clients. */
export type PgbouncerPoolMode = 'transaction' | 'session';

/** Options of {@link startPgbouncer}. */
export interface PgbouncerOptions {
  mode: PgbouncerPoolMode;
  /** The PostgreSQL server behind it, on 127.0.0.1 (default 5432). */
  serverPort?: number;
  /** Server connections per database and user (`default_pool_size`, default 10). */
  poolSize?: number;
  /** User names clients log in as (trust authentication); `postgres` is always one. */
  users?: string[];
}

/** A running PgBouncer started by {@link startPgbouncer}. */
export interface PgbouncerHandle extends LocalServerHandle {
  readonly mode: PgbouncerPoolMode;
  /** The generated ini, as written. */
  readonly config: string;
  /** `postgres://user@127.0.0.1:PORT/database` through this PgBouncer. */
  url(database: string, user?: string): string;
}

/** `$PGBOUNCER_BIN`, else `/usr/sbin/pgbouncer`. Throws {@link MissingServerBinaryError} when neither is there. */
export function findPgbouncerBinary(): string {
  const fromEnv = process.env['PGBOUNCER_BIN'];
  if (fromEnv && isExecutable(fromEnv)) return fromEnv;
  if (isExecutable('/usr/sbin/pgbouncer')) return '/usr/sbin/pgbouncer';
  throw new MissingServerBinaryError('pgbouncer', 'pgbouncer', 'set PGBOUNCER_BIN');
}

/**
 * The ini: a fallback database entry (`*`) that passes every name through to the server; no unix
 * socket; the startup parameters pg and psql may send that PgBouncer does not track are ignored.
 * `server_reset_query` is PgBouncer's default (`DISCARD ALL`, used in session mode only).
 */
export function pgbouncerConfig(port: number, dir: string, opts: PgbouncerOptions): string {
  return [
    '[databases]',
    `* = host=127.0.0.1 port=${opts.serverPort ?? 5432}`,
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    "unix_socket_dir = ''",
    'auth_type = trust',
    `auth_file = ${join(dir, 'userlist.txt')}`,
    `pool_mode = ${opts.mode}`,
    'max_client_conn = 1000',
    `default_pool_size = ${opts.poolSize ?? 10}`,
    'ignore_startup_parameters = extra_float_digits,options,statement_timeout',
    `pidfile = ${join(dir, 'pgbouncer.pid')}`,
    'admin_users = postgres',
    'log_connections = 0',
    'log_disconnections = 0',
    '',
  ].join('\n');
}

/**
 * Start PgBouncer in the foreground on a free loopback port. It refuses to run as root, so a root
 * process runs it as the `postgres` OS user. Resolves once the port accepts TCP connections (at
 * most ~10 s); rejects with its output otherwise. SIGKILLed when this process exits.
 */
export async function startPgbouncer(opts: PgbouncerOptions): Promise<PgbouncerHandle> {
  const binary = findPgbouncerBinary();
  const port = await freePort();
  const dir = await createTempDir('pgbouncer-');
  const config = pgbouncerConfig(port, dir.path, opts);
  const configFile = join(dir.path, 'pgbouncer.ini');
  await writeFile(configFile, config);
  const users = [...new Set(['postgres', ...(opts.users ?? [])])];
  await writeFile(join(dir.path, 'userlist.txt'), users.map((u) => `"${u}" ""\n`).join(''));
  const root = typeof process.getuid === 'function' && process.getuid() === 0;
  const asUser = root ? postgresUser() : undefined;
  if (root && !asUser) throw new Error('startPgbouncer: running as root but there is no postgres OS user');
  if (asUser) await chown(dir.path, asUser.uid, asUser.gid);
  const output = createOutputTail();
  const child = spawnServer(binary, [configFile], {
    cwd: dir.path,
    onOutput: (chunk) => output.append(chunk),
    ...(asUser ? { uid: asUser.uid, gid: asUser.gid } : {}),
  });
  const server = await startedServer({
    name: 'pgbouncer',
    where: `127.0.0.1:${port}`,
    child,
    dir,
    output,
    ready: () => acceptsTcp(port),
    startTimeoutMs: 10_000,
    stopTimeoutMs: 10_000,
  });
  return {
    port,
    mode: opts.mode,
    config,
    url: (database, user = 'postgres') => `postgres://${user}@127.0.0.1:${port}/${database}`,
    ...server,
  };
}
