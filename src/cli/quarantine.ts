/** `quarantine list|replay`: inspect and re-apply messages the inbox could not apply. */
import { InvalidArgumentError, type Command } from 'commander';
import { QUARANTINE_REASONS, type QuarantineReason } from '../../machines/statuses.js';
import { UsageError } from '../errors.js';
import { wholeNumber } from './plumbing.js';

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
      const { withDb } = await import('./withDb.js');
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
      const { commandConfig } = await import('./commandConfig.js');
      const { replayQuarantine } = await import('../daemon/quarantineReplay.js');
      const { withDb } = await import('./withDb.js');
      const cfg = commandConfig();
      const results = await withDb(({ db }) =>
        replayQuarantine(db, id !== undefined ? { id } : { reason: o.reason! }, cfg.MAX_ENVELOPE_BYTES),
      );
      if (id !== undefined && results.length === 0)
        throw new UsageError(`no inbox_quarantine row with id ${id}`);
      for (const r of results) process.stdout.write(JSON.stringify(r) + '\n');
    });
}
