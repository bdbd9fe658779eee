/**
 * The inbox loop: envelopes from `core-inbox` (a durable pull consumer shared by every instance),
 * applied in batches, acked only after commit.
 *
 * One `consume()` on the consumer feeds the inbox (several concurrent pulls on one consumer slow
 * nats-server down; one refilling pull subscription does not). Per message: decode (size, JSON,
 * schema, msg id) → wait with the others received → a batch of at most INBOX_BATCH_SIZE leaves
 * when full, or INBOX_LINGER_MS after its first envelope → one transaction → commit → ack. Up to
 * INBOX_CONCURRENCY batch transactions run at once, each on its own pooled connection.
 *
 * Per-job order: a job's envelopes are applied in stream order, never two at once. A batch takes
 * the waiting envelopes in arrival order, but not those of a job that a running batch holds,
 * nor any envelope after one it left behind for that reason: a job in flight holds its later
 * envelopes back until its batch has committed (or failed), and they then leave first.
 *
 * Back-pressure: at most `2 × INBOX_BATCH_SIZE × INBOX_CONCURRENCY` envelopes are received and not
 * yet acked; the reader stops taking messages from the subscription then, and the client sends no
 * further pull until it takes them again.
 *
 * The hot path runs on the pg pool when one is given: the step's statements are prepared once per
 * connection, and a batch costs four round trips (BEGIN, lock, write, COMMIT) whatever its size.
 * Acks are sent without waiting, right after the commit, and go out together with the next flush.
 *
 * Failures: a retryable one (database unreachable, deadlock, serialization) naks the whole batch
 * with a delay that grows with the delivery count — JetStream ignores the consumer's backoff for a
 * plain nak — so it is redelivered as often as it takes. Any other failure of a batch falls back to
 * applying its messages one by one, so a single bad message cannot block its neighbours.
 *
 * A consumer that disappears (deleted, its stream deleted or re-created, a cluster that lost it):
 * the pull subscription runs with `abort_on_missing_resource`, so the client ends it as soon as
 * JetStream says the consumer was deleted or, after missed heartbeats, that the consumer or the
 * stream is not found. The inbox is then not bound (/readyz `consumer: false`) and says which is
 * missing; it looks again with a growing pause until the consumer is there and consumes again.
 * Where the core provisions the streams, it creates them again if they are still missing after
 * the first pause; otherwise it waits for an operator to.
 * A re-created `core-inbox` delivers the stream from its start: what was applied before is a
 * duplicate that changes nothing.
 *
 * Stop: the pull subscription is drained — the server stops delivering to it once it has the
 * unsubscription, and whatever it sent before arrives still — so no pull is left open with
 * deliveries going nowhere; then everything received is applied and acked.
 */
