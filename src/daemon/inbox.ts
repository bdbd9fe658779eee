/**
 * The inbox loop: envelopes from `core-inbox` (a durable pull consumer shared by every instance),
 * applied in batches, acked only after commit.
 *
 * Per message: decode (size, JSON, schema, msg id) → route to a lane by job id → the lane applies
 * its batch in one transaction → commit → ack. Lanes give bounded concurrency
 * (INBOX_CONCURRENCY) while keeping the messages of one job in stream order: a job always lands in
 * the same lane, and a lane applies one batch at a time. While a lane applies a batch, the
 * reader keeps pulling the next messages (fetching overlaps applying), in bounded pulls that each
 * run to their end, so a graceful stop leaves no delivery behind unacked.
 *
 * The hot path runs on the pg pool when one is given: the step's statements are prepared once per
 * connection, and a batch costs four round trips (BEGIN, lock, write, COMMIT) whatever its size.
 * Acks are sent without waiting, right after the commit, and go out together with the next flush.
 *
 * Failures: a retryable one (database unreachable, deadlock, serialization) naks the whole batch
 * with a delay that grows with the delivery count — JetStream ignores the consumer's backoff for a
 * plain nak — so it is redelivered as often as it takes. Any other failure of a batch falls back to
 * applying its messages one by one, so a single bad message cannot block its neighbours.
 */
import type { Consumer, JetStreamClient, JsMsg } from '@nats-io/jetstream';
import type { Kysely } from 'kysely';
import type { Counter } from 'prom-client';
import { QUARANTINE_REASON } from '../../machines/index.js';
import type { Database } from '../db/schema.js';
import { isRetryable } from '../errors.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../nats/subjects.js';
import { startInboxTrace, type InboxTrace } from '../tracing/jobSpans.js';
import { runTraced, type TraceLogFields } from '../tracing/tracing.js';
import {
  applyInboxBatchTx,
  decodeItem,
  type InboxItem,
  type InboxOutcome,
  type PgPool,
  type RawMessage,
} from './inboxBatch.js';

