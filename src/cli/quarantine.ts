/**
 * `quarantine list|replay|purge`: inspect, re-apply and delete messages the inbox could not apply.
 * This module registers them; what they do is in `./quarantineActions.ts`, imported when one runs.
 */
import type { Command } from 'commander';
import { noteOption } from './audit.js';
import { InvalidArgumentError } from './commander.js';
import { QUARANTINE_REASONS, type QuarantineReason } from '../../machines/statuses.js';
import { UsageError } from '../errors.js';
import { sinceTime, wholeNumber } from './plumbing.js';
import type { Since } from '../db/jobs.js';

/** A commander parser for a quarantine reason. */
function reason(value: string): QuarantineReason {
  if (!(QUARANTINE_REASONS as readonly string[]).includes(value)) {
    throw new InvalidArgumentError(`must be one of ${QUARANTINE_REASONS.join(', ')}`);
  }
  return value as QuarantineReason;
}

/** Options of `quarantine list`. */
export interface ListOptions {
  reason?: QuarantineReason | undefined;
  limit: number;
}

/** Options of `quarantine replay`. */
export interface ReplayOptions {
  reason?: QuarantineReason | undefined;
  note?: string;
}

/** Options of `quarantine purge`. */
export interface PurgeOptions {
  olderThan: Since;
  reason?: QuarantineReason | undefined;
  dryRun?: boolean | undefined;
  note?: string;
}

/** Register `quarantine list|replay|purge`. */
export function registerQuarantineCommands(program: Command): void {
  const q = program.command('quarantine').description('messages the inbox could not apply');
  q.command('list')
    .description('list quarantined messages, newest first (JSON lines)')
    .option('--reason <reason>', `only this reason (${QUARANTINE_REASONS.join(', ')})`, reason)
    .option('--limit <n>', 'at most this many', wholeNumber(1), 100)
    .action(async (o: ListOptions) => (await import('./quarantineActions.js')).listAction(o));
  noteOption(q.command('replay [id]'))
    .description(
      'run stored messages through the inbox again (one by id, or all not yet replayed of --reason); prints each outcome, then a summary on stderr; exit 1 when any stays quarantined',
    )
    .option('--reason <reason>', 'replay every not-yet-replayed message of this reason', reason)
    .hook('preAction', (_self, cmd) => {
      const id = cmd.processedArgs[0] as string | undefined;
      if ((id === undefined) === (cmd.opts<{ reason?: string }>().reason === undefined))
        throw new UsageError('give either a quarantine id or --reason');
      if (id !== undefined && !/^\d+$/.test(id))
        throw new UsageError(`quarantine id must be a number: ${JSON.stringify(id)}`);
    })
    .action(async (id: string | undefined, o: ReplayOptions) =>
      (await import('./quarantineActions.js')).replayAction(id, o),
    );
  registerQuarantinePurgeCommand(q);
}

/** `quarantine purge`, on the `quarantine` command. */
function registerQuarantinePurgeCommand(q: Command): void {
  noteOption(q.command('purge'))
    .description(
      'delete quarantined messages received before --older-than (of --reason); prints how many (retention does this every pass with RETENTION_QUARANTINE)',
    )
    .requiredOption(
      '--older-than <when>',
      'received before this: a span back from now (90s, 30m, 1h, 30d, 2w) or an ISO 8601 time',
      sinceTime,
    )
    .option('--reason <reason>', `only this reason (${QUARANTINE_REASONS.join(', ')})`, reason)
    .option('--dry-run', 'count what would be deleted; delete nothing')
    .action(async (o: PurgeOptions) => (await import('./quarantineActions.js')).purgeAction(o));
}