import {
  JetStreamApiCodes,
  JetStreamApiError,
  JetStreamError,
  type Consumer,
  type ConsumerMessages,
  type JetStreamClient,
  type JsMsg,
} from '@nats-io/jetstream';
import type { Subscription } from '@nats-io/nats-core';
import type { Kysely } from 'kysely';
import type { Counter } from 'prom-client';
import { QUARANTINE_REASON } from '../../machines/index.js';
import type { Database } from '../db/schema.js';
import { isRetryable } from '../errors.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import { decodeEnvelope } from '../messages/decodeEnvelope.js';
import { PROVISION_AGAIN_AFTER_MS } from '../nats/provision.js';
import { CONTRACT_NAMES, type ExchangeNames } from '../nats/subjects.js';
import { startInboxTrace, type InboxTrace } from '../tracing/jobSpans.js';
import { runTraced } from '../tracing/tracing.js';
import {
  applyInboxBatchTx,
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
  /** Envelopes per batch transaction, at most. */
  batchSize: number;
  /** Batch transactions at once, at most. */
  concurrency: number;
  /** How long a batch that is not full waits for more envelopes, from its first one (ms). */
  lingerMs?: number | undefined;
  maxEnvelopeBytes: number;
  ackWaitMs: number;
  /** The results stream and inbox consumer to read (the contract's by default). */
  names?: ExchangeNames | undefined;
  /**
   * Create or update the streams and `core-inbox` (`provisionStreams`), where the core provisions
   * them (`NATS_PROVISION=true`): called when the consumer or its stream is missing. Without it
   * the inbox waits for them to be created.
   */
  provision?: (() => Promise<void>) | undefined;
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

/**
 * A JetStream message as {@link RawMessage}: read from the message when asked (only quarantine
 * and log lines ask), so the usual envelope costs no header copy and no parse of its reply subject.
 */
class ReceivedMessage implements RawMessage {
  readonly data: Uint8Array;
  #headers: Record<string, string[]> | undefined;
  constructor(private readonly msg: JsMsg) {
    this.data = msg.data;
  }
  get subject(): string {
    return this.msg.subject;
  }
  get stream(): string {
    return this.msg.info.stream;
  }
  get streamSeq(): number {
    return this.msg.seq;
  }
  get headers(): Record<string, string[]> {
    if (this.#headers === undefined) {
      const headers: Record<string, string[]> = {};
      const h = this.msg.headers;
      if (h) for (const k of h.keys()) headers[k] = h.values(k);
      this.#headers = headers;
    }
    return this.#headers;
  }
}

const ENTRY = Symbol('entry');

/** A received message: decoded, with the key its job is ordered by. */
interface Entry extends InboxItem {
  msg: JsMsg;
  /** The job id; for a message naming none, a key of its own. */
  key: string;
  [ENTRY]: true;
}

const isEntry = (w: JsMsg | Entry): w is Entry => ENTRY in w;

/**
 * How long one pull waits on the server (the client's minimum): an idle inbox asks again this
 * often, and a stop waits at most about this long for the server to end the pulls in progress.
 */
const PULL_EXPIRES_MS = 1_000;

/**
 * Pauses before looking again for a missing consumer, doubling from the first to the last: a
 * consumer re-created by an operator or other code is found within seconds, and a long absence
 * costs one JetStream request every few seconds. The first is the time other code gets to
 * re-create what it deleted before the core provisions it.
 */
const MISSING_PAUSE_FIRST_MS = PROVISION_AGAIN_AFTER_MS;
const MISSING_PAUSE_MAX_MS = 4_000;
/** A consumer still missing is logged again at warn this often (each look in between at debug). */
const MISSING_LOG_EVERY_MS = 30_000;

/** What an error of the consumer says is missing: the stream, the consumer, or neither. */
export function missingResource(err: unknown): 'stream' | 'consumer' | undefined {
  if (err instanceof JetStreamApiError) {
    if (err.code === JetStreamApiCodes.StreamNotFound) return 'stream';
    if (err.code === JetStreamApiCodes.ConsumerNotFound) return 'consumer';
    return undefined;
  }
  // A pull open when the consumer is deleted ends with the status 409 "consumer deleted".
  if (err instanceof JetStreamError && /consumer deleted/i.test(err.message)) return 'consumer';
  if (err instanceof JetStreamError && /stream deleted/i.test(err.message)) return 'stream';
  return undefined;
}

/** Never wait longer than this at start for a dead instance's envelopes (ack wait is the bound). */
const MAX_ORPHAN_WAIT_MS = 60_000;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

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
  await sleep(waitMs);
}

/**
 * Drain the pull subscription behind `messages`: the client unsubscribes and flushes, the server
 * delivers nothing to it after the unsubscription (a pull's deliveries go only to a reply subject
 * with interest) and everything it sent before arrives before the flush returns; the iterator
 * then yields what is left and ends. `close()` alone would unsubscribe at once and drop the
 * deliveries already on their way, which would then wait unacked for the ack wait.
 */
async function drainPulls(messages: ConsumerMessages): Promise<void> {
  // The client keeps the subscription of a consume() on `sub` and ends the iterator once it is
  // drained, but offers no call for it.
  const sub = (messages as Partial<{ sub: Subscription }>).sub;
  try {
    if (sub && !sub.isClosed()) {
      await sub.drain();
      return;
    }
  } catch {
    // The connection is closing: nothing more can arrive anyway.
  }
  await messages.close();
}

type CounterName = 'envelopes' | 'quarantine' | 'transitions';

