/**
 * `inbox replay` as a library: deliver `RECOGNITION_RESULTS` again, from a time or a stream
 * sequence up to its *end* (its last sequence when the replay starts, or `untilSeq`), through the
 * inbox's path on the replay's road of the settle policy, for a database that lost results the
 * inbox had acked. Rule: it reads through an ordered consumer of its own, never `core-inbox`, in
 * stream order, and is idempotent; it prints nothing (callbacks report). Reasoning:
 * docs/development.md ("Replays").
 */
import { randomUUID } from 'node:crypto';
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import type { Kysely } from 'kysely';
import type { Database } from '../db/schema.js';
import type { ResultObjectRule } from '../messages/resultObject.js';
import { RESULTS_STREAM, RESULT_SUBJECT } from '../nats/subjects.js';
import {
  applyInboxBatch,
  applyInboxBatchTx,
  decodeItem,
  type InboxItem,
  type InboxOutcome,
  type PgPool,
} from '../daemon/inboxBatch.js';
import { ReceivedMessage } from '../daemon/inboxMessage.js';
import { settleBatch, type SettleRoad } from '../daemon/inboxSettle.js';

/** Where a replay starts: a stream sequence, or the first message stored at or after a time. */
export type ReplayStart = { seq: number } | { time: Date };

export interface InboxReplayOptions {
  db: Kysely<Database>;
  /** The pg pool behind `db`: batches then run with prepared statements, as the inbox's do. */
  pool?: PgPool;
  js: JetStreamClient;
  jsm: JetStreamManager;
  from: ReplayStart;
  /** Stop after this stream sequence (default and at most: the last one when the replay starts). */
  untilSeq?: number | undefined;
  /** Messages per transaction. */
  batchSize: number;
  maxEnvelopeBytes: number;
  /** The longest payload prefix a quarantine row keeps (`QUARANTINE_PAYLOAD_MAX_BYTES`; 64 KiB if unset). */
  quarantinePayloadMaxBytes?: number;
  /** The bucket every result's object must be in (`RESULTS_BUCKET`), as the inbox checks it. */
  resultsBucket: string;
  /**
   * Decide every message and write nothing: each batch runs in a transaction that is rolled back,
   * so it is decided on the database as it is, without the earlier batches' effects.
   */
  dryRun?: boolean;
  /** Called once the stream's bounds are known, before the first message. */
  onPlan?: (plan: ReplayPlan) => void;
  /** Called after each batch. */
  onProgress?: (summary: Readonly<InboxReplaySummary>) => void;
}

/** The stream as the replay found it. */
export interface ReplayPlan {
  stream: string;
  /** The oldest message the stream still holds (older ones aged out), or null when it is empty. */
  oldest: { seq: number; time: Date } | null;
  /** The last sequence the replay delivers. */
  endSeq: number;
  /** Messages from the start to the stream's end when the replay began (its consumer's count). */
  pending: number;
  /** True when the start asked for lies before the oldest message: results older than it are gone. */
  startAgedOut: boolean;
}

/** What a replay did, counted per message. */
export interface InboxReplaySummary {
  stream: string;
  /** The first and last sequence delivered (null when nothing was). */
  firstSeq: number | null;
  lastSeq: number | null;
  /** The sequence the replay stops at. */
  endSeq: number;
  delivered: number;
  /** A transition: the database had lost this result or ack. */
  applied: number;
  /** The same msg id was already applied, or a repeated ack: nothing changes. */
  duplicates: number;
  /** Not accepted in the job's status (an ack for a job already finished). */
  ignored: number;
  /** A result for a job already in a final status (for example timed out after the restore). */
  late: number;
  /** Stored in (or already in) `inbox_quarantine`: invalid, or for a job this database lacks. */
  quarantined: number;
  dryRun: boolean;
}

