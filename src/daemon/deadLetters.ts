/**
 * Dead letters from JetStream (docs/lifecycle.md, "The loops"): a max-deliveries advisory for a job
 * message becomes `DELIVERY_EXHAUSTED` for its job (→ `dlq`) through the step. Advisories are at
 * most once; the watchdog is the safety net for a lost one. All instances share one queue group,
 * and an advisory the loop cannot confirm with the server changes nothing
 * (docs/development.md, "Why the loops are built as they are").
 */
import {
  jetstreamManager,
  type ConsumerConfig,
  type ConsumerInfo,
  type JetStreamManager,
} from '@nats-io/jetstream';
import {
  ConnectionError,
  RequestError,
  TimeoutError,
  type Msg,
  type NatsConnection,
  type Subscription,
} from '@nats-io/nats-core';
import type { Kysely } from 'kysely';
import type { Database } from '../db/schema.js';
import { isRetryable } from '../errors.js';
import type { Logger } from '../logger.js';
import type { Metrics, UntrustedAdvisoryReason } from '../metrics.js';
import { JOBS_STREAM, maxDeliveriesAdvisory } from '../nats/subjects.js';
import { startDeadLetterTrace } from '../tracing/jobSpans.js';
import { runTraced } from '../tracing/tracing.js';
import { applyEvent, type StepOutcome } from '../step/index.js';

/** The queue group every core instance joins for the advisories. */
export const DEAD_LETTER_QUEUE = 'recognition-core-dead-letters';

/**
 * Attempts to handle one advisory when the database or NATS fails in a way a retry can fix. The
 * advisory is not redelivered, so giving up early loses it (the watchdog still times the job out);
 * retrying forever would pile up advisories behind an outage. Five attempts span about 15 s.
 */
const HANDLE_ATTEMPTS = 5;
/** First pause between those attempts; doubles each time. */
const HANDLE_RETRY_BASE_MS = 1_000;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** A name JetStream gives a consumer: no whitespace, no `.`, `*` or `>`. */
const CONSUMER_NAME = /^[^\s.*>]+$/;
const JOB_MSG_ID = /^job:([0-9a-f-]{36}):\d+$/i;

/** What {@link createDeadLetters} needs. */
export interface DeadLettersOptions {
  db: Kysely<Database>;
  nc: NatsConnection;
  logger: Logger;
  metrics?: Metrics;
  /** Defaults to a manager on `nc` created without a round trip. */
  jsm?: JetStreamManager;
  /** The stream whose advisories to follow: the daemon's jobs stream, `RECOGNITION_JOBS` by default. */
  stream?: string;
}

/** The dead-letter loop. */
export interface DeadLetters {
  /** Subscribe (queue group {@link DEAD_LETTER_QUEUE}); resolves once the server has the subscription. */
  start(): Promise<void>;
  /** Unsubscribe (handling what was already received) and wait for the advisories in hand. */
  stop(): Promise<void>;
  /**
   * Handle one advisory payload (received on `subject`, when given): read the job message at its
   * stream sequence, check the advisory against its consumer, find its job and step it with
   * `DELIVERY_EXHAUSTED`. Resolves with the step's outcome, or undefined when the advisory is not
   * to be trusted or cannot name a job (logged at warn). Rejects on failures a retry can fix (the
   * loop retries; direct callers decide).
   */
  handleAdvisory(data: Uint8Array | string, subject?: string): Promise<StepOutcome | undefined>;
}

/** The fields of `io.nats.jetstream.advisory.v1.max_deliver` this loop reads. */
export interface MaxDeliverAdvisory {
  stream: string;
  consumer: string;
  stream_seq: number;
  deliveries: number;
}

function parseAdvisory(data: Uint8Array | string): MaxDeliverAdvisory | undefined {
  try {
    const v = JSON.parse(typeof data === 'string' ? data : new TextDecoder().decode(data)) as Record<
      string,
      unknown
    >;
    if (typeof v.stream_seq !== 'number' || !Number.isSafeInteger(v.stream_seq) || v.stream_seq < 1)
      return undefined;
    return {
      stream: typeof v.stream === 'string' ? v.stream : '',
      consumer: typeof v.consumer === 'string' ? v.consumer : '',
      stream_seq: v.stream_seq,
      deliveries: typeof v.deliveries === 'number' ? v.deliveries : 0,
    };
  } catch {
    return undefined;
  }
}

