/**
 * The inbox loop: envelopes from `core-inbox` (a durable pull consumer shared by every instance),
 * read by `inboxReader.ts`, batched by `inboxScheduler.ts`, applied by `inboxBatch.ts` and settled
 * on the live road of `inboxSettle.ts`: ack after commit, nak on a fault that is not the
 * messages', isolate and quarantine what the database refuses, terminate what not even quarantine
 * can store. One log line per decision, counters per batch. Stop: the reader drains, then
 * everything received is applied and acked. The reasoning is in docs/development.md ("The inbox").
 */
import type { JetStreamClient, JsMsg } from '@nats-io/jetstream';
import type { Kysely } from 'kysely';
import type { Database } from '../db/schema.js';
import type { DatabaseFailure } from '../errors.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import { decodeEnvelope } from '../messages/decodeEnvelope.js';
import { CONTRACT_NAMES, type ExchangeNames } from '../nats/subjects.js';
import { startInboxTrace, type InboxTrace } from '../tracing/jobSpans.js';
import { runTraced } from '../tracing/tracing.js';
import { QUARANTINE_PAYLOAD_MAX_BYTES_DEFAULT } from '../messages/quarantineRecord.js';
import {
  applyInboxBatchTx,
  type InboxBatchHooks,
  type InboxItem,
  type InboxOutcome,
  type PgPool,
  type QuarantineLimits,
} from './inboxBatch.js';
import { ReceivedMessage } from './inboxMessage.js';
import { startInboxReader } from './inboxReader.js';
import { settleBatch, type SettleRoad } from './inboxSettle.js';
import { InboxScheduler } from './inboxScheduler.js';
import { ServiceLabels } from './serviceLabels.js';

/** What {@link startInbox} needs: where to read, where to write, and how to batch. */
export interface InboxOptions {
  db: Kysely<Database>;
  /**
   * The pg pool behind `db`. When given, batches run on its clients with prepared (named)
   * statements — the fast path; otherwise through Kysely, unprepared.
   */
  pool?: PgPool;
  js: JetStreamClient;
  logger: Logger;
  metrics?: Metrics;
  /** Envelopes per batch transaction, at most. */
  batchSize: number;
  /** Batch transactions at once, at most. */
  concurrency: number;
  /** How long a batch that is not full waits for more envelopes, from its first one (ms). */
  lingerMs?: number;
  maxEnvelopeBytes: number;
  /** The longest payload prefix a quarantine row keeps (`QUARANTINE_PAYLOAD_MAX_BYTES`). */
  quarantinePayloadMaxBytes?: number;
  /** The bucket every result's object must be in (`RESULTS_BUCKET`). */
  resultsBucket: string;
  ackWaitMs: number;
  /** The results stream and inbox consumer to read (the contract's by default). */
  names?: ExchangeNames;
  /**
   * Create or update the streams and `core-inbox` (`provisionStreams`), where the core provisions
   * them (`NATS_PROVISION=true`): called when the consumer or its stream is missing. Without it
   * the inbox waits for them to be created.
   */
  provision?: (() => Promise<void>) | undefined;
  /** Test hook: called before each batch transaction. */
  beforeBatch?: ((items: readonly InboxItem[]) => Promise<void> | void) | undefined;
  /** Test and bench hook: called as soon as a batch has committed, before its messages are acked. */
  afterCommit?: ((items: readonly InboxItem[], outcomes: readonly InboxOutcome[]) => void) | undefined;
}

/** A running inbox. */
export interface Inbox {
  /** Stop pulling, apply and ack what was already received, then resolve. */
  stop(): Promise<void>;
  /** True while the consumer is bound and pulling. */
  isBound(): boolean;
  /** Messages received and not yet acked or nak'd. */
  inFlight(): number;
  /**
   * Why batches fail, while they fail for a fault that is not the messages' (the database refuses
   * the connection, a grant, a prepared statement; an unknown error): from the first such failure
   * until a batch commits again; undefined otherwise. For /readyz.
   */
  applyFailure(): string | undefined;
}

