/**
 * What the commands of `src/cli/` share when they are registered, so that no command imports from
 * another: option parsers, the inspector options, printing a result. Light on purpose: it is
 * loaded for every command, `--help` and `--version` included, so it imports commander and
 * nothing heavy. What an action needs at run time is in modules the action imports when it runs:
 * `./commandConfig.ts` (the configuration), `./withDb.ts` (the database), `./commandLogger.ts`
 * (the logger), `./inspect.ts` (the inspector).
 */
import type { Command } from 'commander';
import { InvalidArgumentError } from './commander.js';
import type { Since } from '../db/jobs.js';
import { DEFAULT_INSPECT_PORT } from '../statecharts/inspectorDefaults.js';
import { parseMoment } from '../duration.js';

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
 * A commander parser for a `--…-since` moment: a span back from the database clock (`90s`, `30m`,
 * `1h`, `2d`, `1w`) or an ISO 8601 date or time.
 */
export function sinceTime(value: string): Since {
  const since = parseMoment(value);
  if (since) return since;
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

/** `1 job`, `2 jobs`: a count and its noun, for summary lines. */
export function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}
