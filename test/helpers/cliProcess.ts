/**
 * Running the built `recognition-core` CLI as a child process, as an operator would: a clean
 * environment (only what the test passes, plus PATH and HOME), every output line collected, and
 * the JSON log lines parsed. Needs `npm run build` first (the `npm test` script does it).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** `bin/recognition-core.js` of this checkout. */
export const CLI_BIN = fileURLToPath(new URL('../../bin/recognition-core.js', import.meta.url));
const BUILT_CLI = fileURLToPath(new URL('../../dist/src/cli.js', import.meta.url));

/** One line of output. */
export interface OutputLine {
  stream: 'stdout' | 'stderr';
  text: string;
}

/** A running (or finished) CLI process. */
export interface CliProcess {
  child: ChildProcess;
  /** Every complete line so far, both streams, in arrival order. */
  lines: OutputLine[];
  /** The stdout lines that are JSON objects (pino log lines). */
  logs(): Array<Record<string, unknown>>;
  /** All output so far as text (for failure messages). */
  output(): string;
  /** Resolves with the first JSON log line matching `pred` (rejects after `timeoutMs` or at exit). */
  waitForLog(
    pred: (line: Record<string, unknown>) => boolean,
    timeoutMs?: number,
  ): Promise<Record<string, unknown>>;
  /** Resolves when the process exits. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const live = new Set<ChildProcess>();
let hooked = false;

/** The environment of a spawned CLI: PATH and HOME only, plus `env`. */
export function cliEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  return { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/tmp', ...env };
}

export interface SpawnCliOptions {
  /**
   * A command that runs `node bin/recognition-core.js ...args` appended to it, e.g. `unshare
   * --net ...` to run the CLI where the default addresses answer nothing. It must end by exec'ing
   * them, so that signals sent to the child reach the CLI.
   */
  wrapper?: string[];
  /** Another built script than the CLI to run with node (a service built from this checkout). */
  script?: string;
}

/** Spawn `node bin/recognition-core.js ...args` with a clean environment plus `env`. */
export function spawnCli(
  args: string[],
  env: Record<string, string>,
  opts: SpawnCliOptions = {},
): CliProcess {
  if (!existsSync(BUILT_CLI))
    throw new Error('the CLI is not built: run `npm run build` before the integration tests');
  if (!hooked) {
    hooked = true;
    process.on('exit', () => live.forEach((c) => c.kill('SIGKILL')));
  }
  const script = opts.script ?? CLI_BIN;
  const [command, ...wrapperArgs] = [...(opts.wrapper ?? []), process.execPath, script, ...args];
  const child = spawn(command!, wrapperArgs, {
    env: cliEnv(env),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  const lines: OutputLine[] = [];
  const parsed: Array<Record<string, unknown>> = [];
  const waiters = new Set<{
    pred: (l: Record<string, unknown>) => boolean;
    resolve: (l: Record<string, unknown>) => void;
  }>();
  for (const stream of ['stdout', 'stderr'] as const) {
    let buffer = '';
    child[stream]!.setEncoding('utf8');
    child[stream]!.on('data', (chunk: string) => {
      buffer += chunk;
      let nl: number;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const text = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        lines.push({ stream, text });
        if (stream === 'stdout' && text.startsWith('{')) {
          try {
            const obj = JSON.parse(text) as Record<string, unknown>;
            parsed.push(obj);
            for (const w of [...waiters]) {
              if (w.pred(obj)) {
                waiters.delete(w);
                w.resolve(obj);
              }
            }
          } catch {
            // not a log line
          }
        }
      }
    });
    child[stream]!.on('end', () => {
      if (buffer) lines.push({ stream, text: buffer });
      buffer = '';
    });
  }
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('close', (code, signal) => {
      live.delete(child);
      resolve({ code, signal });
    });
  });
  const output = () => lines.map((l) => `${l.stream}: ${l.text}`).join('\n');
  return {
    child,
    lines,
    logs: () => parsed,
    output,
    exited,
    waitForLog(pred, timeoutMs = 30_000) {
      const found = parsed.find(pred);
      if (found) return Promise.resolve(found);
      return new Promise((resolve, reject) => {
        const w = { pred, resolve };
        waiters.add(w);
        const timer = setTimeout(() => {
          waiters.delete(w);
          reject(new Error(`no matching log line within ${timeoutMs} ms; output:\n${output().slice(-4000)}`));
        }, timeoutMs);
        w.resolve = (l) => {
          clearTimeout(timer);
          resolve(l);
        };
        void exited.then(({ code, signal }) => {
          if (!waiters.has(w)) return;
          waiters.delete(w);
          clearTimeout(timer);
          reject(
            new Error(
              `the CLI exited (code ${code}, signal ${signal}) before a matching log line; output:\n${output().slice(-4000)}`,
            ),
          );
        });
      });
    },
  };
}

export interface RunCliOptions extends SpawnCliOptions {
  /** Killed (SIGKILL) after this long; default 30 s. */
  timeoutMs?: number;
}

/** Run the CLI to completion (killed after `timeoutMs`, given alone or in the options). */
export async function runCli(
  args: string[],
  env: Record<string, string>,
  options: number | RunCliOptions = {},
): Promise<{
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string[];
  stderr: string[];
  output: string;
}> {
  const { timeoutMs = 30_000, ...spawnOptions } =
    typeof options === 'number' ? { timeoutMs: options } : options;
  const p = spawnCli(args, env, spawnOptions);
  const timer = setTimeout(() => p.child.kill('SIGKILL'), timeoutMs);
  const { code, signal } = await p.exited;
  clearTimeout(timer);
  return {
    code,
    signal,
    stdout: p.lines.filter((l) => l.stream === 'stdout').map((l) => l.text),
    stderr: p.lines.filter((l) => l.stream === 'stderr').map((l) => l.text),
    output: p.output(),
  };
}
