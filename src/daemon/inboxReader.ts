/**
 * The inbox's reader: one refilling `consume()` on `core-inbox`, its messages handed to the
 * scheduler no faster than batches settle them (back-pressure), and the healing of a consumer
 * that disappears (not bound, looked for again with a growing pause, re-provisioned where the core
 * provisions). Stop drains the subscription. Reasoning: docs/development.md ("The inbox").
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
import type { Logger } from '../logger.js';
import { PROVISION_AGAIN_AFTER_MS } from '../nats/provision.js';
import type { ExchangeNames } from '../nats/subjects.js';

/** Where the reader hands its messages: the inbox's scheduler. */
export interface InboxSink {
  /** Take one message in. */
  admit(msg: JsMsg): void;
  /** True while the reader must take no other message (until {@link InboxReader.wake}). */
  readonly full: boolean;
}

/** What {@link startInboxReader} needs. */
export interface InboxReaderOptions {
  js: JetStreamClient;
  names: ExchangeNames;
  /** The inbox's logger. */
  log: Logger;
  ackWaitMs: number;
  /** Create or update the streams and `core-inbox`, where the core provisions them. */
  provision?: (() => Promise<void>) | undefined;
  sink: InboxSink;
  /** The most messages the sink holds (`max_messages` of the pull subscription). */
  maxMessages: number;
}

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
/** How often the wait for a dead instance's envelopes looks whether they are still unacked. */
const ORPHAN_LOOK_EVERY_MS = 1_000;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * After a crash, the envelopes the dead process had received stay unacked until the ack wait
 * expires, while newer envelopes would be delivered at once: a job's result could then overtake
 * its ack. When nobody else is pulling (no other live instance) and some envelopes are still
 * unacked, wait until the ack wait of the last delivery has passed: JetStream then serves the
 * redeliveries before new messages, and every job's envelopes are applied in stream order.
 * (With other instances alive they take those redeliveries, and the machine copes with the
 * reordering: a result before its ack is applied, the ack after it is ignored.)
 * The wait looks again every second and ends early once nothing is unacked (the acks of an
 * instance that stopped were still on their way) or another instance pulls (it was alive, between
 * two pulls): then no envelope is left to come back first.
 */
async function letOrphansComeFirst(consumer: Consumer, ackWaitMs: number, log: Logger): Promise<void> {
  const gone = (i: { num_ack_pending: number; num_waiting: number }) =>
    i.num_ack_pending === 0 || i.num_waiting > 0;
  const info = await consumer.info();
  if (gone(info)) return;
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
  const started = Date.now();
  for (let left = waitMs; left > 0; left = started + waitMs - Date.now()) {
    await sleep(Math.min(left, ORPHAN_LOOK_EVERY_MS));
    // A look that fails (NATS busy or reconnecting) changes nothing: the wait goes on.
    const now = await consumer.info().catch(() => undefined);
    if (now && gone(now)) {
      log.info(
        { event: 'orphans_gone', ack_pending: now.num_ack_pending, waited_ms: Date.now() - started },
        'no unacked envelope of a stopped instance is left to come first: consuming',
      );
      return;
    }
  }
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

/** The running reader. */
export interface InboxReader {
  /** True while the consumer is bound and pulling. */
  isBound(): boolean;
  /** The sink may have room again: a reader waiting for room looks again. */
  wake(): void;
  /** Drain the subscription, hand what it still delivers to the sink, and resolve once ended. */
  stop(): Promise<void>;
}

/**
 * Start reading `core-inbox` into `opts.sink`. Resolves once the consumer is found (it rejects
 * when it is missing at start) and a stopped instance's unacked envelopes have had their turn.
 */
export async function startInboxReader(opts: InboxReaderOptions): Promise<InboxReader> {
  const { js, names, log, sink } = opts;
  let consumer: Consumer | undefined = await js.consumers.get(names.resultsStream, names.inboxConsumer);
  await letOrphansComeFirst(consumer, opts.ackWaitMs, log);
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
      err,
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
   * One consume() on the consumer, its messages admitted as they come; taken no faster than the
   * batches settle them (back-pressure). A failed subscription is consumed again after a pause; a
   * missing consumer is looked up again (and provisioned where the core does) until it is there;
   * a stop drains the subscription and takes what is left.
   */
  async function read(): Promise<void> {
    while (!stopping) {
      try {
        consumer ??= await js.consumers.get(names.resultsStream, names.inboxConsumer);
        messages = await consumer.consume({
          max_messages: opts.maxMessages,
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
          sink.admit(msg);
          while (sink.full) await new Promise<void>((resolve) => (wakeReader = resolve));
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
    isBound: () => bound,
    wake: () => wakeReader?.(),
    async stop() {
      stopping = true;
      endPause?.();
      if (messages) await drainPulls(messages);
      wakeReader?.();
      await reader;
    },
  };
}