/** A replay stopped before its end; run it again from {@link resumeSeq}. */
export class InboxReplayStoppedError extends Error {
  override name = 'InboxReplayStoppedError';
  constructor(
    readonly resumeSeq: number,
    readonly summary: InboxReplaySummary,
    options?: { cause: unknown },
  ) {
    const cause = options?.cause instanceof Error ? `: ${options.cause.message}` : '';
    super(
      `replay stopped at stream sequence ${resumeSeq} (${summary.delivered} delivered before)${cause}; run it again with --from-seq ${resumeSeq}`,
      options,
    );
  }
}

/** Tries of a batch that fails for a transient cause before the replay stops. */
export const MAX_ATTEMPTS = 8;

/** Delay before the next try of a batch: 250 ms doubling, at most 5 s (about 20 s in all). */
const retryDelayMs = (attempt: number) => Math.min(250 * 2 ** (attempt - 1), 5_000);

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Thrown inside a dry run's transaction so that it rolls back. */
class DryRunRollback extends Error {
  override name = 'DryRunRollback';
  constructor(readonly outcomes: InboxOutcome[]) {
    super('dry run: rolled back');
  }
}

/** Apply `items` in one transaction and roll it back: the outcomes, nothing written. */
async function decideOnly(
  db: Kysely<Database>,
  items: readonly InboxItem[],
  rule: ResultObjectRule,
): Promise<InboxOutcome[]> {
  try {
    await db.transaction().execute(async (tx) => {
      throw new DryRunRollback(await applyInboxBatch(tx, items, rule));
    });
  } catch (err) {
    if (err instanceof DryRunRollback) return err.outcomes;
    throw err;
  }
  throw new Error('unreachable: a dry run commits nothing');
}

function count(summary: InboxReplaySummary, outcomes: readonly InboxOutcome[]): void {
  for (const o of outcomes) {
    if (o.kind === 'quarantined') summary.quarantined++;
    else if (o.outcome.decision === 'applied') summary.applied++;
    else if (o.outcome.decision === 'duplicate') summary.duplicates++;
    else if (o.outcome.decision === 'late') summary.late++;
    else summary.ignored++;
  }
}

/** The stream's time of a message (`first_ts` and friends are RFC 3339 text). */
function parseTime(value: unknown): Date | null {
  if (typeof value !== 'string') return null;
  const t = Date.parse(value);
  return Number.isNaN(t) ? null : new Date(t);
}

/**
 * Replay the results stream (see the module's comment). Resolves with the counts once the message
 * at the end sequence (or the last one before it) is applied; rejects with
 * {@link InboxReplayStoppedError} when it cannot go on.
 *
 *   1. read the stream's bounds: the end is its last sequence now (or `untilSeq`);
 *   2. create an ordered consumer from the start; nothing pending → done;
 *   3. gather messages into batches in stream order; apply each (retried, isolated as needed);
 *   4. stop at the end, or at a message with nothing after it; delete the consumer.
 */
