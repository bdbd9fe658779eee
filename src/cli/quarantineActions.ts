/**
 * What the `quarantine` commands do when they run (registered in `./quarantine.ts`): list, replay
 * (on `src/replay/quarantineReplay.ts`) and purge. Imported by their actions only: it loads the
 * database client.
 */
import { countQuarantined, deleteQuarantined } from '../db/retention.js';
import { UsageError } from '../errors.js';
import { replayQuarantine } from '../replay/quarantineReplay.js';
import { plural, print } from './plumbing.js';
import type { ListOptions, PurgeOptions, ReplayOptions } from './quarantine.js';
import { audited } from './auditActions.js';
import { withDb } from './withDb.js';

/** Messages deleted per transaction by `quarantine purge`. */
const PAGE = 1_000;

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
    audited(
      db,
      { action: 'quarantine replay', selection: which, affected: 0, note: o.note ?? null },
      async (e) => {
        const replayed = await replayQuarantine(
          db,
          which,
          cfg.MAX_ENVELOPE_BYTES,
          { resultsBucket: cfg.RESULTS_BUCKET },
          { quarantinePayloadMaxBytes: cfg.QUARANTINE_PAYLOAD_MAX_BYTES },
        );
        e.affected = replayed.length;
        e.outcome = countBy(replayed.map((r) => r.outcome));
        return replayed;
      },
    ),
  );
  if (id !== undefined && results.length === 0) throw new UsageError(`no inbox_quarantine row with id ${id}`);
  for (const r of results) process.stdout.write(JSON.stringify(r) + '\n');
  const summary = replaySummary(results.map((r) => r.outcome));
  if (summary.stillQuarantined > 0) throw new StillQuarantined(summary.text);
  process.stderr.write(`${summary.text}\n`);
}

/**
 * `quarantine purge --older-than D [--reason R] [--dry-run]`: delete the quarantined messages
 * received before D (of reason R), oldest first, in transactions of {@link PAGE}.
 */
export async function purgeAction(o: PurgeOptions): Promise<void> {
  const dryRun = o.dryRun === true;
  const which = { receivedBefore: o.olderThan, reason: o.reason };
  const messages = await withDb(async ({ db }) => {
    if (dryRun) return countQuarantined(db, which);
    const selection = { older_than: o.olderThan, reason: o.reason ?? null };
    return audited(
      db,
      { action: 'quarantine purge', selection, affected: 0, note: o.note ?? null },
      async (e) => {
        for (;;) {
          const deleted = await db.transaction().execute((tx) => deleteQuarantined(tx, which, PAGE));
          e.affected += deleted;
          if (deleted < PAGE) return e.affected;
        }
      },
    );
  });
  print({ dry_run: dryRun, reason: o.reason ?? null, messages });
  process.stderr.write(
    `${dryRun ? 'would delete' : 'deleted'} ${plural(messages, 'quarantined message')}${o.reason ? ` (${o.reason})` : ''}\n`,
  );
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

/** How many of each value `values` holds. */
function countBy(values: readonly string[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const v of values) counts[v] = (counts[v] ?? 0) + 1;
  return counts;
}
