/** `quarantine list|replay|purge`: inspect, re-apply and delete messages the inbox could not apply. */
import { InvalidArgumentError, type Command } from 'commander';
import { QUARANTINE_REASONS, type QuarantineReason } from '../../machines/index.js';
import { loadConfig } from '../config.js';
import { replayQuarantine } from '../daemon/quarantineReplay.js';
import { UsageError } from '../errors.js';
import { sinceTime, wholeNumber, withDb } from './plumbing.js';
import type { Since } from '../db/jobs.js';

function reason(value: string): QuarantineReason {
  if (!(QUARANTINE_REASONS as readonly string[]).includes(value)) {
    throw new InvalidArgumentError(`must be one of ${QUARANTINE_REASONS.join(', ')}`);
  }
  return value as QuarantineReason;
}

export function registerQuarantineCommands(program: Command): void {
  const q = program.command('quarantine').description('messages the inbox could not apply');
  q.command('list')
    .description('list quarantined messages, newest first (JSON lines)')
    .option('--reason <reason>', `only this reason (${QUARANTINE_REASONS.join(', ')})`, reason)
    .option('--limit <n>', 'at most this many', wholeNumber(1), 100)
    .action(async (o: { reason?: QuarantineReason; limit: number }) => {
      const rows = await withDb(({ db }) => {
        let query = db.selectFrom('inbox_quarantine').selectAll().orderBy('id', 'desc').limit(o.limit);
        if (o.reason) query = query.where('reason', '=', o.reason);
        return query.execute();
      });
      for (const r of rows) {
        const payload = Buffer.from(r.payload);
        const text = payload.toString('utf8');
        process.stdout.write(
          JSON.stringify({
            ...r,
            payload: text.length > 2000 ? `${text.slice(0, 2000)}… (${payload.length} bytes)` : text,
          }) + '\n',
        );
      }
    });
  q.command('replay [id]')
    .description(
      'run stored messages through the inbox again (one by id, or all not yet replayed of --reason)',
    )
    .option('--reason <reason>', 'replay every not-yet-replayed message of this reason', reason)
    .action(async (id: string | undefined, o: { reason?: QuarantineReason }) => {
      if ((id === undefined) === (o.reason === undefined))
        throw new UsageError('give either a quarantine id or --reason');
      if (id !== undefined && !/^\d+$/.test(id))
        throw new UsageError(`quarantine id must be a number: ${JSON.stringify(id)}`);
      const cfg = loadConfig();
      const results = await withDb(({ db }) =>
        replayQuarantine(db, id !== undefined ? { id } : { reason: o.reason! }, cfg.MAX_ENVELOPE_BYTES),
      );
      if (id !== undefined && results.length === 0)
        throw new UsageError(`no inbox_quarantine row with id ${id}`);
      for (const r of results) process.stdout.write(JSON.stringify(r) + '\n');
    });
  registerQuarantinePurgeCommand(q);
}

/** `quarantine purge`, on the `quarantine` command. */
function registerQuarantinePurgeCommand(q: Command): void {
  q.command('purge')
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
    .action(async (o: { olderThan: Since; reason?: QuarantineReason; dryRun?: boolean }) => {
      const { quarantinePurge } = await import('./retentionActions.js');
      await quarantinePurge(o);
    });
}