/** The job id a stored job message names: its `Nats-Msg-Id` (`job:<id>:<attempt>`), else its payload. */
function jobIdOf(header: { get(k: string): string } | undefined, json: () => unknown): string | undefined {
  const fromHeader = JOB_MSG_ID.exec(header?.get('Nats-Msg-Id') ?? '')?.[1];
  if (fromHeader) return fromHeader;
  try {
    const id = (json() as { job_id?: unknown } | null)?.job_id;
    return typeof id === 'string' && UUID.test(id) ? id : undefined;
  } catch {
    return undefined;
  }
}

/** Whether `subject` is one of those `filter` (a NATS subject with `*` and `>` wildcards) names. */
export function subjectMatches(filter: string, subject: string): boolean {
  const f = filter.split('.');
  const s = subject.split('.');
  for (let i = 0; i < f.length; i++) {
    if (f[i] === '>') return s.length > i;
    if (i >= s.length || (f[i] !== '*' && f[i] !== s[i])) return false;
  }
  return f.length === s.length;
}

/**
 * Why an advisory is not to be trusted, or undefined when its consumer bears it out: `info` is the
 * consumer it names (undefined when the stream has none of that name), `messageSubject` the
 * subject of the message at its stream sequence.
 */
export function untrustedBecause(
  advisory: MaxDeliverAdvisory,
  info:
    | {
        config: Pick<ConsumerConfig, 'max_deliver' | 'filter_subject' | 'filter_subjects' | 'opt_start_seq'>;
        delivered: Pick<ConsumerInfo['delivered'], 'stream_seq'>;
      }
    | undefined,
  messageSubject: string,
): UntrustedAdvisoryReason | undefined {
  if (!info) return 'unknown_consumer';
  const maxDeliver = info.config.max_deliver ?? -1;
  if (maxDeliver < 1 || advisory.deliveries < maxDeliver) return 'below_max_deliver';
  // Its delivery position has not passed the message, or it starts after it.
  if (
    info.delivered.stream_seq < advisory.stream_seq ||
    advisory.stream_seq < (info.config.opt_start_seq ?? 0)
  )
    return 'never_delivered';
  const filters = [
    ...(info.config.filter_subject ? [info.config.filter_subject] : []),
    ...(info.config.filter_subjects ?? []),
  ];
  if (filters.length > 0 && !filters.some((f) => subjectMatches(f, messageSubject))) return 'not_its_subject';
  return undefined;
}

/** NATS failures a retry can fix: no answer in time, no responder yet, the connection is down. */
function isTransientNatsError(err: unknown): boolean {
  return err instanceof TimeoutError || err instanceof RequestError || err instanceof ConnectionError;
}