/** Delay before a nak'd envelope comes back: grows with its delivery count, capped. */
export function nakDelayMs(deliveryCount: number): number {
  // 250 ms, 500 ms, 1 s … capped at 30 s: fast recovery from a blip, no hammering during an outage.
  return Math.min(250 * 2 ** Math.max(0, deliveryCount - 1), 30_000);
}

/** A received message: decoded, with the key its job is ordered by. */
interface Entry extends InboxItem {
  msg: JsMsg;
  /** The job id; for a message naming none, a key of its own. */
  key: string;
}

/** Decode a message (once, when the scheduler first looks at it) and key it by its job. */
function entryOf(msg: JsMsg, maxBytes: number): Entry {
  const msgId = msg.headers?.get('Nats-Msg-Id');
  const decoded = decodeEnvelope({ data: msg.data, msgId, maxBytes });
  const key = decoded.ok ? decoded.envelope.job_id : (decoded.jobId ?? `seq:${msg.seq}`);
  return { raw: new ReceivedMessage(msg), decoded, msg, key };
}

/** Count one more of `key`. */
function tally(counts: Map<string, number>, key: string): void {
  counts.set(key, (counts.get(key) ?? 0) + 1);
}

/** The map under `key` in `tree`, made when missing. */
function branch<V>(tree: Map<string, Map<string, V>>, key: string): Map<string, V> {
  let child = tree.get(key);
  if (child === undefined) tree.set(key, (child = new Map()));
  return child;
}

/**
 * What becomes of a batch, as a function that settles one (see the module's header). Resolves
 * when every message of the batch is acked, nak'd or terminated; never rejects but for a bug.
 */