export interface InboxOptions {
  db: Kysely<Database>;
  /**
   * The pg pool behind `db`. When given, batches run on its clients with prepared (named)
   * statements — the fast path; otherwise through Kysely, unprepared.
   */
  pool?: PgPool | undefined;
  js: JetStreamClient;
  logger: Logger;
  metrics?: Metrics | undefined;
  batchSize: number;
  concurrency: number;
  maxEnvelopeBytes: number;
  ackWaitMs: number;
  /** Test hook: called before each batch transaction. */
  beforeBatch?: (items: readonly InboxItem[]) => Promise<void> | void;
  /** Test and bench hook: called as soon as a batch has committed, before its messages are acked. */
  afterCommit?: (items: readonly InboxItem[], outcomes: readonly InboxOutcome[]) => void;
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

/**
 * Lane of a job id: FNV-1a over its characters. Cheap (no crypto hash per message) and stable, so a
 * job's envelopes always share a lane; uuids spread evenly.
 */
export function laneHash(key: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/**
 * How long one pull waits on the server for envelopes (the client's minimum): bounds how long
 * stop() waits for the pull in progress, and how often an idle inbox asks again.
 */
const FETCH_EXPIRES_MS = 1_000;
/** The smallest pull: below this a pull round trip per message would cost more than applying it. */
const MIN_FETCH = 64;
/** Pulls open at once: one being drained while the next is already waiting on the server. */
const MAX_PULLS = 2;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

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
  let wakeReader: (() => void) | undefined;
  // Envelopes asked for per pull: one batch for every lane (a small floor keeps the per-message
  // mode from paying a pull round trip per handful of messages).
  const fetchSize = Math.max(opts.batchSize * opts.concurrency, MIN_FETCH);
  // Back-pressure: at most this many messages wait in the lanes (received, not yet acked) — the
  // next full pull is requested once half of it is free. Deeper queues are no faster: the
  // messages then live long enough to be promoted to V8's old generation, costing more GC.
  const maxQueued = fetchSize * 2;

  const target = opts.pool ?? opts.db;

  const laneOf = (item: InboxItem): number => {
    if (opts.concurrency === 1) return 0;
    const key = item.decoded.ok
      ? item.decoded.envelope.job_id
      : (item.decoded.jobId ?? String(item.raw.streamSeq));
    return laneHash(key) % opts.concurrency;
  };

  /** Log one line per decision; count per batch (one counter update per distinct label set). */
  function report(entries: readonly Entry[], outs: readonly InboxOutcome[], traced?: InboxTrace): void {
    const counts = new Map<
      string,
      { labels: Record<string, string>; counter: 'envelopes' | 'quarantine' | 'transitions'; n: number }
    >();
    const count = (counter: 'envelopes' | 'quarantine' | 'transitions', labels: Record<string, string>) => {
      const key = `${counter}\u0000${Object.values(labels).join('\u0000')}`;
      const c = counts.get(key);
      if (c) c.n += 1;
      else counts.set(key, { labels, counter, n: 1 });
    };
    entries.forEach((e, i) => reportOne(e, outs[i]!, count, traced?.logFields(i)));
    if (metrics) for (const c of counts.values()) (metrics[c.counter] as Counter<string>).inc(c.labels, c.n);
  }

  function reportOne(
    entry: Entry,
    out: InboxOutcome,
    count: (counter: 'envelopes' | 'quarantine' | 'transitions', labels: Record<string, string>) => void,
    traceFields: TraceLogFields | undefined,
  ): void {
    if (out.kind === 'quarantined') {
      count('envelopes', { outcome: 'quarantined' });
      count('quarantine', { reason: out.reason });
      log.warn(
        {
          job_id: out.jobId,
          msg_id: out.msgId,
          event: 'quarantined',
          reason: out.reason,
          stream_seq: entry.msg.seq,
          details: out.details,
          ...traceFields,
        },
        `envelope quarantined: ${out.reason}`,
      );
      return;
    }
    const o = out.outcome;
    count('envelopes', { outcome: o.decision });
    const line = {
      job_id: o.jobId,
      msg_id: out.msgId,
      stream_seq: entry.msg.seq,
      event: o.event,
      from: o.from,
      to: o.to,
      decision: o.decision,
      reason: o.reason,
      ...traceFields,
    };
    switch (o.decision) {
      case 'applied':
        count('transitions', { from: o.from!, event: o.event, to: o.to! });
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
    const keepAlive = setInterval(
      () => batch.forEach((e) => e.msg.working()),
      Math.max(1000, opts.ackWaitMs / 3),
    );
    try {
      const items = batch.map((e) => e.item);
      await opts.beforeBatch?.(items);
      // One span per envelope, child of the envelope's trace context (none without tracing).
      const traced = startInboxTrace(items);
      const outcomes = await runTraced(traced, () => applyInboxBatchTx(target, items));
      traced?.end(outcomes);
      opts.afterCommit?.(items, outcomes);
      // Acks are fire-and-forget: the client writes them out with the next flush.
      for (const e of batch) e.msg.ack();
      report(batch, outcomes, traced);
      metrics?.stepDuration.observe({ loop: 'inbox' }, Number(process.hrtime.bigint() - started) / 1e9);
      metrics?.batchSize.observe({ loop: 'inbox' }, batch.length);
    } catch (err) {
      if (isRetryable(err)) {
        for (const e of batch) {
          const delay = nakDelayMs(e.msg.info.deliveryCount);
          e.msg.nak(delay);
          metrics?.envelopes.inc({ outcome: 'retried' });
        }
        log.warn(
          { err, event: 'batch_retry', size: batch.length },
          'batch failed for a transient cause: nak, will be redelivered',
        );
      } else if (batch.length > 1) {
        log.error(
          { err, event: 'batch_isolate', size: batch.length },
          'batch failed: applying its messages one by one',
        );
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
      const outcomes = await applyInboxBatchTx(target, [item]);
      entry.msg.ack();
      report([entry], outcomes);
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
    if (!busy[n]) {
      busy[n] = true;
      // Start on the next turn of the event loop, not now: the other messages of the same read
      // from the socket are dispatched first and join the batch (started at once, a lane's first
      // batch would always be a single message).
      idle[n] = new Promise<void>((resolve) => setImmediate(resolve)).then(() => runLane(n));
    }
  }

  /**
   * One bounded pull, run to its end (full, or expired): what it delivers goes to the lanes.
   * Resolves when it ends; a failure is logged and reported as false.
   */
  async function pullOnce(): Promise<boolean> {
    try {
      const pulled = await consumer.fetch({ max_messages: fetchSize, expires: FETCH_EXPIRES_MS });
      bound = true;
      for await (const msg of pulled) dispatch(msg);
      return true;
    } catch (err) {
      // A pull that saw neither its expiry nor a heartbeat in time ends with "heartbeats
      // missed"; the server had already expired it, so nothing is lost: simply pull again.
      if (err instanceof Error && /heartbeats missed/i.test(err.message)) {
        log.debug({ err, event: 'pull_stalled' }, 'a pull ended without its expiry notice; pulling again');
        return true;
      }
      bound = false;
      log.warn({ err, event: 'consume_error' }, 'consuming core-inbox failed; retrying');
      return false;
    }
  }

  /**
   * The reader: bounded pulls, each run to its end, so stop() never leaves a pull open on the
   * server (a pull abandoned mid-way would have its later deliveries go nowhere and sit unacked
   * until the ack wait: the orphans a restart would then have to wait for). Pulls overlap — the
   * next starts when the current one ends or has been open for half its expiry, at most
   * MAX_PULLS at once — so delivery never pauses while a pull winds down.
   */
  async function read(): Promise<void> {
    const open = new Set<Promise<boolean>>();
    while (!stopping) {
      // Back-pressure: ask for a full pull only once the lanes have room for it (many small
      // pulls would cost a round trip each).
      while (queued + fetchSize > maxQueued && !stopping) {
        await new Promise<void>((resolve) => (wakeReader = resolve));
      }
      if (stopping) break;
      const pull = pullOnce();
      open.add(pull);
      void pull.then(() => open.delete(pull));
      const ok = await Promise.race([pull, sleep(FETCH_EXPIRES_MS / 2).then(() => true)]);
      while (open.size >= MAX_PULLS) await Promise.race(open);
      if (!ok && !stopping) await sleep(1000);
    }
    await Promise.all(open);
    bound = false;
  }

  const reader = read();
  return {
    async stop() {
      stopping = true;
      wakeReader?.();
      // The pulls in progress run to their end (about FETCH_EXPIRES_MS): what they deliver is ours.
      await reader;
      // Apply and ack what was received: it is ours until acked.
      await Promise.all(idle);
      await Promise.all(lanes.map((l, n) => (l.length > 0 ? runLane(n) : Promise.resolve())));
    },
    isBound: () => bound,
    inFlight: () => queued,
  };
}
