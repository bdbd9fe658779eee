/**
 * The `recognition-core` command: parse the command line (`./cli/program.ts`), run the command,
 * then export the spans still buffered. Usage errors and bad configuration print one line and
 * exit 2. The launcher (`bin/recognition-core.js`) calls {@link runCli}.
 */
import type { Command } from 'commander';
import { CommanderError } from './cli/commander.js';
import { ConfigError, MigrationsPendingError, UsageError } from './errors.js';
import { buildProgram } from './cli/program.js';
import { stopTracing } from './tracing/bootstrap.js';

/** One line on stderr, then the exit code: 2 for usage and configuration, 1 otherwise. */
async function fail(err: unknown): Promise<never> {
  if (err instanceof CommanderError) process.exit(err.exitCode === 0 ? 0 : 2);
  // The configuration module (and its validation library) is loaded only on this path.
  const { redactUrl } = await import('./config.js');
  const message = redactUrl(err instanceof Error ? err.message : String(err));
  process.stderr.write(`recognition-core: ${message}\n`);
  const code =
    err instanceof UsageError || err instanceof ConfigError || err instanceof MigrationsPendingError ? 2 : 1;
  process.exit(code);
}

/**
 * Run the command line `argv` (`process.argv`): the product's program, plus the commands
 * `addCommands` registers on it (the launcher's: the workshop's, in a development checkout).
 */
export async function runCli(
  opts: { argv?: readonly string[]; addCommands?: (program: Command) => void } = {},
): Promise<void> {
  // A reader that stops early (`jobs list | head -1`) closes the pipe: what is left to write has
  // nowhere to go and nothing went wrong, so the command ends at once, quietly, with exit code 0.
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EPIPE' || err.code === 'ERR_STREAM_DESTROYED') process.exit(0);
      process.stderr.write(`recognition-core: cannot write the output: ${err.message}\n`);
      process.exit(1);
    });
  }

  try {
    const program = buildProgram();
    opts.addCommands?.(program);
    await program.parseAsync([...(opts.argv ?? process.argv)]);
    // Export the spans still buffered before the process ends (no-op without tracing).
    await stopTracing();
  } catch (err) {
    await stopTracing().catch(() => undefined);
    await fail(err);
  }
}
