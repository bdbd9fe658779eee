/**
 * `demo`: the whole exchange in one command (see `src/demo/runDemo.ts`). Exit 0 when every job
 * reached a final status, 1 otherwise.
 */
import type { Command } from 'commander';
import { runDemo } from '../demo/runDemo.js';
import { demoTraceReceiver, flushTracing } from '../tracing/bootstrap.js';
import { wholeNumber } from './service.js';

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
    .option(
      '--trace',
      "trace the exchange (OpenTelemetry): to the OTEL_EXPORTER_OTLP_* endpoint if set, else to a local receiver; prints one job's trace",
    )
    .action(async (o: { jobs: number; seed: number; database: string; timeout: number; trace?: boolean }) => {
      // Ctrl-C once: stop waiting, shut down cleanly and print the summary; twice: exit now.
      const abort = new AbortController();
      const onSignal = () => {
        if (abort.signal.aborted) process.exit(130);
        abort.abort();
      };
      process.on('SIGINT', onSignal);
      process.on('SIGTERM', onSignal);
      try {
        const result = await runDemo({
          jobs: o.jobs,
          seed: o.seed,
          database: o.database,
          timeoutMs: o.timeout * 1000,
          signal: abort.signal,
          trace: o.trace ? { receiver: demoTraceReceiver(), flush: flushTracing } : undefined,
        });
        if (!result.allFinal) process.exitCode = 1;
      } finally {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
      }
    });
}
