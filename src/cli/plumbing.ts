/**
 * What the commands of `src/cli/` share, so that no command imports from another: option parsers,
 * the logger of a long-running command, the database of a one-shot command, and the inspector
 * options of the commands that can replay a run into the Stately inspector.
 */
import { InvalidArgumentError, type Command } from 'commander';
import { loadConfig, secretsOf, type Config } from '../config.js';
import { openDb, type Db } from '../db/database.js';
import type { Since } from '../db/jobs.js';
import { parseSpanMs } from '../duration.js';
import { createLogger, type Logger } from '../logger.js';
import { withStopSignals } from '../process/stopSignals.js';
import {
  DEFAULT_INSPECT_PORT,
  inspectorInstructions,
  startInspection,
  type InspectionRun,
} from '../statecharts/inspector.js';

/** A commander parser for a whole number at least `min`. */
export function wholeNumber(min: number) {
  return (value: string): number => {
    if (!/^-?\d+$/.test(value.trim()) || Number(value) < min)
      throw new InvalidArgumentError(`must be a whole number of at least ${min}`);
    return Number(value);
  };
}

/** A commander parser for a TCP port (1-65535). */
export function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 65535)
    throw new InvalidArgumentError('must be a port number (1-65535)');
  return n;
}

/**
 * The root logger of a long-running command: LOG_LEVEL, pretty when LOG_PRETTY says so (`auto`:
 * when stdout is a terminal), the configured secrets scrubbed from every line.
 */
export function commandLogger(cfg: Config, opts: { base?: Record<string, unknown> } = {}): Logger {
  const pretty = cfg.LOG_PRETTY === 'true' || (cfg.LOG_PRETTY === 'auto' && process.stdout.isTTY === true);
  return createLogger({ level: cfg.LOG_LEVEL, pretty, secrets: secretsOf(cfg), ...opts });
}

/** Open the configured database for one command and close it after. */
export async function withDb<T>(fn: (db: Db) => Promise<T>): Promise<T> {
  const cfg = loadConfig();
  const db = openDb(cfg.DATABASE_URL, { max: 2 });
  try {
    return await fn(db);
  } finally {
    await db.close();
  }
}

export interface InspectOptions {
  inspect?: boolean;
  inspectPort: number;
  inspectExit?: boolean;
}

/** Add the inspector options shared by `simulate` and `jobs history`. */
export function inspectOptions(cmd: Command): Command {
  return cmd
    .option(
      '--inspect',
      'send the run to the Stately inspector (a local inspection server) and wait for Ctrl-C',
    )
    .option('--inspect-port <port>', 'port of the local inspection server', port, DEFAULT_INSPECT_PORT)
    .option(
      '--inspect-exit',
      'with --inspect: exit once the server holds the run instead of waiting for Ctrl-C',
    );
}

/**
 * Start the inspection server, send `run`, print how to open it, then wait for Ctrl-C (or return
 * at once with `--inspect-exit`). Writes to stderr when stdout carries JSON.
 */
export async function sendToInspector(
  run: InspectionRun,
  o: InspectOptions,
  out: (line: string) => void,
): Promise<void> {
  const session = await startInspection({ port: o.inspectPort });
  await withStopSignals({}, async (stop) => {
    try {
      out(inspectorInstructions(session));
      const count = await session.send(run);
      out(
        `  Sent ${count} inspection events (actor ${run.sessionId}).${o.inspectExit ? '' : ' Press Ctrl-C to stop.'}`,
      );
      if (!o.inspectExit) await stop.received;
    } finally {
      await session.close();
      // A browser still connected to the server keeps the process alive: do not wait for it.
      setTimeout(() => process.exit(), 1_000).unref();
    }
  });
}

/**
 * A commander parser for a `--…-since` moment: a span back from the database clock (`90s`, `30m`,
 * `1h`, `2d`, `1w`) or an ISO 8601 date or time.
 */
export function sinceTime(value: string): Since {
  const text = value.trim();
  const agoMs = parseSpanMs(text);
  if (agoMs !== undefined) return { agoMs };
  if (/^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}(:?\d{2})?)?)?$/.test(text)) {
    const at = new Date(text);
    if (!Number.isNaN(at.getTime())) return { at };
  }
  throw new InvalidArgumentError('must be a span back from now (90s, 30m, 1h, 2d, 1w) or an ISO 8601 time');
}

/** A commander parser for one or more values out of `allowed`, comma-separated or the option repeated. */
export function oneOrMoreOf<S extends string>(allowed: readonly S[]) {
  return (value: string, previous: S[] | undefined): S[] => {
    const out = [...(previous ?? [])];
    for (const part of value.split(',').map((p) => p.trim())) {
      if (!(allowed as readonly string[]).includes(part))
        throw new InvalidArgumentError(`must be one or more of ${allowed.join(', ')} (comma-separated)`);
      if (!out.includes(part as S)) out.push(part as S);
    }
    return out;
  };
}

/** A command's result on stdout: indented JSON, one document. */
export function print(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + '\n');
}
