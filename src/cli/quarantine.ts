/** `quarantine list|replay|purge`: inspect, re-apply and delete messages the inbox could not apply. */
import type { Command } from 'commander';
import { InvalidArgumentError } from './commander.js';
import { QUARANTINE_REASONS, type QuarantineReason } from '../../machines/statuses.js';
import { UsageError } from '../errors.js';
import { sinceTime, wholeNumber } from './plumbing.js';
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
    .action(async (id: string | undefined, o: { reason?: QuarantineReason }) => {
      const { commandConfig } = await import('./commandConfig.js');
      const { replayQuarantine } = await import('../replay/quarantineReplay.js');
      const { withDb } = await import('./withDb.js');
      const cfg = commandConfig();
      const results = await withDb(({ db }) =>
        replayQuarantine(db, id !== undefined ? { id } : { reason: o.reason! }, cfg.MAX_ENVELOPE_BYTES, {
          resultsBucket: cfg.RESULTS_BUCKET,
        }),
      );
      if (id !== undefined && results.length === 0)
        throw new UsageError(`no inbox_quarantine row with id ${id}`);
      for (const r of results) process.stdout.write(JSON.stringify(r) + '\n');
      const summary = replaySummary(results.map((r) => r.outcome));
      if (summary.stillQuarantined > 0) throw new StillQuarantined(summary.text);
      process.stderr.write(`${summary.text}\n`);
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

/** Exit code 1 of `quarantine replay`: a replayed message is still quarantined. */
export class StillQuarantined extends Error {
  override name = 'StillQuarantined';
}

/**
 * What a replay did, in one line: how many messages, then how many of each outcome (`applied`,
 * `duplicate`, `ignored`, `late`), then how many are still quarantined, by reason. `outcomes` are
 * the `replay_outcome` texts (`applied: a -> b`, `still quarantined: REASON`, or a decision).
 */
export function replaySummary(outcomes: readonly string[]): { text: string; stillQuarantined: number } {
  if (outcomes.length === 0) return { text: 'nothing to replay', stillQuarantined: 0 };
  const done = new Map<string, number>();
  const stuck = new Map<string, number>();
  for (const outcome of outcomes) {
    const quarantined = /^still quarantined: (.+)$/.exec(outcome);
    const [tally, key] = quarantined ? [stuck, quarantined[1]!] : [done, outcome.split(':')[0]!];
    tally.set(key, (tally.get(key) ?? 0) + 1);
  }
  const stillQuarantined = [...stuck.values()].reduce((a, b) => a + b, 0);
  const parts = [...done].map(([what, n]) => `${n} ${what}`);
  if (stillQuarantined > 0)
    parts.push(
      `${stillQuarantined} still quarantined (${[...stuck].map(([why, n]) => `${why}: ${n}`).join(', ')})`,
    );
  return { text: `replayed ${outcomes.length}: ${parts.join(', ')}`, stillQuarantined };
}
