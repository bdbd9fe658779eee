import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants, readdirSync, readFileSync } from 'node:fs';
import { chown, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import pg from 'pg';

import { freePort } from './freePort.js';

/** Options of {@link startPgCluster}; every field is optional. */
export interface PgClusterOptions {
  /** Port on 127.0.0.1; defaults to a free one. */
  port?: number;
  /** Extra server settings passed as `-c name=value` (override the helper's defaults). */
  settings?: Record<string, string | number>;
}

/** A temporary PostgreSQL cluster started by {@link startPgCluster}. */
export interface PgClusterHandle {
  /** TCP port on 127.0.0.1; stays the same across stop/kill/start. */
  readonly port: number;
  /** Temp dir holding the data directory (`<dir>/data`), the unix socket and the log. */
  readonly dir: string;
  /** The data directory. */
  readonly dataDir: string;
  /** `postgres://postgres@127.0.0.1:PORT/<db>` (trust auth, no password). */
  url(db?: string): string;
  /** Whether the postmaster is running. */
  isRunning(): boolean;
  /** The last ~64 KiB of the postmaster's output (its log), across restarts. */
  output(): string;
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
  /** {@link stop}, then remove the temp dir. */
  cleanup(): Promise<void>;
}

const OUTPUT_LIMIT = 64 * 1024;
const READY_TIMEOUT_MS = 30_000;

const liveChildren = new Set<ChildProcess>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const child of liveChildren) child.kill('SIGKILL');
  });
}

function hasServerBinaries(dir: string): boolean {
  try {
    accessSync(join(dir, 'initdb'), fsConstants.X_OK);
    accessSync(join(dir, 'postgres'), fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * Locates the directory holding `initdb` and `postgres`: `$PG_BINDIR` if set, else `pg_config --bindir` if that
 * directory has them, else the highest-numbered `/usr/lib/postgresql/<version>/bin` that has them. Throws an
 * Error with an install hint when none is found.
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
  throw new Error(
    'PostgreSQL server binaries (initdb, postgres) not found: install postgresql (apt-get install postgresql) or set PG_BINDIR',
  );
}

/** uid/gid of the `postgres` OS user, read from /etc/passwd; undefined if there is none. */
function postgresUser(): { uid: number; gid: number } | undefined {
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
function childPids(pid: number): number[] {
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

function alive(pid: number): boolean {
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

function waitForExit(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
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
 *   `opts.settings`.
 * - Resolves once `select 1` succeeds over TCP (retried, at most ~30 s). Rejects with the server's output when it
 *   exits or the deadline passes; the temp dir is removed then.
 * - Children still alive when the test process exits are SIGKILLed.
 */
export async function startPgCluster(opts: PgClusterOptions = {}): Promise<PgClusterHandle> {
  const binDir = findPgBinDir();
  installExitHook();
  const port = opts.port ?? (await freePort());
  const dir = await mkdtemp(join(tmpdir(), 'pgcluster-'));
  const dataDir = join(dir, 'data');
  const asUser = typeof process.getuid === 'function' && process.getuid() === 0 ? postgresUser() : undefined;
  if (typeof process.getuid === 'function' && process.getuid() === 0 && !asUser) {
    await rm(dir, { recursive: true, force: true });
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
  const postgresArgs = ['-D', dataDir, ...Object.entries(settings).flatMap(([k, v]) => ['-c', `${k}=${v}`])];

  let child: ChildProcess | undefined;
  let output = '';
  /** Output of the current launch attempt only. */
  let attemptOutput = '';
  const append = (chunk: Buffer): void => {
    const text = chunk.toString('utf8');
    output += text;
    if (output.length > OUTPUT_LIMIT) output = output.slice(output.length - OUTPUT_LIMIT);
    if (attemptOutput.length < OUTPUT_LIMIT) attemptOutput += text;
  };
  const running = (): boolean => child !== undefined && child.exitCode === null && child.signalCode === null;
  const url = (db = 'postgres'): string => `postgres://postgres@127.0.0.1:${port}/${db}`;

  async function selectOne(): Promise<boolean> {
    const client = new pg.Client({ connectionString: url(), connectionTimeoutMillis: 2_000 });
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
      const proc = spawn(join(binDir, 'postgres'), postgresArgs, {
        ...ids,
        cwd: dir,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      child = proc;
      attemptOutput = '';
      liveChildren.add(proc);
      proc.stdout?.on('data', append);
      proc.stderr?.on('data', append);
      let spawnError: Error | undefined;
      proc.once('error', (err) => {
        spawnError = err;
      });
      proc.once('exit', () => liveChildren.delete(proc));

      for (;;) {
        if (spawnError) throw new Error(`postgres failed to spawn: ${spawnError.message}`);
        if (proc.exitCode !== null || proc.signalCode !== null) break;
        if (await selectOne()) {
          if (proc.exitCode === null && proc.signalCode === null) return;
          break;
        }
        if (Date.now() > deadline) {
          proc.kill('SIGKILL');
          await waitForExit(proc);
          throw new Error(`postgres did not accept connections on 127.0.0.1:${port} within 30 s:\n${output}`);
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
          `postgres exited during startup (code ${proc.exitCode}, signal ${proc.signalCode}) on port ${port}:\n${output}`,
        );
      }
      await sleep(200);
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

  const handle: PgClusterHandle = {
    port,
    dir,
    dataDir,
    url,
    isRunning: running,
    output: () => output,
    stop: () => signalAndWait('SIGINT', 30_000),
    async kill() {
      const proc = child;
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
      await rm(dir, { recursive: true, force: true });
    },
  };

  try {
    await run(
      join(binDir, 'initdb'),
      ['-D', dataDir, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync'],
      { ...ids, cwd: dir },
    );
    await launch();
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  return handle;
}