/** Start consuming `core-inbox`. Resolves once the consumer is bound. */
export async function startInbox(opts: InboxOptions): Promise<Inbox> {
  const { logger, metrics, batchSize, concurrency } = opts;
  const lingerMs = opts.lingerMs ?? 2;
  const log = logger.child({ loop: 'inbox' });
  const names = opts.names ?? CONTRACT_NAMES;
  let consumer: Consumer | undefined = await opts.js.consumers.get(names.resultsStream, names.inboxConsumer);
  await letOrphansComeFirst(consumer, opts.ackWaitMs, log);
  const target = opts.pool ?? opts.db;
  // Enough for every batch in flight and as many more gathering; more would only make the
  // messages live long enough to reach V8's old generation, which costs more to collect.
  const maxHeld = Math.max(batchSize * concurrency * 2, 64);

  /**
   * Received and not yet taken by a batch, in arrival order. A message is decoded when a batch
   * first looks at it: until then it is only the client's message, so the envelopes that wait
   * keep few objects alive through the young generation's collections.
   */
  let waiting: Array<JsMsg | Entry> = [];
  /** Jobs (keys) a running batch holds. */
  const running = new Set<string>();
  /** The running batches. */
  const active = new Set<Promise<void>>();
  /** Received and not yet acked or nak'd. */
  let held = 0;
  let lingerTimer: NodeJS.Timeout | undefined;
  /** The oldest waiting envelope has waited for its linger: a batch may leave not full. */
  let lingered = false;
  let stopping = false;
  let bound = false;
  let messages: ConsumerMessages | undefined;
  let wakeReader: (() => void) | undefined;
  /** Ends the reader's pause early (on stop). */
  let endPause: (() => void) | undefined;
  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const t = setTimeout(resolve, ms);
      endPause = () => {
        clearTimeout(t);
        resolve();
      };
    });

  const onLinger = () => {
    lingerTimer = undefined;
    lingered = true;
    schedule();
  };

  /**
   * The next batch: waiting envelopes in arrival order, up to `batchSize`, leaving behind every
   * envelope of a job a running batch holds and every later envelope of a job left behind.
   */
  function take(): Entry[] {
    const batch: Entry[] = [];
    let left: Entry[] | undefined;
    let leftJobs: Set<string> | undefined;
    let i = 0;
    for (; i < waiting.length && batch.length < batchSize; i++) {
      const w = waiting[i]!;
      const e = isEntry(w) ? w : entryOf(w);
      if (running.has(e.key) || leftJobs?.has(e.key) === true) {
        (leftJobs ??= new Set()).add(e.key);
        (left ??= []).push(e);
      } else batch.push(e);
    }
    waiting = left ? [...left, ...waiting.slice(i)] : waiting.slice(i);
    for (const e of batch) running.add(e.key);
    return batch;
  }

  /**
   * Start batches while fewer than `concurrency` run and one may leave: a full one, or any once
   * the oldest envelope has lingered (or the inbox stops). Envelopes that only wait for their
   * job's batch to settle do not linger: that batch's end schedules them again.
   */
  function schedule(): void {
    let blocked = false;
    while (
      active.size < concurrency &&
      waiting.length > 0 &&
      (waiting.length >= batchSize || lingered || stopping)
    ) {
      const batch = take();
      if (batch.length === 0) {
        blocked = true; // every waiting envelope's job is in flight
        break;
      }
      start(batch);
    }
    if (waiting.length === 0 || blocked) {
      lingered = false;
      if (lingerTimer) clearTimeout(lingerTimer);
      lingerTimer = undefined;
    } else if (!lingered && lingerTimer === undefined) {
      lingerTimer = setTimeout(onLinger, lingerMs);
    }
  }

  function start(batch: Entry[]): void {
    const p = applyBatch(batch)
      .catch((err: unknown) => log.error({ err, event: 'batch_failed' }, 'a batch failed unexpectedly'))
      .finally(() => {
        for (const e of batch) running.delete(e.key);
        held -= batch.length;
        active.delete(p);
        schedule();
        wakeReader?.();
      });
    active.add(p);
  }

  function entryOf(msg: JsMsg): Entry {
    const msgId = msg.headers?.get('Nats-Msg-Id');
    const decoded = decodeEnvelope({ data: msg.data, msgId, maxBytes: opts.maxEnvelopeBytes });
    const key = decoded.ok ? decoded.envelope.job_id : (decoded.jobId ?? `seq:${msg.seq}`);
    return { raw: new ReceivedMessage(msg), decoded, msg, key, [ENTRY]: true };
  }

  function admit(msg: JsMsg): void {
    waiting.push(msg);
    held++;
    if (waiting.length >= batchSize) schedule();
    else if (!lingered && lingerTimer === undefined) lingerTimer = setTimeout(onLinger, lingerMs);
  }

  /** Log one line per decision (only at the levels enabled); count per batch. */
  function report(entries: readonly Entry[], outs: readonly InboxOutcome[], traced?: InboxTrace): void {
    const counts = new Map<string, { counter: CounterName; labels: Record<string, string>; n: number }>();
    const count = (counter: CounterName, key: string, labels: () => Record<string, string>) => {
      const c = counts.get(key);
      if (c) c.n += 1;
      else counts.set(key, { counter, labels: labels(), n: 1 });
    };
    const info = log.isLevelEnabled('info');
    const warn = info || log.isLevelEnabled('warn');
    const debug = log.isLevelEnabled('debug');
    for (let i = 0; i < entries.length; i++) {
      const out = outs[i]!;
      if (out.kind === 'quarantined') {
        count('envelopes', 'e:quarantined', () => ({ outcome: 'quarantined' }));
        count('quarantine', `q:${out.reason}`, () => ({ reason: out.reason }));
        if (warn)
          log.warn(
            {
              job_id: out.jobId,
              msg_id: out.msgId,
              event: 'quarantined',
              reason: out.reason,
              stream_seq: entries[i]!.msg.seq,
              details: out.details,
              ...traced?.logFields(i),
            },
            `envelope quarantined: ${out.reason}`,
          );
        continue;
      }
      const o = out.outcome;
      count('envelopes', `e:${o.decision}`, () => ({ outcome: o.decision }));
      if (o.decision === 'applied') {
        count('transitions', `t:${o.from}:${o.event}:${o.to}`, () => ({
          from: o.from!,
          event: o.event,
          to: o.to!,
        }));
      }
      const enabled = o.decision === 'duplicate' ? debug : o.decision === 'late' ? warn : info;
      if (!enabled) continue;
      const line = {
        job_id: o.jobId,
        msg_id: out.msgId,
        stream_seq: entries[i]!.msg.seq,
        event: o.event,
        from: o.from,
        to: o.to,
        decision: o.decision,
        reason: o.reason,
        ...traced?.logFields(i),
      };
      switch (o.decision) {
        case 'applied':
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
    if (metrics) for (const c of counts.values()) (metrics[c.counter] as Counter<string>).inc(c.labels, c.n);
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
      await opts.beforeBatch?.(batch);
      // One span per envelope, child of the envelope's trace context (none without tracing).
      const traced = startInboxTrace(batch);
      const outcomes = await runTraced(traced, () => applyInboxBatchTx(target, batch));
      traced?.end(outcomes);
      opts.afterCommit?.(batch, outcomes);
      // Acks are fire-and-forget: the client writes them out with the next flush.
      for (const e of batch) e.msg.ack();
      report(batch, outcomes, traced);
      metrics?.stepDuration.observe({ loop: 'inbox' }, Number(process.hrtime.bigint() - started) / 1e9);
      metrics?.batchSize.observe({ loop: 'inbox' }, batch.length);
    } catch (err) {
      if (isRetryable(err)) {
        for (const e of batch) e.msg.nak(nakDelayMs(e.msg.info.deliveryCount));
        metrics?.envelopes.inc({ outcome: 'retried' }, batch.length);
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
      raw: entry.raw,
      decoded: {
        ok: false,
        reason: QUARANTINE_REASON.SCHEMA_INVALID,
        details: { stage: 'apply', error: message },
        jobId: entry.decoded.ok ? entry.decoded.envelope.job_id : undefined,
        msgId: entry.decoded.ok ? entry.decoded.msgId : null,
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

  /** What is missing, since when, when it was last logged at warn, and how often it was looked for. */
  let missing: { what: 'stream' | 'consumer'; since: number; loggedAt: number; looks: number } | undefined;

  /**
   * The consumer (or its stream) is missing: say so; where the core provisions, and it is still
   * missing after a first pause, provision it again. Resolves true once it provisioned.
   */
  async function onMissing(what: 'stream' | 'consumer', err: unknown): Promise<boolean> {
    const now = Date.now();
    const changed = missing?.what !== what;
    missing = {
      what,
      since: missing?.since ?? now,
      loggedAt: changed ? now : missing!.loggedAt,
      looks: (missing?.looks ?? 0) + 1,
    };
    const loud = changed || now - missing.loggedAt >= MISSING_LOG_EVERY_MS;
    if (loud) missing.loggedAt = now;
    const fields = {
      event: 'inbox_consumer_missing',
      missing: what,
      stream: names.resultsStream,
      consumer: names.inboxConsumer,
      provision: opts.provision !== undefined,
      missing_ms: now - missing.since,
      error: err instanceof Error ? err.message : String(err),
    };
    const name =
      what === 'stream'
        ? `stream ${names.resultsStream}`
        : `consumer ${names.inboxConsumer} of ${names.resultsStream}`;
    if (!opts.provision) {
      log[loud ? 'warn' : 'debug'](
        fields,
        `the ${name} is missing and NATS_PROVISION=false: waiting for it to be created`,
      );
      return false;
    }
    if (missing.looks === 1) {
      log.warn(fields, `the ${name} is missing: provisioning it again unless it is back shortly`);
      return false;
    }
    log[loud ? 'warn' : 'debug'](fields, `the ${name} is still missing: provisioning it again`);
    try {
      await opts.provision();
      log.info(
        { event: 'inbox_provisioned', missing: what },
        `provisioned the streams and ${names.inboxConsumer} again`,
      );
      return true;
    } catch (perr) {
      log.warn(
        { err: perr, event: 'inbox_provision_failed' },
        'provisioning core-inbox again failed; retrying',
      );
      return false;
    }
  }

  /**
   * The reader: one consume() on the consumer, its messages admitted as they come; taken no
   * faster than the batches settle them (back-pressure). A failed subscription is consumed again
   * after a pause; a missing consumer is looked up again (and provisioned where the core does)
   * until it is there; a stop drains the subscription and takes what is left.
   */
  async function read(): Promise<void> {
    while (!stopping) {
      try {
        consumer ??= await opts.js.consumers.get(names.resultsStream, names.inboxConsumer);
        messages = await consumer.consume({
          max_messages: maxHeld,
          expires: PULL_EXPIRES_MS,
          // End the iterator with an error when the consumer or its stream is gone, instead of
          // looking for it forever behind a subscription that stays open.
          abort_on_missing_resource: true,
        });
        bound = true;
        if (missing) {
          log.info(
            { event: 'inbox_consumer_back', missing: missing.what, missing_ms: Date.now() - missing.since },
            `${names.inboxConsumer} is back: consuming again`,
          );
          missing = undefined;
        }
        if (stopping) await drainPulls(messages);
        for await (const msg of messages) {
          admit(msg);
          while (held >= maxHeld) await new Promise<void>((resolve) => (wakeReader = resolve));
        }
        bound = false;
        // The client ended the subscription without an error (its connection closed): again.
        if (!stopping) await pause(1000);
      } catch (err) {
        bound = false;
        const what = missingResource(err);
        if (what) {
          consumer = undefined;
          const provisioned = await onMissing(what, err);
          const looks = missing?.looks ?? 1;
          if (!stopping && !provisioned)
            await pause(Math.min(MISSING_PAUSE_FIRST_MS * 2 ** (looks - 1), MISSING_PAUSE_MAX_MS));
        } else {
          log.warn({ err, event: 'consume_error' }, 'consuming core-inbox failed; retrying');
          if (!stopping) await pause(1000);
        }
      }
    }
    bound = false;
  }

  const reader = read();
  return {
    async stop() {
      stopping = true;
      endPause?.();
      if (messages) await drainPulls(messages);
      wakeReader?.();
      await reader;
      // Apply and ack what was received: it is ours until acked.
      schedule();
      while (active.size > 0) {
        await Promise.all(active);
        schedule();
      }
    },
    isBound: () => bound,
    inFlight: () => held,
  };
}
