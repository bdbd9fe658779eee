/**
 * Creating or updating the streams and the inbox consumer (docs/contract.md). Idempotent: doing it again at
 * every start is harmless. Operators who provision streams themselves set NATS_PROVISION=false.
 */
import { nanos } from '@nats-io/nats-core';
import {
  AckPolicy,
  DeliverPolicy,
  RetentionPolicy,
  StorageType,
  type JetStreamManager,
  type StreamConfig,
} from '@nats-io/jetstream';
import { CONTRACT_NAMES, type ExchangeNames } from './subjects.js';

export interface ProvisionOptions {
  duplicateWindowMs: number;
  replicas: number;
  /** JetStream redelivers an envelope not acked in this time; the inbox signals progress meanwhile. */
  ackWaitMs: number;
  /** Envelopes delivered and not yet acked, across every instance sharing core-inbox. */
  maxAckPending: number;
  /** The streams, subjects and inbox consumer to create (the contract's by default). */
  names?: ExchangeNames;
  /**
   * `MAX_ENVELOPE_BYTES`: the results stream's `max_msg_size` is this plus
   * {@link RESULT_HEADERS_ALLOWANCE_BYTES}, so JetStream refuses at publish a message the inbox
   * would quarantine `PAYLOAD_TOO_LARGE` by far, while an envelope of exactly this size with its
   * headers still passes (JetStream counts headers and payload together, the inbox the payload
   * only). Unset: the stream's limit is left as it is.
   */
  maxEnvelopeBytes?: number;
}

/**
 * Room for a result's headers above `MAX_ENVELOPE_BYTES` in the results stream's `max_msg_size`:
 * `Nats-Msg-Id` (at most 256 characters), `traceparent` and `tracestate` take well under it.
 */
export const RESULT_HEADERS_ALLOWANCE_BYTES = 4096;

/** How long the streams keep messages: a week, so operators can inspect and replay. */
const MAX_AGE_MS = 7 * 24 * 3600 * 1000;

async function ensureStream(
  jsm: JetStreamManager,
  cfg: Partial<StreamConfig> & { name: string },
): Promise<void> {
  try {
    const info = await jsm.streams.info(cfg.name);
    const c = info.config;
    const differs =
      JSON.stringify(c.subjects) !== JSON.stringify(cfg.subjects) ||
      c.duplicate_window !== cfg.duplicate_window ||
      c.num_replicas !== cfg.num_replicas ||
      (cfg.max_msg_size !== undefined && c.max_msg_size !== cfg.max_msg_size);
    if (differs) {
      await jsm.streams.update(cfg.name, {
        subjects: cfg.subjects!,
        duplicate_window: cfg.duplicate_window!,
        num_replicas: cfg.num_replicas!,
        ...(cfg.max_msg_size === undefined ? {} : { max_msg_size: cfg.max_msg_size }),
      });
    }
  } catch (err) {
    if (!/stream not found/i.test((err as Error).message)) throw err;
    await jsm.streams.add(cfg);
  }
}

/** Create or update both streams and the durable pull consumer `core-inbox` (of `opts.names`). */
export async function provisionStreams(jsm: JetStreamManager, opts: ProvisionOptions): Promise<void> {
  const names = opts.names ?? CONTRACT_NAMES;
  const common = {
    storage: StorageType.File,
    retention: RetentionPolicy.Limits,
    duplicate_window: nanos(opts.duplicateWindowMs),
    num_replicas: opts.replicas,
    max_age: nanos(MAX_AGE_MS),
  };
  await ensureStream(jsm, {
    name: names.resultsStream,
    subjects: [names.resultSubject],
    ...common,
    ...(opts.maxEnvelopeBytes === undefined
      ? {}
      : { max_msg_size: opts.maxEnvelopeBytes + RESULT_HEADERS_ALLOWANCE_BYTES }),
  });
  await ensureStream(jsm, { name: names.jobsStream, subjects: [`${names.jobSubjectPrefix}>`], ...common });
  const consumer = {
    durable_name: names.inboxConsumer,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    filter_subject: names.resultSubject,
    ack_wait: nanos(opts.ackWaitMs),
    // Never give up on an envelope: transient failures are retried as long as it takes.
    max_deliver: -1,
    max_ack_pending: opts.maxAckPending,
  };
  try {
    await jsm.consumers.info(names.resultsStream, names.inboxConsumer);
    await jsm.consumers.update(names.resultsStream, names.inboxConsumer, {
      ack_wait: consumer.ack_wait,
      max_deliver: consumer.max_deliver,
      max_ack_pending: consumer.max_ack_pending,
    });
  } catch (err) {
    if (!/consumer not found/i.test((err as Error).message)) throw err;
    await jsm.consumers.add(names.resultsStream, consumer);
  }
}

/**
 * How long a stream or consumer found missing under a running daemon stays missing before the
 * daemon provisions it again: code that deletes and re-creates it has done so by then, and a
 * creation racing that code's (with another configuration) can leave nats-server 2.9 with a
 * stream whose files are gone.
 */
export const PROVISION_AGAIN_AFTER_MS = 1_000;

/**
 * `provision` run at most once at a time: a call while a run is under way shares that run's
 * result, so the inbox and the publisher finding the streams gone at once create them once.
 */
export function oneAtATime(provision: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined;
  return () =>
    (running ??= provision().finally(() => {
      running = undefined;
    }));
}
