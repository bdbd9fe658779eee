/**
 * `quarantine replay` as a library: run stored messages through the inbox path again (for example
 * once the job an UNKNOWN_JOB message named exists) on the settle policy's road, one transaction
 * per row. Rule: the row is the message's one record; a message still quarantined (or refused)
 * stays in the same row, which takes the new verdict (reason, details, job id, msg id) with
 * `replayed_at` and `replay_outcome`. Nothing is printed: the caller formats results.
 */
import { sql, type Kysely } from 'kysely';
import type { QuarantineReason } from '../../machines/index.js';
import type { Database, QuarantineRow } from '../db/schema.js';
import type { ResultObjectRule } from '../messages/resultObject.js';
import { QUARANTINE_PAYLOAD_MAX_BYTES_DEFAULT } from '../messages/quarantineRecord.js';
import { applyInboxBatch, decodeItem, type InboxItem, type InboxOutcome } from '../daemon/inboxBatch.js';
import { settleBatch, type SettleRoad } from '../daemon/inboxSettle.js';

/** What became of one replayed row. */
export interface ReplayResult {
  id: string;
  outcome: string;
  jobId: string | null;
}

/** Options of {@link replayQuarantine} beyond the rows to pick. */
export interface QuarantineReplayOptions {
  /** The longest payload prefix a quarantine row keeps (`QUARANTINE_PAYLOAD_MAX_BYTES`). */
  quarantinePayloadMaxBytes?: number | undefined;
}

/** A short word for an outcome, stored in `replay_outcome`. */
export function describeOutcome(o: InboxOutcome): string {
  if (o.kind === 'quarantined') return `still quarantined: ${o.reason}`;
  return o.outcome.decision === 'applied'
    ? `applied: ${o.outcome.from} -> ${o.outcome.to}`
    : o.outcome.decision;
}

/** A stored row as the message it was. */
function itemOf(row: QuarantineRow, maxEnvelopeBytes: number): InboxItem {
  return decodeItem(
    {
      subject: row.subject,
      stream: row.stream,
      streamSeq: row.stream_seq === null ? null : Number(row.stream_seq),
      headers: row.headers,
      data: row.payload,
    },
    maxEnvelopeBytes,
  );
}

/**
 * Replay quarantined messages chosen by id or by reason, one transaction each, checking results'
 * objects against `rule` as the inbox does. A fault that is not the messages', or a refusal the
 * database refuses too, rejects (what was replayed before stays replayed).
 */
export async function replayQuarantine(
  db: Kysely<Database>,
  which: { id?: string; reason?: QuarantineReason },
  maxEnvelopeBytes: number,
  rule: ResultObjectRule,
  options: QuarantineReplayOptions = {},
): Promise<ReplayResult[]> {
  const limits = {
    payloadMaxBytes: options.quarantinePayloadMaxBytes ?? QUARANTINE_PAYLOAD_MAX_BYTES_DEFAULT,
  };
  let q = db.selectFrom('inbox_quarantine').selectAll().orderBy('id');
  if (which.id !== undefined) q = q.where('id', '=', which.id);
  if (which.reason !== undefined) q = q.where('reason', '=', which.reason).where('replayed_at', 'is', null);
  const rows: QuarantineRow[] = await q.execute();
  const results: ReplayResult[] = [];
  for (const row of rows) {
    const road: SettleRoad<InboxItem> = {
      apply: (items) =>
        db.transaction().execute(async (tx) => {
          const outcomes = await applyInboxBatch(tx, items, rule, limits);
          const out = outcomes[0]!;
          await tx
            .updateTable('inbox_quarantine')
            .set({
              replayed_at: sql<Date>`now()`,
              replay_outcome: describeOutcome(out),
              ...(out.kind === 'quarantined'
                ? {
                    reason: out.reason,
                    job_id: out.jobId,
                    msg_id: out.msgId,
                    details: JSON.stringify(out.details),
                  }
                : {}),
            })
            .where('id', '=', row.id)
            .execute();
          return outcomes;
        }),
      committed(_items, [out]) {
        results.push({
          id: row.id,
          outcome: describeOutcome(out!),
          jobId: out!.kind === 'step' ? out!.outcome.jobId : out!.jobId,
        });
      },
      faulted({ err }) {
        throw err;
      },
      unstorable({ err }) {
        throw err;
      },
    };
    await settleBatch([itemOf(row, maxEnvelopeBytes)], road);
  }
  return results;
}
