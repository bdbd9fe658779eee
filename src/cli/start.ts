/**
 * `recognition-core start`: the daemon in the foreground, until SIGTERM or SIGINT.
 * The first signal stops gracefully (exit 0); a second one, or SHUTDOWN_TIMEOUT_MS, forces exit 1.
 * This module registers the command; what it does is in `./startActions.ts`, imported when it runs.
 */
import type { Command } from 'commander';

/** Register `start`. */
export function registerStartCommand(program: Command): void {
  program
    .command('start')
    .description('run the daemon: inbox, watchdog and publisher, with /healthz, /readyz and /metrics')
    .action(async () => (await import('./startActions.js')).startAction());
}
