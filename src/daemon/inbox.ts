/**
 * The inbox loop: envelopes from `core-inbox` (a durable pull consumer shared by every instance),
 * applied in batches, acked only after commit.
 *
 * Per message: decode (size, JSON, schema, msg id) → route to a lane by job id → the lane applies
 * its batch in one transaction → commit → ack. Lanes give bounded concurrency
 * (INBOX_CONCURRENCY) while keeping the messages of one job in stream order: a job always lands in
 * the same lane, and a lane applies one batch at a time. While a lane applies a batch, the
 * consumer keeps pulling the next messages (fetching overlaps applying).
 *
 * Failures: a retryable one (database unreachable, deadlock, serialization) naks the whole batch
 * with a delay that grows with the delivery count — JetStream ignores the consumer's backoff for a
 * plain nak — so it is redelivered as often as it takes. Any other failure of a batch falls back to
 * applying its messages one by one, so a single bad message cannot block its neighbours.
 */
import { createHash } from 'node:crypto';
import type { Consumer, ConsumerMessages, JetStreamClient, JsMsg } from '@nats-io/jetstream';
import type { Kysely } from 'kysely';
import { QUARANTINE_REASON } from '../../machines/index.js';
import type { Database } from '../db/schema.js';
import { isRetryable } from '../errors.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../nats/subjects.js';
import { applyInboxBatchTx, decodeItem, type InboxItem, type InboxOutcome, type RawMessage } from './inboxBatch.js';

export interface InboxOptions {
  db: Kysely<Database>;
  js: JetStreamClient;
  logger: Logger;
  metrics?: Metrics | undefined;
  batchSize: number;
  concurrency: number;
  maxEnvelopeBytes: number;
  ackWaitMs: number;
  /** Test hook: called before each batch transaction. */
  beforeBatch?: (items: readonly InboxItem[]) => Promise<void> | void;
}

export interface Inbox {
  /** Stop pulling, apply and ack what was already received, then resolve. */
  stop(): Promise<void>;
  /** True while the consumer is bound and pulling. */
  isBound(): boolean;
  /** Messages received and not yet acked or nak'd. */
  inFlight(): number;
}

/** Delay before a nak'd envelope comes back: grows with its delivery count, capped. */
export function nakDelayMs(deliveryCount: number): number {
  // 250 ms, 500 ms, 1 s … capped at 30 s: fast recovery from a blip, no hammering during an outage.
  return Math.min(250 * 2 ** Math.max(0, deliveryCount - 1), 30_000);
}

function rawOf(m: JsMsg): RawMessage {
  const headers: Record<string, string[]> = {};
  if (m.headers) for (const k of m.headers.keys()) headers[k] = m.headers.values(k);
  return { subject: m.subject, stream: m.info.stream, streamSeq: m.seq, headers, data: m.data };
}

/** Never wait longer than this at start for a dead instance's envelopes (ack wait is the bound). */
const MAX_ORPHAN_WAIT_MS = 60_000;

/**
 * After a crash, the envelopes the dead process had received stay unacked until the ack wait
 * expires, while newer envelopes would be delivered at once: a job's result could then overtake
 * its ack. When nobody else is pulling (no other live instance) and some envelopes are still
 * unacked, wait until the ack wait of the last delivery has passed: JetStream then serves the
 * redeliveries before new messages, and every job's envelopes are applied in stream order.
 * (With other instances alive they take those redeliveries, and the machine copes with the
 * reordering: a result before its ack is applied, the ack after it is ignored.)
 */
async function letOrphansComeFirst(consumer: Consumer, ackWaitMs: number, log: Logger): Promise<void> {
  const info = await consumer.info();
  if (info.num_ack_pending === 0 || info.num_waiting > 0) return;
  // The server sends an RFC 3339 time here, though the client's type says nanoseconds.
  const raw = info.delivered.last_active as unknown;
  const parsed = typeof raw === 'string' ? Date.parse(raw) : NaN;
  const lastActive = Number.isFinite(parsed) ? parsed : Date.now();
  const waitMs = Math.min(lastActive + ackWaitMs + 250 - Date.now(), ackWaitMs + 250, MAX_ORPHAN_WAIT_MS);
  if (waitMs <= 0) return;
  log.info(
    { event: 'orphans_wait', ack_pending: info.num_ack_pending, wait_ms: waitMs },
    'unacked envelopes of a stopped instance: letting them be redelivered first, so each job stays in order',
  );
  await new Promise((r) => setTimeout(r, waitMs));
}

interface Entry {
  msg: JsMsg;
  item: InboxItem;
}

