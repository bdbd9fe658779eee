/**
 * `demo`: the whole exchange in one command (see `workshop/demo/runDemo.ts`), on private servers unless
 * `--servers existing` (`workshop/demo/demoServers.ts`). Exit 0 when every job reached a final status,
 * 1 otherwise.
 */
import type { Command } from 'commander';
import { Option } from '../../src/cli/commander.js';
import { DEMO_SERVER_CHOICES, type DemoServerChoice } from '../demo/demoServerChoices.js';
import { flushTracing } from '../../src/tracing/bootstrap.js';
import { demoTraceReceiver } from '../tracing/demoTrace.js';
import { wholeNumber } from '../../src/cli/plumbing.js';

/** Where the demo runs (`workshop/demo/demoServers.ts`), for `demo --help`. */
const SERVERS_HELP = `
Servers:
  --servers private (the default): the demo starts a PostgreSQL (initdb into a temporary
  directory, as the postgres user when run as root) and a nats-server with JetStream of its own,
  each on a free loopback port, whatever answers at 127.0.0.1:5432 and 127.0.0.1:4222 and whatever
  DATABASE_URL and NATS_URL say. It cannot reach a daemon's streams or database. Both servers are
  stopped and removed at the end, also after Ctrl-C or a failure; the demo database goes with
  them. When their binaries are missing, the demo prints the command that installs them (Debian:
  apt-get install -y postgresql nats-server) and exits 1.

  --servers existing: PostgreSQL at DATABASE_URL and NATS (with JetStream) at NATS_URL, or their
  defaults. The demo then keeps to what is its own there: the database --database (dropped and
  recreated; the name must contain 'demo'), and streams, subjects and an inbox consumer named for
  this run (DEMO_<ID>_RECOGNITION_JOBS and DEMO_<ID>_RECOGNITION_RESULTS, subjects demo_<id>.*,
  consumer demo-<id>-inbox), deleted at the end. It never purges, reads from or changes
  RECOGNITION_JOBS, RECOGNITION_RESULTS or core-inbox, so it can run next to a daemon. When a server
  does not answer, the demo stops with one line naming it.`;

export function registerDemoCommand(program: Command): void {
  program
    .command('demo')
    .description(
      'run the daemon and the reference tabular-parser service on servers of its own, create jobs, show their progress and a summary',
    )
    .addOption(
      new Option(
        '--servers <which>',
        'private: a PostgreSQL and nats-server of its own, removed at the end; existing: those of DATABASE_URL and NATS_URL, with a database and streams of its own',
      )
        .choices(DEMO_SERVER_CHOICES)
        .default('private'),
    )
    .option('--jobs <n>', 'files to register (one job each)', wholeNumber(1), 200)
    .option('--seed <n>', "seed of the service's random mix of answers", wholeNumber(0), 42)
    .option(
      '--database <name>',
      "demo database (dropped and recreated; must contain 'demo')",
      'recognition_demo',
    )
    .option('--timeout <seconds>', 'stop waiting for final statuses after this long', wholeNumber(1), 45)
    .option('--hold', 'once every job is final, keep the daemon and its operator console up until Ctrl-C')
    .option(
      '--trace',
      "trace the exchange (OpenTelemetry): to the OTEL_EXPORTER_OTLP_* endpoint if set, else to a local receiver; prints one job's trace",
    )
    .addHelpText('after', SERVERS_HELP)
    .action(
      async (o: {
        jobs: number;
        seed: number;
        database: string;
        timeout: number;
        trace?: boolean;
        hold?: boolean;
        servers: DemoServerChoice;
      }) => {
        const { nameEnvTypos } = await import('../../src/cli/commandConfig.js');
        const { runDemo } = await import('../demo/runDemo.js');
        const { withStopSignals } = await import('../../src/process/stopSignals.js');
        nameEnvTypos();
        // Ctrl-C once: stop waiting, shut down cleanly and print the summary; twice: exit now.
        await withStopSignals({}, async (stop) => {
          const result = await runDemo({
            jobs: o.jobs,
            seed: o.seed,
            database: o.database,
            servers: o.servers,
            timeoutMs: o.timeout * 1000,
            signal: stop.signal,
            hold: o.hold === true,
            trace: o.trace ? { receiver: demoTraceReceiver(), flush: flushTracing } : undefined,
          });
          if (!result.allFinal) process.exitCode = 1;
        });
      },
    );
}
