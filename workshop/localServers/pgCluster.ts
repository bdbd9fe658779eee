import { execFile, execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { chmod, chown, copyFile, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import pg from 'pg';

import {
  createOutputTail,
  createTempDir,
  hasExited,
  isExecutable,
  OUTPUT_LIMIT,
  spawnServer,
  stopChild,
} from './childProcesses.js';
import type { LocalServerHandle, LocalServerOptions, ServerChild } from './childProcesses.js';
import { freePort } from './freePort.js';
import { MissingServerBinaryError } from './missingBinary.js';

/** Options of {@link startPgCluster}; every field is optional. */
export interface PgClusterOptions extends LocalServerOptions {
  /** Extra server settings passed as `-c name=value` (override the helper's defaults). */
  settings?: Record<string, string | number>;
  /**
   * Serve TLS (`ssl=on`) with this certificate and key (PEM file paths); with `ca`, client
   * certificates signed by it are accepted (and `clientcert=` in {@link PgClusterOptions.hba} can
   * require one). The files are copied into the cluster's directory, owned by the user PostgreSQL
   * runs as, the key with mode 0600 (PostgreSQL refuses a key others can read).
   */
  ssl?: { cert: string; key: string; ca?: string };
  /**
   * The lines of `pg_hba.conf`, replacing initdb's (which trusts every local and TCP connection),
   * e.g. `hostssl all all 127.0.0.1/32 scram-sha-256`. A first line `local all postgres trust`
   * is always kept: the helper's own checks connect over the Unix socket when this is given.
   */
  hba?: string[];
}

/** A temporary PostgreSQL cluster started by {@link startPgCluster}. */
export interface PgClusterHandle extends LocalServerHandle {
  /** Temp dir holding the data directory (`<dir>/data`), the unix socket and the log. */
  readonly dir: string;
  /** The data directory. */
  readonly dataDir: string;
  /** `postgres://postgres@127.0.0.1:PORT/<db>` (trust auth, no password, unless `hba` says otherwise). */
  url(db?: string): string;
  /**
   * Settings of a `pg` client connecting as the superuser `postgres` over the Unix socket in
   * {@link PgClusterHandle.dir}: trusted whatever {@link PgClusterOptions.hba} says.
   */
  socket(db?: string): { host: string; port: number; user: string; database: string };
  /** Fast shutdown (SIGINT) and resolve once the postmaster has exited; SIGKILL after 30 s. No-op if stopped. */
  stop(): Promise<void>;
  /**
   * SIGKILL the postmaster (an "immediate" crash, no shutdown checkpoint) and resolve once it and its backends
   * have exited. No-op if stopped.
   */
  kill(): Promise<void>;
  /**
   * Start the postmaster again (same data dir, port and settings; crash recovery runs after {@link kill}) and
   * resolve once `select 1` succeeds. No-op if running.
   */
  start(): Promise<void>;
}

const READY_TIMEOUT_MS = 30_000;

function hasServerBinaries(dir: string): boolean {
  return isExecutable(join(dir, 'initdb')) && isExecutable(join(dir, 'postgres'));
}

/**
 * Locates the directory holding `initdb` and `postgres`: `$PG_BINDIR` if set, else `pg_config --bindir` if that
 * directory has them, else the highest-numbered `/usr/lib/postgresql/<version>/bin` that has them. Throws
 * {@link MissingServerBinaryError} (with the install command) when none is found.
 */
export function findPgBinDir(): string {
  const fromEnv = process.env['PG_BINDIR'];
  if (fromEnv && hasServerBinaries(fromEnv)) return fromEnv;
  try {
    const dir = execFileSync('pg_config', ['--bindir'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
    if (dir && hasServerBinaries(dir)) return dir;
  } catch {
    // no pg_config on PATH
  }
  let versions: string[] = [];
  try {
    versions = readdirSync('/usr/lib/postgresql');
  } catch {
    // not a Debian-style layout
  }
  const candidates = versions
    .filter((v) => /^\d+(\.\d+)?$/.test(v))
    .sort((a, b) => Number(b) - Number(a))
    .map((v) => join('/usr/lib/postgresql', v, 'bin'))
    .filter(hasServerBinaries);
  if (candidates[0]) return candidates[0];
  throw new MissingServerBinaryError(
    'postgresql',
    'PostgreSQL server binaries (initdb, postgres)',
    'set PG_BINDIR',
  );
}

/** uid/gid of the `postgres` OS user, read from /etc/passwd; undefined if there is none. */
export function postgresUser(): { uid: number; gid: number } | undefined {
  let passwd: string;
  try {
    passwd = readFileSync('/etc/passwd', 'utf8');
  } catch {
    return undefined;
  }
  for (const line of passwd.split('\n')) {
    const [name, , uid, gid] = line.split(':');
    if (name === 'postgres' && uid !== undefined && gid !== undefined)
      return { uid: Number(uid), gid: Number(gid) };
  }
  return undefined;
}

/** PIDs of the direct children of `pid`, from /proc (Linux); empty elsewhere. */
export function childPids(pid: number): number[] {
  const out: number[] = [];
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return out;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // Format: pid (comm) state ppid ...; comm may contain spaces and parentheses.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[1]) === pid) out.push(Number(entry));
    } catch {
      // process vanished
    }
  }
  return out;
}

/** Whether process `pid` exists and is not a zombie. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  // A zombie still answers signal 0; treat it as gone.
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return true;
  }
}

function run(
  file: string,
  args: string[],
  options: { uid?: number; gid?: number; cwd: string },
): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      file,
      args,
      { ...options, encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`${file} ${args.join(' ')} failed: ${err.message}\n${stdout}\n${stderr}`));
        else resolve(stdout + stderr);
      },
    );
  });
}

function serverArgs(dataDir: string, settings: Record<string, string | number>): string[] {
  return ['-D', dataDir, ...Object.entries(settings).flatMap(([k, v]) => ['-c', `${k}=${v}`])];
}

/**
 * Copy the TLS files into `dir`, owned by the server's user, the key readable by it alone, and
 * return the server settings that use them.
 */
async function installTls(
  files: NonNullable<PgClusterOptions['ssl']>,
  dir: string,
  asUser: { uid: number; gid: number } | undefined,
): Promise<Record<string, string>> {
  await mkdir(dir, { mode: 0o700 });
  const install = async (from: string, name: string) => {
    const to = join(dir, name);
    await copyFile(from, to);
    await chmod(to, 0o600);
    if (asUser) await chown(to, asUser.uid, asUser.gid);
    return to;
  };
  if (asUser) await chown(dir, asUser.uid, asUser.gid);
  const settings: Record<string, string> = {
    ssl: 'on',
    ssl_cert_file: await install(files.cert, 'server.crt'),
    ssl_key_file: await install(files.key, 'server.key'),
  };
  if (files.ca) settings.ssl_ca_file = await install(files.ca, 'ca.crt');
  return settings;
}

/**
 * Creates and starts a throwaway PostgreSQL cluster for tests.
 *
 * Contract:
 * - `initdb` (trust auth, superuser `postgres`, UTF8, locale C, `--no-sync`) into `<mkdtemp>/data`; when the test
 *   process is root the temp dir is chowned to the `postgres` OS user and initdb/postgres run as that user
 *   (they refuse to run as root).
 * - `postgres` is spawned directly (it is the child process, so kill() hits the real postmaster) with
 *   `listen_addresses=127.0.0.1`, the given or a free port, `unix_socket_directories=<tempdir>`, fsync and
 *   full_page_writes off (synchronous_commit stays on, so acknowledged commits survive kill()), plus
 *   `opts.settings`; with `opts.ssl`, TLS on; with `opts.hba`, that `pg_hba.conf`.
 * - Resolves once `select 1` succeeds over TCP (retried, at most ~30 s). Rejects with the server's output when it
 *   exits or the deadline passes; the temp dir is removed then.
 * - A postmaster still alive when this process exits is SIGKILLed, and the temp dir is removed.
 */
export async function startPgCluster(opts: PgClusterOptions = {}): Promise<PgClusterHandle> {
  const binDir = findPgBinDir();
  const port = opts.port ?? (await freePort());
  const tempDir = await createTempDir('pgcluster-');
  const dir = tempDir.path;
  const removeDir = () => tempDir.remove();
  const dataDir = join(dir, 'data');
  const asUser = typeof process.getuid === 'function' && process.getuid() === 0 ? postgresUser() : undefined;
  if (typeof process.getuid === 'function' && process.getuid() === 0 && !asUser) {
    await removeDir();
    throw new Error('startPgCluster: running as root but there is no postgres OS user to run PostgreSQL as');
  }
  const ids = asUser ? { uid: asUser.uid, gid: asUser.gid } : {};
  if (asUser) await chown(dir, asUser.uid, asUser.gid);

  const settings: Record<string, string | number> = {
    listen_addresses: '127.0.0.1',
    port,
    unix_socket_directories: dir,
    // fsync/full_page_writes only protect against an OS crash; a killed postmaster loses nothing without them.
    // synchronous_commit must stay on: with it off, commits acknowledged before kill() can vanish.
    fsync: 'off',
    full_page_writes: 'off',
    max_connections: 100,
    ...opts.settings,
  };
  let postgresArgs = serverArgs(dataDir, settings);

  let child: ServerChild | undefined;
  const output = createOutputTail();
  /** Output of the current launch attempt only. */
  let attemptOutput = '';
  const append = (chunk: Buffer): void => {
    output.append(chunk);
    if (attemptOutput.length < OUTPUT_LIMIT) attemptOutput += chunk.toString('utf8');
  };
  const running = (): boolean => child !== undefined && !hasExited(child.proc);
  const url = (db = 'postgres'): string => `postgres://postgres@127.0.0.1:${port}/${db}`;
  const socket = (db = 'postgres') => ({ host: dir, port, user: 'postgres', database: db });

  async function selectOne(): Promise<boolean> {
    const client = new pg.Client({
      ...(opts.hba ? socket() : { connectionString: url() }),
      connectionTimeoutMillis: 2_000,
    });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.query('select 1');
      return true;
    } catch {
      return false;
    } finally {
      await client.end().catch(() => undefined);
    }
  }

  async function launch(): Promise<void> {
    const deadline = Date.now() + READY_TIMEOUT_MS;
    for (;;) {
      attemptOutput = '';
      child = spawnServer(join(binDir, 'postgres'), postgresArgs, {
        ...ids,
        cwd: dir,
        detached: opts.ownProcessGroup === true,
        onOutput: append,
      });
      const { proc, spawnError } = child;

      for (;;) {
        const failedSpawn = spawnError();
        if (failedSpawn) throw new Error(`postgres failed to spawn: ${failedSpawn.message}`);
        if (hasExited(proc)) break;
        if (await selectOne()) {
          if (!hasExited(proc)) return;
          break;
        }
        if (Date.now() > deadline) {
          await stopChild(proc, 'SIGKILL', 10_000);
          throw new Error(
            `postgres did not accept connections on 127.0.0.1:${port} within 30 s:\n${output.text()}`,
          );
        }
        await sleep(100);
      }
      // The postmaster exited during startup. Leftovers of a killed predecessor (backends still attached to the
      // shared memory, the port not yet released) go away by themselves: retry until the deadline.
      const transient = /still in use|already exists|could not bind|Address already in use/i.test(
        attemptOutput,
      );
      if (!transient || Date.now() > deadline) {
        throw new Error(
          `postgres exited during startup (code ${proc.exitCode}, signal ${proc.signalCode}) on port ${port}:\n${output.text()}`,
        );
      }
      await sleep(200);
    }
  }

  const signalAndWait = (signal: NodeJS.Signals, timeoutMs: number) =>
    stopChild(child?.proc, signal, timeoutMs);

  const handle: PgClusterHandle = {
    port,
    dir,
    dataDir,
    url,
    socket,
    isRunning: running,
    output: output.text,
    stop: () => signalAndWait('SIGINT', 30_000),
    async kill() {
      const proc = child?.proc;
      if (!proc || !running() || proc.pid === undefined) return;
      // Backends notice the postmaster's death and exit on their own; wait for them so that a following
      // start() does not find the shared memory still attached.
      const backends = childPids(proc.pid);
      await signalAndWait('SIGKILL', 10_000);
      const deadline = Date.now() + 10_000;
      while (backends.some(alive) && Date.now() < deadline) await sleep(50);
      for (const pid of backends.filter(alive)) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    },
    async start() {
      if (running()) return;
      await launch();
    },
    async cleanup() {
      await signalAndWait('SIGINT', 30_000);
      await removeDir();
    },
  };

  try {
    await run(
      join(binDir, 'initdb'),
      ['-D', dataDir, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync'],
      { ...ids, cwd: dir },
    );
    if (opts.ssl) Object.assign(settings, await installTls(opts.ssl, join(dir, 'tls'), asUser));
    if (opts.hba) {
      const hbaFile = join(dir, 'pg_hba.conf');
      await writeFile(hbaFile, ['local all postgres trust', ...opts.hba, ''].join('\n'));
      if (asUser) await chown(hbaFile, asUser.uid, asUser.gid);
      settings.hba_file = hbaFile;
    }
    postgresArgs = serverArgs(dataDir, settings);
    await launch();
  } catch (err) {
    await signalAndWait('SIGKILL', 10_000);
    await removeDir();
    throw err;
  }
  return handle;
}