/** Create the dead-letter loop. Nothing is subscribed until `start()`. */
export function createDeadLetters(opts: DeadLettersOptions): DeadLetters {
  const { db, nc, metrics } = opts;
  const stream = opts.stream ?? JOBS_STREAM;
  const log = opts.logger.child({ loop: 'dead_letters' });
  const inFlight = new Set<Promise<unknown>>();
  let jsm = opts.jsm;
  let sub: Subscription | undefined;
  let stopping = false;
  /** Handlers waiting to retry; stop() wakes them so it does not wait out their backoff. */
  const sleepers = new Set<() => void>();
  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        sleepers.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      sleepers.add(wake);
    });

  /** Log an advisory that is not to be trusted; it changes nothing. */
  function untrusted(fields: Record<string, unknown>, reason: UntrustedAdvisoryReason): undefined {
    metrics?.untrustedAdvisories.inc({ reason });
    log.warn(
      { ...fields, reason, event: 'dead_letter_advisory_untrusted' },
      'max-deliveries advisory not borne out by its consumer; ignored (the watchdog times the job out)',
    );
    return undefined;
  }

  async function handleAdvisory(
    data: Uint8Array | string,
    subject?: string,
  ): Promise<StepOutcome | undefined> {
    // 1. Parse the advisory.
    const advisory = parseAdvisory(data);
    if (!advisory) {
      log.warn(
        { event: 'dead_letter_advisory_invalid' },
        'max-deliveries advisory without a stream sequence; ignored',
      );
      return undefined;
    }
    const fields = {
      stream_seq: advisory.stream_seq,
      consumer: advisory.consumer,
      deliveries: advisory.deliveries,
    };
    // 2. The subject it came on and its body name the same stream and consumer: this loop's stream.
    if (advisory.stream !== stream) return untrusted({ ...fields, stream: advisory.stream }, 'other_stream');
    if (subject !== undefined && subject !== maxDeliveriesAdvisory(stream, { consumer: advisory.consumer }))
      return untrusted({ ...fields, subject }, 'subject_mismatch');
    // 3. Read the job message it names.
    jsm ??= await jetstreamManager(nc, { checkAPI: false });
    const stored = await jsm.streams.getMessage(stream, { seq: advisory.stream_seq });
    if (!stored) {
      log.warn(
        { ...fields, event: 'dead_letter_message_gone' },
        'the undeliverable job message is no longer in the stream; the watchdog will time its job out',
      );
      return undefined;
    }
    // 4. Its consumer bears it out.
    const info = !CONSUMER_NAME.test(advisory.consumer)
      ? undefined
      : await jsm.consumers.info(stream, advisory.consumer).catch((err: unknown) => {
          if (/consumer not found/i.test((err as Error).message)) return undefined;
          throw err;
        });
    const distrust = untrustedBecause(advisory, info, stored.subject);
    if (distrust) return untrusted({ ...fields, subject: stored.subject }, distrust);
    // 5. Find its job.
    const jobId = jobIdOf(stored.header, () => stored.json());
    if (!jobId) {
      log.warn(
        { ...fields, subject: stored.subject, event: 'dead_letter_no_job_id' },
        'undeliverable message names no job; ignored',
      );
      return undefined;
    }
    // 6. Apply the event to the job (its own transaction), in a span linked to the job message's trace.
    const msgId = stored.header?.get('Nats-Msg-Id') || null;
    const traced = startDeadLetterTrace({
      jobId,
      msgId,
      deliveries: advisory.deliveries,
      headers: stored.header,
    });
    const outcome = await runTraced(traced, () =>
      applyEvent(db, jobId, { type: 'DELIVERY_EXHAUSTED', deliveries: advisory.deliveries }),
    );
    traced?.end(outcome);
    // 7. Report.
    const line = {
      ...fields,
      job_id: jobId,
      msg_id: msgId,
      event: outcome.event,
      from: outcome.from,
      to: outcome.to,
      decision: outcome.decision,
      ...traced?.logFields,
    };
    if (outcome.decision === 'applied') {
      metrics?.transitions.inc({ from: outcome.from, event: outcome.event, to: outcome.to });
      metrics?.deadLetters.inc({ reason: 'MAX_DELIVERIES' });
      log.warn(line, 'no service took the job message: dead letter');
    } else if (outcome.decision === 'unknown_job') {
      log.warn(line, 'undeliverable job message for an unknown job; ignored');
    } else {
      log.info(
        { ...line, reason: outcome.reason },
        'delivery exhausted for a job that no longer waits for delivery; ignored',
      );
    }
    return outcome;
  }

  async function handleWithRetries(m: Msg): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await handleAdvisory(m.data, m.subject);
        return;
      } catch (err) {
        const retryable = isRetryable(err) || isTransientNatsError(err);
        if (!retryable || attempt >= HANDLE_ATTEMPTS || stopping) {
          log.error(
            { err, event: 'dead_letter_failed', attempts: attempt },
            'could not handle a max-deliveries advisory; the watchdog will time its job out',
          );
          return;
        }
        const delay = HANDLE_RETRY_BASE_MS * 2 ** (attempt - 1);
        log.warn(
          { err, event: 'dead_letter_retry', attempts: attempt, retry_in_ms: delay },
          'could not handle a max-deliveries advisory yet; retrying',
        );
        await pause(delay);
        if (stopping) {
          log.warn(
            { event: 'dead_letter_abandoned', attempts: attempt },
            'stopping: the watchdog will time out the job of a pending advisory',
          );
          return;
        }
      }
    }
  }

  return {
    async start() {
      if (sub) return;
      stopping = false;
      sub = nc.subscribe(maxDeliveriesAdvisory(stream), {
        queue: DEAD_LETTER_QUEUE,
        callback: (err, m) => {
          if (err) {
            log.error({ err, event: 'dead_letter_subscription_error' }, 'advisory subscription failed');
            return;
          }
          const p = handleWithRetries(m);
          inFlight.add(p);
          void p.finally(() => inFlight.delete(p));
        },
      });
      // The subscription is registered once the server answered a PING sent after it.
      await nc.flush();
    },
    async stop() {
      stopping = true;
      for (const wake of [...sleepers]) wake();
      const s = sub;
      sub = undefined;
      if (s && !s.isClosed()) await s.drain().catch(() => undefined);
      await Promise.allSettled([...inFlight]);
    },
    handleAdvisory,
  };
}
