/**
 * Settling a batch of inbox messages, the one policy of every road that applies them (the live
 * inbox, `inbox replay`, `quarantine replay`): apply the batch in one transaction; on a fault that
 * is not the messages', hand it to the road (retry, nak or stop); when the database refuses a
 * value, apply the messages one by one, and store the one still refused as a refusal
 * ({@link refusedItem}); when even that is refused, the road gives the message up.
 */
import { QUARANTINE_REASON } from '../../machines/index.js';
import { classifyDatabaseFailure, type DatabaseFailure } from '../errors.js';
import type { InboxItem, InboxOutcome } from './inboxBatch.js';

/**
 * A message the database refused for a reason a retry cannot fix, made a message to quarantine:
 * `SCHEMA_INVALID`, stage `apply`, the database's error, and what its decoding found (job id,
 * message id, service name; the decoder's reason when it had one). Pure.
 */
export function refusedItem(item: InboxItem, err: unknown): InboxItem {
  const d = item.decoded;
  const jobId = d.ok ? d.envelope.job_id : d.jobId;
  const serviceName = d.ok ? d.envelope.service.name : d.serviceName;
  return {
    raw: item.raw,
    decoded: {
      ok: false,
      reason: QUARANTINE_REASON.SCHEMA_INVALID,
      details: {
        stage: 'apply',
        error: err instanceof Error ? err.message : String(err),
        ...(d.ok ? {} : { decoded_reason: d.reason }),
      },
      ...(jobId === undefined ? {} : { jobId }),
      msgId: d.msgId ?? null,
      ...(serviceName === undefined ? {} : { serviceName }),
    },
  };
}

/** What a failed try was: its items, the error, its classification, which try, whether a refusal. */
export interface SettleFault<I extends InboxItem> {
  items: readonly I[];
  err: unknown;
  failure: DatabaseFailure;
  /** 1 for the first try of these items. */
  attempt: number;
  /** The one item was on its way to quarantine as a refusal. */
  refusal: boolean;
}

/** What a road does at each turn of {@link settleBatch}. */
export interface SettleRoad<I extends InboxItem> {
  /** Apply `items` in one transaction (`refusal`: the one item is a refusal, see {@link refusedItem}). */
  apply(items: readonly InboxItem[], refusal: boolean): Promise<readonly InboxOutcome[]>;
  /** `items` committed with `outcomes`, one each, in order (a refusal: its original item). */
  committed(items: readonly I[], outcomes: readonly InboxOutcome[], refusal: boolean): void | Promise<void>;
  /**
   * A fault that is not the messages' (or a transient one): `'retry'` to try the same items again,
   * `'settled'` once the road has dealt with them (a nak); throwing stops the settling.
   */
  faulted(fault: SettleFault<I>): 'retry' | 'settled' | Promise<'retry' | 'settled'>;
  /** The database refused a value of a batch of several: its items are applied one by one next. */
  isolating?(fault: SettleFault<I>): void;
  /** The database refused even the refusal of `fault.items[0]`: the road gives it up (term, stop). */
  unstorable(fault: SettleFault<I>): void | Promise<void>;
}

/**
 * Settle `items` on `road` (see the module's header). Resolves once each item is committed or
 * handed to the road; rejects only with what the road throws.
 *
 *   1. apply them all; committed → done;
 *   2. a transient fault, or one that is not the messages' → the road decides (retry from 1);
 *   3. the database refused a value: several items → each settled on its own;
 *   4. one item → its refusal applied instead (refused too → the road gives it up).
 */
export async function settleBatch<I extends InboxItem>(
  items: readonly I[],
  road: SettleRoad<I>,
  refusal?: InboxItem,
): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    let outcomes: readonly InboxOutcome[];
    try {
      // 1. One transaction.
      outcomes = await road.apply(refusal ? [refusal] : items, refusal !== undefined);
    } catch (err) {
      const failure = classifyDatabaseFailure(err);
      const fault: SettleFault<I> = { items, err, failure, attempt, refusal: refusal !== undefined };
      // 2. Not the messages' doing: nothing is quarantined for it.
      if (failure.transient || failure.fault !== 'message') {
        if ((await road.faulted(fault)) === 'retry') continue;
        return;
      }
      // 3. Isolate the refused one.
      if (items.length > 1) {
        road.isolating?.(fault);
        for (const item of items) await settleBatch([item], road);
        return;
      }
      // 4. Store its refusal, or give it up.
      if (refusal) return road.unstorable(fault);
      return settleBatch(items, road, refusedItem(items[0]!, err));
    }
    await road.committed(items, outcomes, refusal !== undefined);
    return;
  }
}