/** Start consuming `core-inbox`. Resolves once the consumer is bound. */
export async function startInbox(opts: InboxOptions): Promise<Inbox> {
  const { logger, metrics } = opts;
  const log = logger.child({ loop: 'inbox' });
  const consumer = await opts.js.consumers.get(RESULTS_STREAM, INBOX_CONSUMER);
  await letOrphansComeFirst(consumer, opts.ackWaitMs, log);
  const lanes: Entry[][] = Array.from({ length: opts.concurrency }, () => []);
  const busy: boolean[] = lanes.map(() => false);
  const idle: Array<Promise<void>> = lanes.map(() => Promise.resolve());
  let queued = 0;
  let stopping = false;
  let bound = false;
  let messages: ConsumerMessages | undefined;
  let wakeReader: (() => void) | undefined;
  // Back-pressure: stop reading from the consumer when this many messages wait in the lanes.
  const maxQueued = opts.batchSize * opts.concurrency * 4;

  const laneOf = (item: InboxItem): number => {
    if (opts.concurrency === 1) return 0;
    const key = item.decoded.ok ? item.decoded.envelope.job_id : (item.decoded.jobId ?? String(item.raw.streamSeq));
    return createHash('sha1').update(key).digest().readUInt32BE(0) % opts.concurrency;
  };

  function report(entry: Entry, out: InboxOutcome): void {
    if (out.kind === 'quarantined') {
      metrics?.envelopes.inc({ outcome: 'quarantined' });
      metrics?.quarantine.inc({ reason: out.reason });
      log.warn(
        { job_id: out.jobId, msg_id: out.msgId, event: 'quarantined', reason: out.reason, stream_seq: entry.msg.seq, details: out.details },
        `envelope quarantined: ${out.reason}`,
      );
      return;
    }
    const o = out.outcome;
    metrics?.envelopes.inc({ outcome: o.decision });
    const line = { job_id: o.jobId, msg_id: out.msgId, event: o.event, from: o.from, to: o.to, decision: o.decision, reason: o.reason };
    switch (o.decision) {
      case 'applied':
        metrics?.transitions.inc({ from: o.from!, event: o.event, to: o.to! });
        log.info(line, `job ${o.from} → ${o.to}`);
        break;
      case 'duplicate':
        log.debug(line, 'duplicate envelope: nothing changes');
        break;
      case 'late':
        log.warn(line, `result for a job already ${o.from}: not applied`);
        break;
      default:
        log.info(line, `envelope not accepted in status ${o.from}: nothing changes`);
    }
  }

  /** Apply one batch; ack after commit, nak on retryable failure, isolate on any other. */
  async function applyBatch(batch: Entry[]): Promise<void> {
    const started = process.hrtime.bigint();
    // Long batches (a slow database) must not outlive the ack wait: tell JetStream we are working.
    const keepAlive = setInterval(() => batch.forEach((e) => e.msg.working()), Math.max(1000, opts.ackWaitMs / 3));
    try {
      await opts.beforeBatch?.(batch.map((e) => e.item));
      const outcomes = await applyInboxBatchTx(opts.db, batch.map((e) => e.item));
      batch.forEach((e, i) => {
        e.msg.ack();
        report(e, outcomes[i]!);
      });
      metrics?.stepDuration.observe({ loop: 'inbox' }, Number(process.hrtime.bigint() - started) / 1e9);
      metrics?.batchSize.observe({ loop: 'inbox' }, batch.length);
    } catch (err) {
      if (isRetryable(err)) {
        for (const e of batch) {
          const delay = nakDelayMs(e.msg.info.deliveryCount);
          e.msg.nak(delay);
          metrics?.envelopes.inc({ outcome: 'retried' });
        }
        log.warn({ err, event: 'batch_retry', size: batch.length }, 'batch failed for a transient cause: nak, will be redelivered');
      } else if (batch.length > 1) {
        log.error({ err, event: 'batch_isolate', size: batch.length }, 'batch failed: applying its messages one by one');
        for (const e of batch) await applyBatch([e]);
      } else {
        await quarantineUnapplicable(batch[0]!, err);
      }
    } finally {
      clearInterval(keepAlive);
    }
  }

  /** A single valid message the database refuses for a non-transient reason: keep it, ack it. */
  async function quarantineUnapplicable(entry: Entry, err: unknown): Promise<void> {
    const message = err instanceof Error ? err.message : String(err);
    const item: InboxItem = {
      raw: entry.item.raw,
      decoded: {
        ok: false,
        reason: QUARANTINE_REASON.SCHEMA_INVALID,
        details: { stage: 'apply', error: message },
        jobId: entry.item.decoded.ok ? entry.item.decoded.envelope.job_id : undefined,
        msgId: entry.item.decoded.ok ? entry.item.decoded.msgId : null,
      },
    };
    try {
      const [out] = await applyInboxBatchTx(opts.db, [item]);
      entry.msg.ack();
      report(entry, out!);
    } catch (err2) {
      entry.msg.nak(nakDelayMs(entry.msg.info.deliveryCount));
      log.error({ err: err2, event: 'quarantine_failed' }, 'could not quarantine an envelope: nak');
    }
  }

  async function runLane(n: number): Promise<void> {
    busy[n] = true;
    try {
      while (lanes[n]!.length > 0) {
        const batch = lanes[n]!.splice(0, opts.batchSize);
        await applyBatch(batch);
        queued -= batch.length;
        wakeReader?.();
      }
    } finally {
      busy[n] = false;
    }
  }

  function dispatch(msg: JsMsg): void {
    const item = decodeItem(rawOf(msg), opts.maxEnvelopeBytes);
    const n = laneOf(item);
    lanes[n]!.push({ msg, item });
    queued++;
    if (!busy[n]) idle[n] = runLane(n);
  }

  async function read(): Promise<void> {
    while (!stopping) {
      try {
        messages = await consumer.consume({ max_messages: Math.min(opts.batchSize * opts.concurrency * 2, 10_000) });
        bound = true;
        // After stop() the iterator still yields what the client had already received, then ends:
        // those messages are ours (delivered, unacked), so they are applied like the rest.
        for await (const msg of messages) {
          dispatch(msg);
          while (queued >= maxQueued && !stopping) {
            await new Promise<void>((resolve) => (wakeReader = resolve));
          }
        }
      } catch (err) {
        log.warn({ err, event: 'consume_error' }, 'consuming core-inbox failed; retrying');
      } finally {
        bound = false;
      }
      if (!stopping) await new Promise((r) => setTimeout(r, 1000));
    }
  }

  const reader = read();
  return {
    async stop() {
      stopping = true;
      wakeReader?.();
      messages?.stop();
      await reader;
      // Apply and ack what was received: it is ours until acked.
      await Promise.all(idle);
      await Promise.all(lanes.map((l, n) => (l.length > 0 ? runLane(n) : Promise.resolve())));
    },
    isBound: () => bound,
    inFlight: () => queued,
  };
}
