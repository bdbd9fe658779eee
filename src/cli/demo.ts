/**
 * `demo`: the whole exchange in one command (see `src/demo/runDemo.ts`). Exit 0 when every job
 * reached a final status, 1 otherwise.
 */
import type { Command } from 'commander';
import { runDemo } from '../demo/runDemo.js';
import { withStopSignals } from '../process/stopSignals.js';
import { wholeNumber } from './plumbing.js';

export function registerDemoCommand(program: Command): void {
  program
    .command('demo')
    .description(
      'run the daemon and the reference tabular-parser service against a demo database and fresh streams, create jobs, show their progress and a summary',
    )
    .option('--jobs <n>', 'files to register (one job each)', wholeNumber(1), 200)
    .option('--seed <n>', "seed of the service's random mix of answers", wholeNumber(0), 42)
    .option(
      '--database <name>',
      "demo database on DATABASE_URL's server (dropped and recreated; must contain 'demo')",
      'recognition_demo',
    )
    .option('--timeout <seconds>', 'stop waiting for final statuses after this long', wholeNumber(1), 45)
    .action(async (o: { jobs: number; seed: number; database: string; timeout: number }) => {
      // Ctrl-C once: stop waiting, shut down cleanly and print the summary; twice: exit now.
      await withStopSignals({}, async (stop) => {
        const result = await runDemo({
          jobs: o.jobs,
          seed: o.seed,
          database: o.database,
          timeoutMs: o.timeout * 1000,
          signal: stop.signal,
        });
        if (!result.allFinal) process.exitCode = 1;
      });
    });
}
