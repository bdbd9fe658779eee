/**
 * `inbox replay`: deliver `RECOGNITION_RESULTS` again through the inbox, from a time (`--since`)
 * or a stream sequence (`--from-seq`), up to the stream's last sequence when it starts (or
 * `--until-seq`). For a database that lost results the inbox had acked: after a restore from a
 * backup or an asynchronous failover (docs/operations.md, "Replaying results").
 * This module registers it; what it does is in `./inboxActions.ts`, imported when it runs.
 */
import type { Command } from 'commander';
import { noteOption } from './audit.js';
import type { Since } from '../db/jobs.js';
import { sinceTime, wholeNumber } from './plumbing.js';

/** Options of `inbox replay`. */
export interface ReplayOptions {
  since?: Since;
  fromSeq?: number;
  untilSeq?: number;
  dryRun?: boolean;
  note?: string;
}

/** Register `inbox replay`. */
export function registerInboxCommands(program: Command): void {
  const inbox = program.command('inbox').description('the inbox: results from RECOGNITION_RESULTS');
  noteOption(inbox.command('replay'))
    .description(
      'deliver RECOGNITION_RESULTS again through the inbox, from a time or a sequence up to its last message (after a restore or a failover); idempotent',
    )
    .option(
      '--since <time>',
      'from the messages stored at or after this time (30m, 1h, 2d back from the database clock, or an ISO 8601 time)',
      sinceTime,
    )
    .option('--from-seq <n>', 'from this stream sequence', wholeNumber(1))
    .option(
      '--until-seq <n>',
      'up to this stream sequence (default: the last one when the replay starts)',
      wholeNumber(1),
    )
    .option('--dry-run', 'decide every message and write nothing (each batch is rolled back)')
    .action(async (o: ReplayOptions) => (await import('./inboxActions.js')).replayAction(o));
}
