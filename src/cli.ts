/**
 * The `recognition-core` command. Each group of subcommands lives in `src/cli/<group>.ts` and
 * registers itself here. Usage errors and bad configuration print one line and exit 2.
 */
import { Command, CommanderError } from 'commander';
import { ConfigError, MigrationsPendingError, UsageError } from './errors.js';
import { redactUrl } from './config.js';
import { registerDbCommands } from './cli/db.js';
import { registerJobsCommands } from './cli/jobs.js';
import { registerStartCommand } from './cli/start.js';
import { registerQuarantineCommands } from './cli/quarantine.js';
import { registerStatechartsCommands } from './cli/statecharts.js';
import { registerDemoCommand } from './cli/demo.js';
import { registerServiceCommands } from './cli/service.js';
import { registerRetentionCommands } from './cli/retention.js';
import { stopTracing } from './tracing/bootstrap.js';

const program = new Command('recognition-core')
  .description(
    'Core of the document-recognition job exchange: NATS JetStream ⇄ PostgreSQL, one XState machine per job',
  )
  .showHelpAfterError('(run with --help for usage)')
  .exitOverride();

registerStartCommand(program);
registerDbCommands(program);
registerJobsCommands(program);
registerQuarantineCommands(program);
registerStatechartsCommands(program);
registerDemoCommand(program);
registerServiceCommands(program);
registerRetentionCommands(program);

/** One line on stderr, then the exit code: 2 for usage and configuration, 1 otherwise. */
function fail(err: unknown): never {
  if (err instanceof CommanderError) process.exit(err.exitCode === 0 ? 0 : 2);
  const message = redactUrl(err instanceof Error ? err.message : String(err));
  process.stderr.write(`recognition-core: ${message}\n`);
  const code =
    err instanceof UsageError || err instanceof ConfigError || err instanceof MigrationsPendingError ? 2 : 1;
  process.exit(code);
}

try {
  await program.parseAsync(process.argv);
  // Export the spans still buffered before the process ends (no-op without tracing).
  await stopTracing();
} catch (err) {
  await stopTracing().catch(() => undefined);
  fail(err);
}
