/**
 * `audit list`: the operator actions recorded in `recognition_audit`, and the `--note` option the
 * recorded commands take. This module registers them; what they do is in `./auditActions.ts`.
 */
import type { Command } from 'commander';
import { InvalidArgumentError } from './commander.js';
import { AUDIT_ACTIONS, type AuditAction } from '../../machines/statuses.js';
import { sinceTime, wholeNumber } from './plumbing.js';
import type { Since } from '../db/jobs.js';
import { outputOptions, type OutputOptions } from './rows.js';

/** The longest note `recognition_audit` keeps. */
export const NOTE_MAX = 2_000;

/** Options of `audit list`. */
export interface AuditListOptions extends OutputOptions {
  action?: AuditAction;
  actor?: string;
  since?: Since;
  limit: number;
}

/** Add `--note` to a command that the audit log records. */
export function noteOption(cmd: Command): Command {
  return cmd.option('--note <text>', 'why: recorded with the action in the audit log (audit list)', (v) => {
    if (v.trim() === '' || v.length > NOTE_MAX)
      throw new InvalidArgumentError(`must be 1 to ${NOTE_MAX} characters`);
    return v;
  });
}

function auditAction(value: string): AuditAction {
  if (!(AUDIT_ACTIONS as readonly string[]).includes(value))
    throw new InvalidArgumentError(`must be one of ${AUDIT_ACTIONS.map((a) => `"${a}"`).join(', ')}`);
  return value as AuditAction;
}

/** Register `audit list`. */
export function registerAuditCommands(program: Command): void {
  const audit = program.command('audit').description('the record of operator actions: who did what, and why');
  const list = audit
    .command('list')
    .description('recorded retries, replays and purges, newest first')
    .option('--action <action>', `only this action (${AUDIT_ACTIONS.join(', ')})`, auditAction)
    .option('--actor <name>', 'only actions of this actor')
    .option(
      '--since <when>',
      'only actions since a span back from now (30m, 1d) or an ISO 8601 time',
      sinceTime,
    )
    .option('--limit <n>', 'at most this many', wholeNumber(1), 100);
  outputOptions(list).action(async (o: AuditListOptions) =>
    (await import('./auditActions.js')).listAction(o),
  );
}
