/**
 * What the `quarantine` commands do when they run (registered in `./quarantine.ts`): list, replay
 * (on `src/replay/quarantineReplay.ts`) and purge. Imported by their actions only: it loads the
 * database client.
 */
import { UsageError } from '../errors.js';
import { purgeQuarantined, replayQuarantined, replaySummary } from '../operator/quarantine.js';
import { plural, print } from './plumbing.js';
import type { ListOptions, PurgeOptions, ReplayOptions } from './quarantine.js';
import { cliAudit, warnUnrecorded } from './auditActions.js';
import { withDb } from './withDb.js';

/** `quarantine list`: newest first, JSON lines; a long payload is cut. */
export async function listAction(o: ListOptions): Promise<void> {
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
}

/**
 * `quarantine replay [id] [--reason R]`: each outcome on stdout, a summary on stderr; exit 1
 * ({@link StillQuarantined}) when any message stays quarantined.
 */
export async function replayAction(id: string | undefined, o: ReplayOptions): Promise<void> {
  const which = id !== undefined ? { id } : { reason: o.reason! };
  const results = await withDb(({ db }, cfg) =>
    replayQuarantined(db, which, cfg, cliAudit(o.note), warnUnrecorded),
  );
  if (id !== undefined && results.length === 0) throw new UsageError(`no inbox_quarantine row with id ${id}`);
  for (const r of results) process.stdout.write(JSON.stringify(r) + '\n');
  const summary = replaySummary(results.map((r) => r.outcome));
  if (summary.stillQuarantined > 0) throw new StillQuarantined(summary.text);
  process.stderr.write(`${summary.text}\n`);
}

/**
 * `quarantine purge --older-than D [--reason R] [--dry-run]`: delete the quarantined messages
 * received before D (of reason R), oldest first, a page per transaction.
 */
export async function purgeAction(o: PurgeOptions): Promise<void> {
  const dryRun = o.dryRun === true;
  const which = { receivedBefore: o.olderThan, reason: o.reason };
  const selection = { older_than: o.olderThan, reason: o.reason ?? null };
  const messages = await withDb(({ db }) =>
    purgeQuarantined(db, which, selection, { dryRun, audit: cliAudit(o.note), onUnrecorded: warnUnrecorded }),
  );
  print({ dry_run: dryRun, reason: o.reason ?? null, messages });
  process.stderr.write(
    `${dryRun ? 'would delete' : 'deleted'} ${plural(messages, 'quarantined message')}${o.reason ? ` (${o.reason})` : ''}\n`,
  );
}

/** Exit code 1 of `quarantine replay`: a replayed message is still quarantined. */
export class StillQuarantined extends Error {
  override name = 'StillQuarantined';
}
