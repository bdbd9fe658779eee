/**
 * What the local servers (a private nats-server, a private PostgreSQL) share about their child
 * processes: a child never outlives this process, its temporary directories go with it, the tail
 * of its output is kept for error messages, and stopping it waits until it has exited.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { accessSync, constants as fsConstants, rmSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/** How much of a child's output is kept: enough for its last startup or shutdown messages. */
export const OUTPUT_LIMIT = 64 * 1024;

/** Options every local server takes. */
export interface LocalServerOptions {
  /** Port on 127.0.0.1; defaults to a free one. */
  port?: number;
  /**
   * Run the server in its own process group, so that a Ctrl-C typed in the terminal reaches only
   * this process (which stops the server itself). Off by default: a test run interrupted from the
   * terminal takes its servers down with it.
   */
  ownProcessGroup?: boolean;
}

/** What every local server's handle offers. */
export interface LocalServerHandle {
  /** Port on 127.0.0.1; stays the same across restarts. */
  readonly port: number;
  /** Whether the server process is running now. */
  isRunning(): boolean;
  /** The last ~64 KiB of the server's stdout and stderr (its log), across restarts. */
  output(): string;
  /** Stop the server gracefully and resolve once it has exited. No-op if stopped. */
  stop(): Promise<void>;
  /** SIGKILL (a crash) and resolve once it has exited. No-op if stopped. */
  kill(): Promise<void>;
  /** {@link LocalServerHandle.stop}, then remove the temporary directories the helper created. */
  cleanup(): Promise<void>;
}

const liveChildren = new Set<ChildProcess>();
const ownedDirs = new Set<string>();
let exitHookInstalled = false;

/**
 * On exit (also `process.exit()` after a second Ctrl-C or a failed start), SIGKILL every child
 * still alive and remove every directory still owned: a test run or a demo leaves no server and
 * no data directory behind even when it never reached its cleanup.
 */
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const child of liveChildren) child.kill('SIGKILL');
    for (const dir of ownedDirs) {
      try {
        rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 50 });
      } catch {
        // A dying server still writing into it: nothing more can be done while exiting.
      }
    }
  });
}

/** A fresh directory under the system's temporary directory (`TMPDIR`), removed at exit at the latest. */
export interface TempDir {
  readonly path: string;
  /** Remove it now (idempotent). */
  remove(): Promise<void>;
}

export async function createTempDir(prefix: string): Promise<TempDir> {
  installExitHook();
  const path = await mkdtemp(join(tmpdir(), prefix));
  ownedDirs.add(path);
  return {
    path,
    async remove() {
      await rm(path, { recursive: true, force: true });
      ownedDirs.delete(path);
    },
  };
}

/** Whether `path` is a file this process may execute. */
export function isExecutable(path: string): boolean {
  try {
    accessSync(path, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

export function hasExited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

function waitForExit(child: ChildProcess): Promise<void> {
  if (hasExited(child)) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

/**
 * Send `signal` to `child` and resolve once it has exited; SIGKILL it after `timeoutMs`.
 * No-op when there is no child or it has exited already.
 */
export async function stopChild(
  child: ChildProcess | undefined,
  signal: NodeJS.Signals,
  timeoutMs: number,
): Promise<void> {
  if (!child || hasExited(child)) return;
  const exited = waitForExit(child);
  child.kill(signal);
  // The bound is cancelled once the child exits: a pending timer would keep this process alive.
  const bound = new AbortController();
  const timedOut = await Promise.race([
    exited.then(() => false),
    sleep(timeoutMs, true, { signal: bound.signal }).catch(() => false),
  ]);
  bound.abort();
  if (timedOut) {
    child.kill('SIGKILL');
    await exited;
  }
}

/** The last {@link OUTPUT_LIMIT} characters a child wrote, across restarts. */
export interface OutputTail {
  append(chunk: Buffer): void;
  text(): string;
}

export function createOutputTail(): OutputTail {
  let output = '';
  return {
    append(chunk) {
      output += chunk.toString('utf8');
      if (output.length > OUTPUT_LIMIT) output = output.slice(output.length - OUTPUT_LIMIT);
    },
    text: () => output,
  };
}

/** A child started by {@link spawnServer}. */
export interface ServerChild {
  proc: ChildProcess;
  /** The error of a failed spawn (binary not executable, no such user), once it happened. */
  spawnError(): Error | undefined;
}

/**
 * Spawn a server process: stdout and stderr into `onOutput`, killed if still alive when this
 * process exits. `detached` puts it in its own process group, so a Ctrl-C typed in a terminal
 * reaches only this process, which then stops the server in its own time.
 */
export function spawnServer(
  file: string,
  args: string[],
  options: Pick<SpawnOptions, 'cwd' | 'uid' | 'gid' | 'detached'> & { onOutput: (chunk: Buffer) => void },
): ServerChild {
  installExitHook();
  const { onOutput, ...spawnOptions } = options;
  const proc = spawn(file, args, { ...spawnOptions, stdio: ['ignore', 'pipe', 'pipe'] });
  liveChildren.add(proc);
  proc.stdout?.on('data', onOutput);
  proc.stderr?.on('data', onOutput);
  let error: Error | undefined;
  proc.once('error', (err) => {
    error = err;
  });
  proc.once('exit', () => liveChildren.delete(proc));
  return { proc, spawnError: () => error };
}

/** What {@link startedServer} needs: the child just spawned and what it is waited for by. */
export interface StartingServer {
  /** The server's name in errors, e.g. `etcd`. */
  name: string;
  /** Where it should answer, in errors. */
  where: string;
  child: ServerChild;
  dir: TempDir;
  output: OutputTail;
  /** Whether the server answers yet (polled every 100 ms). */
  ready(): Promise<boolean>;
  startTimeoutMs: number;
  stopTimeoutMs: number;
}

/**
 * Wait for a server of one process to answer, and give its handle's process part. A failed
 * spawn, an exit, or `startTimeoutMs` without an answer kills the child, removes its directory
 * and throws with the server's last output; `cleanup` stops it and removes the directory.
 */
export async function startedServer(s: StartingServer): Promise<Omit<LocalServerHandle, 'port'>> {
  let child: ServerChild | undefined = s.child;
  const stop = (signal: NodeJS.Signals) => stopChild(child?.proc, signal, s.stopTimeoutMs);
  try {
    const deadline = Date.now() + s.startTimeoutMs;
    while (!(await s.ready())) {
      const failed = s.child.spawnError();
      if (failed) throw new Error(`${s.name} failed to spawn: ${failed.message}`);
      if (hasExited(s.child.proc) || Date.now() > deadline)
        throw new Error(`${s.name} did not start on ${s.where}:\n${s.output.text()}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } catch (err) {
    await stop('SIGKILL');
    child = undefined;
    await s.dir.remove();
    throw err;
  }
  return {
    isRunning: () => child !== undefined && !hasExited(child.proc),
    output: s.output.text,
    stop: () => stop('SIGTERM'),
    kill: () => stop('SIGKILL'),
    async cleanup() {
      await stop('SIGTERM');
      await s.dir.remove();
    },
  };
}