export async function replayInbox(opts: InboxReplayOptions): Promise<InboxReplaySummary> {
  // 1. The stream's bounds.
  const { state } = await opts.jsm.streams.info(RESULTS_STREAM);
  const endSeq = Math.min(opts.untilSeq ?? state.last_seq, state.last_seq);
  const oldestTime = parseTime(state.first_ts);
  const oldest = state.messages > 0 && oldestTime ? { seq: state.first_seq, time: oldestTime } : null;
  const startAgedOut =
    oldest !== null &&
    ('seq' in opts.from ? opts.from.seq < oldest.seq : opts.from.time.getTime() < oldest.time.getTime());
  const summary: InboxReplaySummary = {
    stream: RESULTS_STREAM,
    firstSeq: null,
    lastSeq: null,
    endSeq,
    delivered: 0,
    applied: 0,
    duplicates: 0,
    ignored: 0,
    late: 0,
    quarantined: 0,
    dryRun: opts.dryRun === true,
  };
  const nothing = state.messages === 0 || ('seq' in opts.from && opts.from.seq > endSeq);
  if (nothing) {
    opts.onPlan?.({ stream: RESULTS_STREAM, oldest, endSeq, pending: 0, startAgedOut });
    return summary;
  }

  // 2. An ordered consumer of its own, from the start.
  const consumer = await opts.js.consumers.get(RESULTS_STREAM, {
    name_prefix: `core-replay-${randomUUID().slice(0, 8)}`,
    filter_subjects: RESULT_SUBJECT,
    ...('seq' in opts.from
      ? { opt_start_seq: opts.from.seq }
      : { opt_start_time: opts.from.time.toISOString() }),
  });
  try {
    const pending = (await consumer.info(true)).num_pending;
    opts.onPlan?.({ stream: RESULTS_STREAM, oldest, endSeq, pending, startAgedOut });
    if (pending === 0) return summary;

    // 3. Batches in stream order.
    const target = opts.pool ?? opts.db;
    const rule = { resultsBucket: opts.resultsBucket };
    const apply = (items: readonly InboxItem[]) =>
      opts.dryRun
        ? decideOnly(opts.db, items, rule)
        : applyInboxBatchTx(target, items, rule, {
            limits:
              opts.quarantinePayloadMaxBytes === undefined
                ? undefined
                : { payloadMaxBytes: opts.quarantinePayloadMaxBytes },
          });

    /**
     * The replay's road of the settle policy: a transient fault is tried again after a growing
     * delay, up to {@link MAX_ATTEMPTS} times; any other fault that is not the messages', or a
     * refusal the database refuses too, stops the replay (it is idempotent: run it again).
     */
    const road: SettleRoad<InboxItem> = {
      apply,
      committed: (_items, outcomes) => count(summary, outcomes),
      async faulted({ items, err, failure, attempt }) {
        if (!failure.transient || attempt >= MAX_ATTEMPTS)
          throw new InboxReplayStoppedError(items[0]!.raw.streamSeq!, summary, { cause: err });
        await sleep(retryDelayMs(attempt));
        return 'retry' as const;
      },
      unstorable({ items, err }) {
        throw new InboxReplayStoppedError(items[0]!.raw.streamSeq!, summary, { cause: err });
      },
    };

    let batch: InboxItem[] = [];
    const flush = async () => {
      if (batch.length === 0) return;
      const items = batch;
      batch = [];
      await settleBatch(items, road);
      summary.firstSeq ??= items[0]!.raw.streamSeq;
      summary.lastSeq = items[items.length - 1]!.raw.streamSeq;
      summary.delivered += items.length;
      opts.onProgress?.(summary);
    };

    /** Where a stopped replay resumes: after the last message applied, else at its start. */
    const resumeSeq = () =>
      summary.lastSeq !== null ? summary.lastSeq + 1 : 'seq' in opts.from ? opts.from.seq : null;
    const stopped = (cause: unknown): Error => {
      const resume = resumeSeq();
      if (resume === null)
        return new Error(
          `replay stopped before delivering anything: ${cause instanceof Error ? cause.message : String(cause)}`,
          { cause },
        );
      return new InboxReplayStoppedError(resume, summary, { cause });
    };

    // 4. Until the end.
    const messages = await consumer.consume({ max_messages: Math.max(opts.batchSize * 2, 64) });
    let reachedEnd = false;
    try {
      for await (const msg of messages) {
        if (msg.seq > endSeq) {
          reachedEnd = true;
          break;
        }
        batch.push(decodeItem(new ReceivedMessage(msg), opts.maxEnvelopeBytes));
        // The end, or nothing after this message in the stream (those up to the end were deleted).
        const last = msg.seq >= endSeq || msg.info.pending === 0;
        if (batch.length >= opts.batchSize || last) await flush();
        if (last) {
          reachedEnd = true;
          break;
        }
      }
      await flush();
    } catch (err) {
      // A batch that could not be applied says where to resume; the consumer failing does not.
      throw err instanceof InboxReplayStoppedError ? err : stopped(err);
    } finally {
      await messages.close().catch(() => undefined);
    }
    if (!reachedEnd)
      throw stopped(new Error('its consumer ended before the end sequence (the NATS connection closed?)'));
    return summary;
  } finally {
    await consumer.delete().catch(() => undefined);
  }
}