function batchApplier(
  opts: InboxOptions,
  log: Logger,
): { applyBatch: (batch: Entry[]) => Promise<void>; failing: () => Failing | undefined } {
  const { metrics } = opts;
  const target = opts.pool ?? opts.db;
  /** Since when batches fail for a fault that is not the messages'; unset once one commits. */
  let failing: Failing | undefined;
  const hooks: InboxBatchHooks = {
    unlockedInconsistent(err) {
      metrics?.inboxUnlockedFallbacks.inc();
      log.warn(
        { err, event: 'unlocked_inconsistent' },
        'the unlocked path found its write inconsistent: the batch takes the locked path',
      );
    },
  };
  const limits: QuarantineLimits = {
    payloadMaxBytes: opts.quarantinePayloadMaxBytes ?? QUARANTINE_PAYLOAD_MAX_BYTES_DEFAULT,
  };
  const services = new ServiceLabels();
  const rule = { resultsBucket: opts.resultsBucket };
  /** Log one line per decision (only at the levels enabled); count per batch. */
  function report(entries: readonly Entry[], outs: readonly InboxOutcome[], traced?: InboxTrace): void {
    // Counted per batch by label values, which are the machine's names: no key is built per envelope.
    const envelopes = new Map<string, number>();
    const reasons = new Map<string, number>();
    /** Quarantined per service label, then reason. */
    const byService = new Map<string, Map<string, number>>();
    const transitions = new Map<string, Map<string, Map<string, number>>>();
    const info = log.isLevelEnabled('info');
    const warn = info || log.isLevelEnabled('warn');
    const debug = log.isLevelEnabled('debug');
    for (let i = 0; i < entries.length; i++) {
      const out = outs[i]!;
      if (out.kind === 'quarantined') {
        tally(envelopes, 'quarantined');
        tally(reasons, out.reason);
        tally(branch(byService, services.labelOf(out.serviceName)), out.reason);
        // Every field is bounded (quarantineRecord): the line costs a few KiB whatever the message.
        if (warn)
          log.warn(
            {
              job_id: out.jobId,
              msg_id: out.msgId,
              event: 'quarantined',
              reason: out.reason,
              service: out.serviceName,
              stream_seq: entries[i]!.msg.seq,
              details: out.details,
              ...traced?.logFields(i),
            },
            `envelope quarantined: ${out.reason}`,
          );
        continue;
      }
      const o = out.outcome;
      // The machine accepts an envelope only from its job's target_service: a known service.
      const entry = entries[i]!;
      if (entry.decoded.ok) services.learn(entry.decoded.envelope.service.name);
      tally(envelopes, o.decision);
      if (o.decision === 'applied') tally(branch(branch(transitions, o.from), o.event), o.to);
      const enabled = o.decision === 'duplicate' ? debug : o.decision === 'late' ? warn : info;
      if (!enabled) continue;
      // `reason` only where the machine gave one (nothing changed): a null field still costs
      // the logger a serialisation on the line of every applied envelope.
      const line = {
        job_id: o.jobId,
        msg_id: out.msgId,
        stream_seq: entries[i]!.msg.seq,
        event: o.event,
        from: o.from,
        to: o.to,
        decision: o.decision,
        ...(o.reason === null ? undefined : { reason: o.reason }),
        ...traced?.logFields(i),
      };
      switch (o.decision) {
        case 'applied':
          // ASCII on purpose: one character beyond Latin-1 makes the whole line a two-byte
          // string, which the logger's stream then concatenates and encodes at several times
          // the cost, on the line logged for every applied envelope.
          log.info(line, `job ${o.from} -> ${o.to}`);
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
    if (!metrics) return;
    for (const [outcome, n] of envelopes) metrics.envelopes.inc({ outcome }, n);
    for (const [reason, n] of reasons) metrics.quarantine.inc({ reason }, n);
    for (const [service, byReason] of byService)
      for (const [reason, n] of byReason) metrics.inboxFlood.quarantinedByService.inc({ service, reason }, n);
    for (const [from, byEvent] of transitions)
      for (const [event, byTo] of byEvent)
        for (const [to, n] of byTo) metrics.transitions.inc({ from, event, to }, n);
  }

  /**
   * The live road of the settle policy for one batch: ack after commit; nak on a fault that is not
   * the messages' (redelivered as often as it takes); terminate a message whose refusal cannot be
   * stored, since `core-inbox` has no delivery limit and a nak would bring it back without end.
   */
  function liveRoad(): SettleRoad<Entry> {
    let started = 0n;
    let traced: InboxTrace | undefined;
    return {
      async apply(items, refusal) {
        if (refusal) {
          traced = undefined;
          return applyInboxBatchTx(target, items, rule, { hooks, limits });
        }
        started = process.hrtime.bigint();
        await opts.beforeBatch?.(items);
        // One span per envelope, child of the envelope's trace context (none without tracing).
        traced = startInboxTrace(items);
        return runTraced(traced, () => applyInboxBatchTx(target, items, rule, { hooks, limits }));
      },
      committed(batch, outcomes, refusal) {
        if (refusal) {
          batch[0]!.msg.ack();
          report(batch, outcomes);
          return;
        }
        failing = undefined;
        traced?.end(outcomes);
        opts.afterCommit?.(batch, outcomes);
        // Acks are fire-and-forget: the client writes them out with the next flush.
        for (const e of batch) e.msg.ack();
        report(batch, outcomes, traced);
        metrics?.stepDuration.observe({ loop: 'inbox' }, Number(process.hrtime.bigint() - started) / 1e9);
        metrics?.batchSize.observe({ loop: 'inbox' }, batch.length);
      },
      faulted({ items, err, failure, refusal }) {
        for (const e of items) e.msg.nak(nakDelayMs(e.msg.info.deliveryCount));
        metrics?.envelopes.inc({ outcome: 'retried' }, items.length);
        if (refusal) {
          log.error({ err, event: 'quarantine_failed' }, 'could not quarantine an envelope: nak');
          return 'settled';
        }
        // Every message is valid and is applied once the fault is gone, so none is quarantined;
        // /readyz is red until a batch commits again.
        failing ??= { since: Date.now(), failure };
        metrics?.inboxBatchFailures.inc({ fault: failure.transient ? 'transient' : 'infrastructure' });
        const line = {
          err,
          event: 'batch_retry',
          size: items.length,
          sqlstate: failure.code,
          cause: failure.meaning,
          transient: failure.transient,
        };
        if (failure.transient) log.warn(line, 'batch failed for a transient cause: nak, will be redelivered');
        else
          log.error(
            line,
            `batch failed for a database fault that is not the messages' (${failure.meaning}): nak, retried until it is gone`,
          );
        return 'settled';
      },
      isolating({ items, err, failure }) {
        metrics?.inboxBatchFailures.inc({ fault: 'message' });
        log.warn(
          { err, event: 'batch_isolate', size: items.length, sqlstate: failure.code },
          'the database refused a value of the batch: applying its messages one by one',
        );
      },
      unstorable({ items, err }) {
        const entry = items[0]!;
        entry.msg.term();
        metrics?.inboxFlood.terminated.inc();
        log.error(
          {
            err,
            event: 'envelope_terminated',
            stream_seq: entry.msg.seq,
            reason: entry.decoded.ok ? null : entry.decoded.reason,
            delivery_count: entry.msg.info.deliveryCount,
          },
          'could not store even the quarantine record of an envelope: terminated, it is not delivered again',
        );
      },
    };
  }

  /** Settle one batch on the live road, telling JetStream meanwhile that it is being worked on. */
  async function applyBatch(batch: Entry[]): Promise<void> {
    // Long batches (a slow database) must not outlive the ack wait.
    const keepAlive = setInterval(
      () => batch.forEach((e) => e.msg.working()),
      Math.max(1000, opts.ackWaitMs / 3),
    );
    try {
      await settleBatch(batch, liveRoad());
    } finally {
      clearInterval(keepAlive);
    }
  }

  return { applyBatch, failing: () => failing };
}

/** A fault the inbox is retrying: since when, and the first failure's classification. */
interface Failing {
  since: number;
  failure: DatabaseFailure;
}

/** Start consuming `core-inbox`. Resolves once the consumer is bound. */
export async function startInbox(opts: InboxOptions): Promise<Inbox> {
  const log = opts.logger.child({ loop: 'inbox' });
  const { applyBatch, failing } = batchApplier(opts, log);
  /** The batches in flight, settled when their promise ends. */
  const active = new Set<Promise<void>>();
  /** Wakes the reader waiting for room; set once the reader runs. */
  let wakeReader = (): void => {};
  let lingerTimer: NodeJS.Timeout | undefined;
  const onLinger = () => {
    lingerTimer = undefined;
    scheduler.lingerPassed();
  };
  const maxBytes = opts.maxEnvelopeBytes;
  const scheduler: InboxScheduler<JsMsg, Entry> = new InboxScheduler(
    {
      batchSize: opts.batchSize,
      concurrency: opts.concurrency,
      lingerMs: opts.lingerMs ?? 2,
      entryOf: (msg) => entryOf(msg, maxBytes),
    },
    {
      start(batch) {
        const p = applyBatch(batch)
          .catch((err: unknown) => log.error({ err, event: 'batch_failed' }, 'a batch failed unexpectedly'))
          .finally(() => {
            active.delete(p);
            scheduler.settle(batch);
            wakeReader();
          });
        active.add(p);
      },
      armLinger(ms) {
        lingerTimer = setTimeout(onLinger, ms);
      },
      cancelLinger() {
        clearTimeout(lingerTimer);
        lingerTimer = undefined;
      },
    },
  );
  const reader = await startInboxReader({
    js: opts.js,
    names: opts.names ?? CONTRACT_NAMES,
    log,
    ackWaitMs: opts.ackWaitMs,
    provision: opts.provision,
    sink: scheduler,
    maxMessages: scheduler.maxHeld,
  });
  wakeReader = reader.wake;
  return {
    async stop() {
      // Nothing waits for more from now on; what the drained subscription still delivers, and
      // everything received before, is applied and acked: it is ours until acked.
      scheduler.drain();
      await reader.stop();
      while (active.size > 0) await Promise.all(active);
    },
    isBound: reader.isBound,
    inFlight: () => scheduler.held,
    applyFailure() {
      const f = failing();
      if (!f) return undefined;
      const code = f.failure.code === null ? '' : ` ${f.failure.code}`;
      const seconds = ((Date.now() - f.since) / 1000).toFixed(1);
      return `batches have failed for ${seconds} s for a fault that is not the messages' (${f.failure.meaning}${code}): nak'd, retried until it is gone`;
    },
  };
}
