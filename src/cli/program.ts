/**
 * The product's `recognition-core` command as a commander program: its commands and options,
 * nothing run.
 * Each group of subcommands lives in `./<group>.ts` and registers itself here; a registration
 * module imports commander and light modules only, and each action imports what it needs when it
 * runs, so that `--help`, `--version` and a mistyped option answer at once.
 */
import { Command } from './commander.js';
import { packageVersion } from '../packageInfo.js';
import { registerAuditCommands } from './audit.js';
import { registerDbCommands } from './db.js';
import { registerInboxCommands } from './inbox.js';
import { registerJobsCommands } from './jobs.js';
import { registerQuarantineCommands } from './quarantine.js';
import { registerRetentionCommands } from './retention.js';
import { registerStartCommand } from './start.js';

/**
 * A new program with every command of the product registered (a development checkout's launcher
 * adds the workshop's, `workshop/cli/register.ts`). `exitOverride()` is set: a usage error or
 * `--help` throws a CommanderError instead of exiting, and the caller decides the exit.
 */
export function buildProgram(): Command {
  const program = new Command('recognition-core')
    .description(
      'Core of the document-recognition job exchange: NATS JetStream ⇄ PostgreSQL, one XState machine per job',
    )
    .version(packageVersion(), '-V, --version', "print recognition-core's version")
    .showHelpAfterError('(run with --help for usage)')
    .exitOverride();

  registerStartCommand(program);
  registerDbCommands(program);
  registerJobsCommands(program);
  registerQuarantineCommands(program);
  registerInboxCommands(program);
  registerRetentionCommands(program);
  registerAuditCommands(program);
  return program;
}
