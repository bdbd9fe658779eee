/**
 * `quarantine replay`: run stored messages through the inbox path again — for example once the
 * job an UNKNOWN_JOB message named has been created — and record the outcome on each row.
 * A message that is still unapplicable stays quarantined (the same row; no copy is added).
 */
import { sql, type Kysely } from 'kysely';
import type { QuarantineReason } from '../../machines/index.js';
import type { Database, QuarantineRow } from '../db/schema.js';
import type { ResultObjectRule } from '../messages/resultObject.js';
import { applyInboxBatch, decodeItem, type InboxOutcome } from './inboxBatch.js';

export interface ReplayResult {
  id: string;
  outcome: string;
  jobId: string | null;
}

/** A short word for an outcome, stored in `replay_outcome`. */
export function describeOutcome(o: InboxOutcome): string {
  if (o.kind === 'quarantined') return `still quarantined: ${o.reason}`;
  return o.outcome.decision === 'applied'
    ? `applied: ${o.outcome.from} -> ${o.outcome.to}`
    : o.outcome.decision;
}

/**
 * Replay quarantined messages chosen by id or by reason, one transaction each, checking results'
 * objects against `rule` as the inbox does.
 */
export async function replayQuarantine(
  db: Kysely<Database>,
  which: { id?: string; reason?: QuarantineReason },
  maxEnvelopeBytes: number,
  rule: ResultObjectRule,
): Promise<ReplayResult[]> {
  let q = db.selectFrom('inbox_quarantine').selectAll().orderBy('id');
  if (which.id !== undefined) q = q.where('id', '=', which.id);
  if (which.reason !== undefined) q = q.where('reason', '=', which.reason).where('replayed_at', 'is', null);
  const rows: QuarantineRow[] = await q.execute();
  const results: ReplayResult[] = [];
  for (const row of rows) {
    const outcome = await db.transaction().execute(async (tx) => {
      const item = decodeItem(
        {
          subject: row.subject,
          stream: row.stream,
          streamSeq: row.stream_seq === null ? null : Number(row.stream_seq),
          headers: row.headers,
          data: row.payload,
        },
        maxEnvelopeBytes,
      );
      const [out] = await applyInboxBatch(tx, [item], rule);
      const text = describeOutcome(out!);
      await tx
        .updateTable('inbox_quarantine')
        .set({ replayed_at: sql<Date>`now()`, replay_outcome: text })
        .where('id', '=', row.id)
        .execute();
      return { text, jobId: out!.kind === 'step' ? out!.outcome.jobId : out!.jobId };
    });
    results.push({ id: row.id, outcome: outcome.text, jobId: outcome.jobId });
  }
  return results;
}
