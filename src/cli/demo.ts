/**
 * `demo`: the whole exchange in one command (see `src/demo/runDemo.ts`), on private servers where
 * none answers (`src/demo/demoServers.ts`). Exit 0 when every job reached a final status, 1 otherwise.
 */
import type { Command } from 'commander';
import { demoTraceReceiver, flushTracing } from '../tracing/bootstrap.js';
import { wholeNumber } from './plumbing.js';

/** How the demo finds its servers (`src/demo/demoServers.ts`), for `demo --help`. */
const SERVERS_HELP = `
Servers:
  The demo uses PostgreSQL at DATABASE_URL and NATS (with JetStream) at NATS_URL. When one of
  them is unset (or empty) and nothing answers at its default address (127.0.0.1:5432,
  127.0.0.1:4222), the demo starts a private one for the run and says so: PostgreSQL by initdb
  into a temporary directory (as the postgres user when run as root), nats-server with JetStream,
  each on a free loopback port. Both are stopped and removed at the end, also after Ctrl-C or a
  failure; the demo database goes with them.
  When a private server is needed but its binaries are missing, the demo prints the command that
  installs them (Debian: apt-get install -y postgresql nats-server) and exits 1.
  A variable set explicitly is never replaced: when nothing answers there, the demo stops with
  one line naming it.`;

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
    .addHelpText('after', SERVERS_HELP)
    .action(async (o: { jobs: number; seed: number; database: string; timeout: number; trace?: boolean }) => {
      const { nameEnvTypos } = await import('./commandConfig.js');
      const { runDemo } = await import('../demo/runDemo.js');
      const { withStopSignals } = await import('../process/stopSignals.js');
      nameEnvTypos();
      // Ctrl-C once: stop waiting, shut down cleanly and print the summary; twice: exit now.
      await withStopSignals({}, async (stop) => {
        const result = await runDemo({
          jobs: o.jobs,
          seed: o.seed,
          database: o.database,
          timeoutMs: o.timeout * 1000,
          signal: stop.signal,
          trace: o.trace ? { receiver: demoTraceReceiver(), flush: flushTracing } : undefined,
        });
        if (!result.allFinal) process.exitCode = 1;
      });
    });
}
