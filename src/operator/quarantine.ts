/**
 * `quarantine replay` and `quarantine purge` as a library, for the CLI and the operator console:
 * each audited once it has run (a dry run is not). Nothing is printed: the caller formats results.
 */
import type { Kysely } from 'kysely';
import type { Config } from '../config.js';
import { audited, type AuditEntry } from '../db/audit.js';
import { countQuarantined, deleteQuarantined, type QuarantineSelection } from '../db/retention.js';
import type { Database } from '../db/schema.js';
import type { QuarantineReason } from '../../machines/index.js';
import { replayQuarantine, type ReplayResult } from '../replay/quarantineReplay.js';

/** Messages deleted per transaction by a purge. */
export const PURGE_PAGE = 1_000;

/** The audit row of an action before it runs: who, through what, why. */
export type ActionAudit = Pick<AuditEntry, 'actor' | 'via' | 'note'>;

/** The settings a replay checks messages against, as the inbox does. */
export type ReplaySettings = Pick<
  Config,
  'MAX_ENVELOPE_BYTES' | 'RESULTS_BUCKET' | 'QUARANTINE_PAYLOAD_MAX_BYTES'
>;

/** Replay the quarantined messages `which` names through the inbox path, audited. */
export async function replayQuarantined(
  db: Kysely<Database>,
  which: { id: string } | { reason: QuarantineReason },
  cfg: ReplaySettings,
  audit: ActionAudit,
  onUnrecorded?: (err: unknown) => void,
): Promise<ReplayResult[]> {
  return audited(
    db,
    { ...audit, action: 'quarantine replay', selection: which, affected: 0 },
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
    onUnrecorded,
  );
}

/**
 * Delete the quarantined messages of `which`, oldest first, in transactions of {@link PURGE_PAGE},
 * audited; dry, count them. Resolves with how many were (or would be) deleted.
 */
export async function purgeQuarantined(
  db: Kysely<Database>,
  which: QuarantineSelection,
  selection: Record<string, unknown>,
  run: { dryRun: boolean; audit: ActionAudit; onUnrecorded?: (err: unknown) => void },
): Promise<number> {
  if (run.dryRun) return countQuarantined(db, which);
  return audited(
    db,
    { ...run.audit, action: 'quarantine purge', selection, affected: 0 },
    async (e) => {
      for (;;) {
        const deleted = await db.transaction().execute((tx) => deleteQuarantined(tx, which, PURGE_PAGE));
        e.affected += deleted;
        if (deleted < PURGE_PAGE) return e.affected;
      }
    },
    run.onUnrecorded,
  );
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
