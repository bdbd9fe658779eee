/**
 * The publisher (docs/lifecycle.md, "The loops"): a transactional outbox from `recognition_job` rows in `pending` to the
 * `RECOGNITION_JOBS` stream.
 *
 * A round locks due `pending` jobs (`FOR UPDATE OF j SKIP LOCKED`), publishes each job message
 * with `Nats-Msg-Id = job:<job_id>:<attempt>`, waits for JetStream's acks, and records every outcome
 * through the step (`PUBLISHED` or `PUBLISH_FAILED`) in the same transaction. The row locks are held
 * across the publish on purpose: another instance skips those jobs instead of publishing them too.
 *
 * Outage or rejection: a publish fails either because NATS or JetStream cannot take any message
 * now (disconnected, no ack in time, no stream answering, JetStream unavailable) or because
 * JetStream refuses this message (see `classifyPublishFailure`). Only a refusal is recorded as
 * `PUBLISH_FAILED`, spends one of the job's `MAX_PUBLISH_ATTEMPTS` and ends in `dlq` when they are
 * spent. An outage records nothing: the job stays `pending` and due, its attempts unspent, and the
 * publisher waits — the `recognition_publisher_nats_unavailable` gauge is 1, /readyz says
 * `nats: false`, one line logs the start and one the end. Meanwhile each round tries one job only
 * (the oldest due), after a pause that doubles from `PUBLISH_BACKOFF_BASE_MS` up to
 * {@link OUTAGE_PAUSE_MAX_MS}, and at once when the client reconnects; the first round that JetStream
 * answers ends the outage and the next takes a full batch.
 *
 * A 503 ("no responders") on a job subject means no stream took the message. Where the core
 * provisions the streams (`provision` given), its jobs stream binds every job subject, so the
 * stream is gone or without a leader: an outage, and the streams are provisioned again once it has
 * lasted `PROVISION_AGAIN_AFTER_MS`. Otherwise JetStream is asked which stream binds the subject:
 * none while another stream binds job subjects means this job's target service has no stream (a
 * refusal); no stream for job subjects at all means the jobs stream is missing (an outage, until an
 * operator creates it).
 *
 * Exactly one message per job, in effect:
 * - a crash after JetStream's ack but before the commit leaves the job `pending`; the next round
 *   publishes it again with the same msg id and JetStream drops it as a duplicate (its ack says
 *   so) as long as it comes within the stream's duplicate window (2 min by default);
 * - a publish caught by an outage (sent, never acked: a frozen server, a dropped connection) may
 *   still reach the stream when the server resumes or the client flushes its buffer on reconnect;
 *   the job's next publish carries the same msg id and follows within one outage pause, well
 *   inside the duplicate window, so JetStream drops it. With `isConnected` given, nothing is handed
 *   to a client that knows it is disconnected, which leaves only the publishes caught by the
 *   disconnect itself.
 *   A job that went to `dlq` meanwhile and whose late message a service still takes gets its
 *   result logged as `late` by the inbox, never applied.
 * A job message republished after a lost commit carries a later `reply_deadline` than the copy the
 * stream kept; the stored (later) deadline is the one the watchdog enforces, so a service that
 * honours its copy's earlier deadline is never cut short.
 *
 * Wake-ups: a `LISTEN recognition_job_created` connection (the insert trigger NOTIFYs), a timer to
 * the earliest future `next_publish_at` (backoff retries), and a poll every
 * `PUBLISHER_POLL_INTERVAL_MS` as the safety net. A round that filled its batch is followed by
 * another at once. During an outage only the outage pause and the client's reconnects wake it.
 */
import type { JetStreamClient, JetStreamManager, PubAck } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { sql, type Kysely, type Transaction } from 'kysely';
import type { Pool } from 'pg';
import { publishBackoffMs, type PublishRetryPolicy } from '../../machines/index.js';
import type { Config } from '../config.js';
import { listenForNotifications, type NotificationListener } from '../db/notifications.js';
import type { Database } from '../db/schema.js';
import { isRetryable } from '../errors.js';
import type { Logger } from '../logger.js';
import { checkJobMessage, type JobMessage } from '../messages/schemas.js';
import type { Metrics } from '../metrics.js';
import { classifyPublishFailure } from '../nats/classifyPublishFailure.js';
import { PROVISION_AGAIN_AFTER_MS } from '../nats/provision.js';
import {
  CONTRACT_NAMES,
  jobMsgId,
  jobSubject,
  RESULT_SUBJECT,
  type ExchangeNames,
} from '../nats/subjects.js';
import {
  endPublishTrace,
  publishLogFields,
  startPublishTrace,
  type PublishTrace,
} from '../tracing/jobSpans.js';
import { headerFieldsOf } from '../tracing/tracing.js';
import { applyEvents, type StepItem, type StepOutcome } from '../step/index.js';

/** The channel the `recognition_job` insert trigger notifies (migration 0001). */
export const JOB_CREATED_CHANNEL = 'recognition_job_created';

/**
 * Shortest wait before looking again when a due job was left behind (another instance holds its
 * row while it publishes it): keeps this instance from spinning on a row it cannot take.
 */
const MIN_WAKE_DELAY_MS = 100;
/**
 * First pause after a failed round, doubling per consecutive failure up to the poll interval:
 * a failure that repeats (a bug, a broken database) must not turn into a tight loop of errors.
 */
const ROUND_RETRY_BASE_MS = 500;
/**
 * The longest pause between two tries during an outage: the end of an outage that no reconnect
 * announces (a frozen server that resumes keeps its connection) is noticed within this time.
 */
export const OUTAGE_PAUSE_MAX_MS = 5_000;

/** The configuration the publisher reads. */
export type PublisherConfig = Pick<
  Config,
  | 'REPLY_TIMEOUT_MS'
  | 'MAX_PUBLISH_ATTEMPTS'
  | 'PUBLISH_BACKOFF_BASE_MS'
  | 'PUBLISH_BACKOFF_MAX_MS'
  | 'PUBLISH_TIMEOUT_MS'
  | 'PUBLISHER_POLL_INTERVAL_MS'
  | 'PUBLISHER_BATCH_SIZE'
  | 'RESULTS_BUCKET'
>;

/** What {@link createPublisher} needs. */
export interface PublisherOptions {
  db: Kysely<Database>;
  /**
   * The pool whose connection settings the LISTEN connection copies (it opens a client of its own
   * and takes no pool slot). Without it the publisher relies on its timers and poll only.
   */
  pool?: Pool;
  js: JetStreamClient;
  /**
   * Whether the NATS connection is up (`Nats.isConnected`). While it is down no job is handed to the
   * client (the publisher waits for NATS, spending no attempt): a publish the client buffers while
   * reconnecting reaches the stream whenever it reconnects. Without it, every publish is tried.
   */
  isConnected?: () => boolean;
  /** `Nats.onReconnect`: during an outage, a reconnect starts the next try at once. */
  onReconnect?: (listener: () => void) => () => void;
  /**
   * Create or update the streams and `core-inbox` again (`provisionStreams`), given where the core
   * provisions them (`NATS_PROVISION=true`). Called when no stream answered on a job subject.
   */
  provision?: () => Promise<void>;
  logger: Logger;
  metrics?: Metrics;
  config: PublisherConfig;
  /** The job subjects to publish on (the contract's by default). */
  names?: ExchangeNames | undefined;
  /** Replaces the step's `applyEvents`; for fault injection in tests only. */
  applyEvents?: typeof applyEvents;
}

/** A publisher. */
export interface Publisher {
  /**
   * Start the loop: LISTEN (when a pool was given), a round at once, then rounds on every wake-up.
   * Resolves once the first LISTEN attempt and the first round have finished (a failed round is
   * logged, not thrown). Idempotent.
   */
  start(): Promise<void>;
  /** Stop waking up, close the LISTEN connection, and wait for the round in flight to commit. */
  stop(): Promise<void>;
  /**
   * One round in one transaction: lock up to `PUBLISHER_BATCH_SIZE` due pending jobs, publish them
   * all, record every outcome, commit. Resolves with the number of jobs it locked. Rejects if the
   * database fails (the transaction rolls back; the jobs stay due and are published again, with
   * the same msg ids).
   */
  publishDue(): Promise<number>;
  /** Whether the LISTEN connection is up (false without a pool). */
  isListening(): boolean;
  /**
   * False while the publisher waits for NATS or JetStream (an outage: the last publish it tried
   * failed for a cause that is not the message's); true otherwise. For /readyz.
   */
  isNatsAvailable(): boolean;
}

/** A due job as the publisher's query returns it: the job, its upload and the database clock. */
export interface DueJobRow {
  job_id: string;
  file_id: string;
  attempt: number;
  target_service: string;
  publish_attempts: number;
  source_bucket: string;
  source_key: string;
  /** The job's stored W3C trace context (migration 0005): the publish continues that trace. */
  trace_parent: string | null;
  trace_state: string | null;
  /** `date_trunc('milliseconds', now())`: the same value the step reads as the event's `now`. */
  db_now: Date;
}

/**
 * The publisher's due query: `batchSize` pending jobs whose `next_publish_at` has come, oldest
 * first, with their file's upload; only the job rows are locked, and rows another transaction holds
 * are skipped. Served by the partial index `recognition_job_next_publish_due_idx` (exported so a
 * test can EXPLAIN the real query).
 */
export function duePublishQuery(batchSize: number) {
  return sql<DueJobRow>`
    SELECT j.id AS job_id, j.file_id, j.attempt, j.target_service, j.publish_attempts,
           o.bucket AS source_bucket, o.key AS source_key, j.trace_parent, j.trace_state,
           date_trunc('milliseconds', now()) AS db_now
    FROM recognition_job j
    JOIN stored_file f ON f.id = j.file_id
    JOIN s3_object o ON o.id = f.s3_object_id
    WHERE j.status = 'pending' AND j.next_publish_at <= now()
    ORDER BY j.next_publish_at
    LIMIT ${batchSize}
    FOR UPDATE OF j SKIP LOCKED`;
}

/** Milliseconds until the earliest `next_publish_at` of a pending job (negative: due), or null. */
function nextDueQuery() {
  return sql<{ ms: number | null }>`
    SELECT (EXTRACT(EPOCH FROM (min(next_publish_at) - now())) * 1000)::float8 AS ms
    FROM recognition_job WHERE status = 'pending'`;
}

/**
 * The job message for a due job (docs/contract.md). Pure. `reply_deadline` is `db_now + replyTimeoutMs`,
 * exactly what `PUBLISHED` stores: the step computes it from the same transaction's clock.
 */
export function buildJobMessage(
  row: DueJobRow,
  opts: { resultsBucket: string; replyTimeoutMs: number },
): JobMessage {
  return {
    job_id: row.job_id,
    file_id: row.file_id,
    attempt: row.attempt,
    source_s3: { bucket: row.source_bucket, key: row.source_key },
    result_s3_prefix: { bucket: opts.resultsBucket, key_prefix: `results/${row.file_id}/${row.job_id}/` },
    reply_subject: RESULT_SUBJECT,
    reply_deadline: new Date(row.db_now.getTime() + opts.replyTimeoutMs).toISOString(),
    published_at: row.db_now.toISOString(),
  };
}

/**
 * One job's publish: published (JetStream acked it), refused (an attempt spent; `permanent` when no
 * retry can help), or put off by an outage (nothing recorded).
 */
type Attempt = { row: DueJobRow; msgId: string; subject: string; trace?: PublishTrace | undefined } & (
  | { kind: 'published'; ack: PubAck }
  | { kind: 'rejected'; error: string; permanent: boolean }
  | { kind: 'unavailable'; error: string }
);

/** What a round did: every attempt, the outcomes of those it recorded, and whether it was full. */
interface RoundResult {
  attempts: Attempt[];
  recorded: Array<{ attempt: Attempt & { kind: 'published' | 'rejected' }; outcome: StepOutcome }>;
  full: boolean;
  /** No stream answered on a job subject where the core provisions them: provision again. */
  provisionWanted: boolean;
}

/** An outage the publisher waits out. */
interface Outage {
  since: number;
  /** The failure that began it. */
  reason: string;
  /** Publishes put off since it began. */
  deferred: number;
  /** Rounds that found NATS still unavailable (the pause doubles with each). */
  rounds: number;
}

/** NATS headers holding `fields`. */
function withHeaders(fields: { traceparent: string; tracestate?: string | null | undefined }) {
  const h = natsHeaders();
  for (const [k, v] of Object.entries(headerFieldsOf(fields))) h.set(k, v);
  return h;
}

/** Names of the streams that bind `subject` (a wildcard finds the streams with subjects under it). */
async function streamsBinding(jsm: JetStreamManager, subject: string): Promise<string[]> {
  const names: string[] = [];
  for await (const name of jsm.streams.names(subject)) names.push(name);
  return names;
}

/** Create a publisher. Nothing runs until `start()` (or a direct `publishDue()`). */
export function createPublisher(opts: PublisherOptions): Publisher {
  const { db, js, metrics, config: cfg } = opts;
  const apply = opts.applyEvents ?? applyEvents;
  const log = opts.logger.child({ loop: 'publisher' });
  const batchSize = cfg.PUBLISHER_BATCH_SIZE;
  const jobSubjects = `${(opts.names ?? CONTRACT_NAMES).jobSubjectPrefix}>`;
  const policy: PublishRetryPolicy = {
    maxAttempts: cfg.MAX_PUBLISH_ATTEMPTS,
    baseDelayMs: cfg.PUBLISH_BACKOFF_BASE_MS,
    maxDelayMs: cfg.PUBLISH_BACKOFF_MAX_MS,
  };
  // An invalid job message cannot become valid by waiting: its only attempt is its last one.
  const permanentPolicy: PublishRetryPolicy = { ...policy, maxAttempts: 1 };

  const inFlight = new Set<Promise<unknown>>();
  let running = false;
  let again = false;
  let looping: Promise<void> | undefined;
  let timer: NodeJS.Timeout | undefined;
  let listener: NotificationListener | undefined;
  let stopReconnectWake: (() => void) | undefined;
  let failures = 0;
  let outage: Outage | undefined;
  let jsm: Promise<JetStreamManager> | undefined;
  /** Resolved after the loop's next round (and when the loop stops). */
  const roundWaiters: Array<() => void> = [];
  const releaseWaiters = () => {
    for (const resolve of roundWaiters.splice(0)) resolve();
  };

  /**
   * What a 503 on `subject` means where the core does not provision the streams: a refusal when
   * streams bind job subjects but none binds this one, an outage when none binds any job subject
   * (the jobs stream is missing) or one binds it and did not answer (no leader). Asked once per
   * subject and round.
   */
  async function noRespondersMeaning(subject: string): Promise<{ rejected: boolean; error: string }> {
    try {
      jsm ??= js.jetstreamManager(false);
      const manager = await jsm;
      const binding = await streamsBinding(manager, subject);
      if (binding.length > 0) {
        return { rejected: false, error: `stream ${binding.join(', ')} binds ${subject} but did not answer` };
      }
      const jobStreams = await streamsBinding(manager, jobSubjects);
      if (jobStreams.length > 0) {
        return {
          rejected: true,
          error: `no stream binds subject ${subject} (streams for job subjects: ${jobStreams.join(', ')})`,
        };
      }
      return {
        rejected: false,
        error: `no stream binds job subjects (${jobSubjects}): the jobs stream is missing`,
      };
    } catch (err) {
      jsm = undefined;
      return {
        rejected: false,
        error: `no stream answered on ${subject}; asking JetStream failed: ${String(err)}`,
      };
    }
  }

  async function publishOne(
    row: DueJobRow,
    noResponders: Map<string, Promise<{ rejected: boolean; error: string }>>,
    state: { provisionWanted: boolean },
  ): Promise<Attempt> {
    const msgId = jobMsgId(row.job_id, row.attempt);
    const subject = jobSubject(row.target_service, opts.names);
    const message = buildJobMessage(row, {
      resultsBucket: cfg.RESULTS_BUCKET,
      replyTimeoutMs: cfg.REPLY_TIMEOUT_MS,
    });
    const check = checkJobMessage(message);
    if (!check.valid) {
      const detail = check.errors.map((e) => `${e.instancePath || '/'} ${e.message ?? e.keyword}`).join('; ');
      return {
        row,
        msgId,
        subject,
        kind: 'rejected',
        permanent: true,
        error: `invalid job message (a bug): ${detail}`,
      };
    }
    if (opts.isConnected && !opts.isConnected()) {
      return { row, msgId, subject, kind: 'unavailable', error: 'NATS is not connected' };
    }
    const trace = startPublishTrace({
      stored: row.trace_parent ? { traceparent: row.trace_parent, tracestate: row.trace_state } : undefined,
      jobId: row.job_id,
      attempt: row.attempt,
      subject,
      msgId,
    });
    let attempt: Attempt;
    try {
      const ack = await js.publish(subject, JSON.stringify(message), {
        msgID: msgId,
        timeout: cfg.PUBLISH_TIMEOUT_MS,
        ...(trace?.headers ? { headers: withHeaders(trace.headers) } : {}),
      });
      attempt = { row, msgId, subject, trace, kind: 'published', ack };
    } catch (err) {
      const failure = classifyPublishFailure(err);
      if (failure.kind === 'rejected') {
        attempt = { row, msgId, subject, trace, kind: 'rejected', permanent: false, error: failure.reason };
      } else if (failure.kind === 'unavailable') {
        attempt = { row, msgId, subject, trace, kind: 'unavailable', error: failure.reason };
      } else if (opts.provision) {
        state.provisionWanted = true;
        const error = `no stream answered on ${subject}: the jobs stream is missing or has no leader`;
        attempt = { row, msgId, subject, trace, kind: 'unavailable', error };
      } else {
        let meaning = noResponders.get(subject);
        if (!meaning) noResponders.set(subject, (meaning = noRespondersMeaning(subject)));
        const { rejected, error } = await meaning;
        attempt = rejected
          ? { row, msgId, subject, trace, kind: 'rejected', permanent: false, error }
          : { row, msgId, subject, trace, kind: 'unavailable', error };
      }
    }
    endPublishTrace(
      trace,
      attempt.kind === 'published'
        ? { ok: true, streamSeq: attempt.ack.seq, duplicate: attempt.ack.duplicate }
        : { ok: false, error: attempt.error },
    );
    return attempt;
  }

  function report(attempt: Attempt & { kind: 'published' | 'rejected' }, outcome: StepOutcome): void {
    const fields = {
      job_id: attempt.row.job_id,
      msg_id: attempt.msgId,
      event: outcome.event,
      from: outcome.from,
      to: outcome.to,
      decision: outcome.decision,
      ...publishLogFields(attempt.trace),
    };
    if (outcome.decision !== 'applied') {
      // The rows are locked and pending, so the machine takes every outcome; anything else is a bug.
      log.error({ ...fields, reason: outcome.reason }, 'publish outcome not applied');
      return;
    }
    metrics?.transitions.inc({ from: outcome.from, event: outcome.event, to: outcome.to });
    if (attempt.kind === 'published') {
      metrics?.publisherResults.inc({ result: 'published' });
      log.info(
        {
          ...fields,
          subject: attempt.subject,
          stream_seq: attempt.ack.seq,
          duplicate: attempt.ack.duplicate,
        },
        attempt.ack.duplicate
          ? 'job published (JetStream already had it: duplicate dropped)'
          : 'job published',
      );
    } else if (outcome.to === 'dlq') {
      metrics?.publisherResults.inc({ result: 'dlq' });
      metrics?.deadLetters.inc({ reason: 'PUBLISH_FAILED' });
      log.error(
        {
          ...fields,
          subject: attempt.subject,
          attempts: attempt.row.publish_attempts + 1,
          error: attempt.error,
        },
        'job message refused for the last time: dead letter',
      );
    } else {
      const attempts = attempt.row.publish_attempts + 1;
      metrics?.publisherResults.inc({ result: 'failed' });
      log.warn(
        {
          ...fields,
          subject: attempt.subject,
          attempts,
          retry_in_ms: publishBackoffMs(attempts, policy),
          error: attempt.error,
        },
        'job message refused; will retry',
      );
    }
  }

  /** Begin, continue or end the outage after a round, and say so once at each end. */
  function noteAvailability(result: RoundResult): void {
    const deferred = result.attempts.filter((a) => a.kind === 'unavailable');
    if (deferred.length > 0) {
      metrics?.publisherOutageWaits.inc(deferred.length);
      const reason = deferred[0]!.error;
      if (!outage) {
        outage = { since: Date.now(), reason, deferred: 0, rounds: 0 };
        metrics?.publisherNatsUnavailable.set(1);
        log.warn(
          { event: 'publisher_nats_unavailable', reason, deferred: deferred.length },
          'NATS unavailable: publishing waits; jobs stay pending, their publish attempts unspent',
        );
      }
      outage.deferred += deferred.length;
      outage.rounds += 1;
      log.debug(
        {
          event: 'publisher_nats_still_unavailable',
          reason,
          deferred: outage.deferred,
          retry_in_ms: outagePause(),
        },
        'NATS still unavailable',
      );
      return;
    }
    // JetStream answered (or nothing was due to try): the outage, if any, is over.
    if (!outage) return;
    log.info(
      {
        event: 'publisher_nats_available',
        unavailable_ms: Date.now() - outage.since,
        deferred: outage.deferred,
        reason: outage.reason,
      },
      'NATS available again: publishing resumes',
    );
    outage = undefined;
    metrics?.publisherNatsUnavailable.set(0);
  }

  /** The pause before the next try of an outage: doubles per round, capped. */
  function outagePause(): number {
    const rounds = outage?.rounds ?? 1;
    const cap = Math.min(OUTAGE_PAUSE_MAX_MS, cfg.PUBLISH_BACKOFF_MAX_MS);
    return Math.min(cfg.PUBLISH_BACKOFF_BASE_MS * 2 ** Math.min(rounds - 1, 20), cap);
  }

  async function round(): Promise<RoundResult> {
    const started = performance.now();
    // During an outage one job (the oldest due) tries whether NATS is back.
    const limit = outage ? 1 : batchSize;
    const state = { provisionWanted: false };
    const noResponders = new Map<string, Promise<{ rejected: boolean; error: string }>>();
    const { attempts, recorded } = await db.transaction().execute(async (tx: Transaction<Database>) => {
      // 1. Lock the due jobs (rows other instances hold are skipped).
      const { rows } = await duePublishQuery(limit).execute(tx);
      if (rows.length === 0) return { attempts: [], recorded: [] };
      // 2. Build, check and publish every message at once; wait for every ack or failure.
      const attempts = await Promise.all(rows.map((row) => publishOne(row, noResponders, state)));
      // 3. Record the outcome of every publish JetStream answered, still holding the locks; one put
      //    off by an outage leaves its job as it is.
      const decided = attempts.filter(
        (a): a is Attempt & { kind: 'published' | 'rejected' } => a.kind !== 'unavailable',
      );
      if (decided.length === 0) return { attempts, recorded: [] };
      const items: StepItem[] = decided.map((a) => ({
        jobId: a.row.job_id,
        event:
          a.kind === 'published'
            ? { type: 'PUBLISHED', replyTimeoutMs: cfg.REPLY_TIMEOUT_MS }
            : { type: 'PUBLISH_FAILED', error: a.error, policy: a.permanent ? permanentPolicy : policy },
      }));
      const outcomes = await apply(tx, items);
      return { attempts, recorded: decided.map((attempt, i) => ({ attempt, outcome: outcomes[i]! })) };
      // 4. Commit (on return).
    });
    // 5. Report, only after the commit.
    if (recorded.length > 0) {
      metrics?.stepDuration.observe({ loop: 'publisher' }, (performance.now() - started) / 1000);
      metrics?.batchSize.observe({ loop: 'publisher' }, recorded.length);
    }
    for (const { attempt, outcome } of recorded) report(attempt, outcome);
    const result = {
      attempts,
      recorded,
      full: attempts.length >= limit,
      provisionWanted: state.provisionWanted,
    };
    noteAvailability(result);
    return result;
  }

  function track<T>(p: Promise<T>): Promise<T> {
    inFlight.add(p);
    void p.then(
      () => inFlight.delete(p),
      () => inFlight.delete(p),
    );
    return p;
  }

  function publishDue(): Promise<number> {
    return track(round()).then((r) => r.attempts.length);
  }

  /** Provision the streams again after no stream answered on a job subject; a failure is logged. */
  async function provisionAgain(): Promise<void> {
    if (!opts.provision) return;
    try {
      await opts.provision();
      log.info(
        { event: 'publisher_provisioned' },
        'no stream answered on a job subject: streams provisioned again',
      );
    } catch (err) {
      log.warn(
        { err, event: 'publisher_provision_failed' },
        'provisioning the streams again failed; retrying',
      );
    }
  }

  /** How long to sleep before the next round: until the earliest retry, at most one poll interval. */
  async function nextDelay(): Promise<number> {
    if (outage) return outagePause();
    const poll = cfg.PUBLISHER_POLL_INTERVAL_MS;
    const floor =
      failures > 0 ? Math.min(ROUND_RETRY_BASE_MS * 2 ** (failures - 1), poll) : MIN_WAKE_DELAY_MS;
    try {
      const { rows } = await nextDueQuery().execute(db);
      const ms = rows[0]?.ms;
      if (ms === null || ms === undefined) return poll;
      return Math.min(Math.max(Math.ceil(ms), floor), poll);
    } catch {
      // The database is failing; the round already logged it. Try again at the poll interval.
      return cfg.PUBLISHER_POLL_INTERVAL_MS;
    }
  }

  async function loop(): Promise<void> {
    try {
      while (running) {
        if (again) {
          again = false;
          try {
            const r = await track(round());
            // Other code that deleted the stream gets a moment to re-create it before we do.
            if (r.provisionWanted && outage && Date.now() - outage.since >= PROVISION_AGAIN_AFTER_MS)
              await provisionAgain();
            // A full batch means more may be due: go again at once (not while NATS is away).
            if (r.full && !outage) again = true;
            failures = 0;
          } catch (err) {
            failures += 1;
            const retryable = isRetryable(err);
            log[retryable ? 'warn' : 'error'](
              { err, event: 'publisher_round_failed', retryable },
              'publisher round failed; the jobs stay pending and are retried',
            );
          }
          releaseWaiters();
          continue;
        }
        const delay = await nextDelay();
        // A wake-up that came while we looked (NOTIFY) wins over the timer.
        if (!running || again) continue;
        timer = setTimeout(() => wake(), delay);
        break;
      }
    } finally {
      looping = undefined;
      if (!running) releaseWaiters();
    }
  }

  function wake(): void {
    if (!running) return;
    again = true;
    if (timer) clearTimeout(timer);
    timer = undefined;
    looping ??= loop();
  }

  return {
    async start() {
      if (running) return;
      running = true;
      // 1. LISTEN first, so no job created from now on waits for the poll. A job created during an
      //    outage waits for the outage's next try like the others.
      if (opts.pool) {
        listener = await listenForNotifications({
          connection: opts.pool.options,
          channel: JOB_CREATED_CHANNEL,
          applicationName: 'recognition-core:publisher-listen',
          logger: log,
          onNotify: () => {
            if (!outage) wake();
          },
        });
      }
      // 2. A reconnect ends the pause of an outage at once.
      stopReconnectWake = opts.onReconnect?.(() => {
        if (outage) wake();
      });
      // 3. A round at once: jobs may have been waiting while no publisher ran. Resolve after it,
      //    so that from then on every round is the answer to a wake-up.
      const firstRound = new Promise<void>((resolve) => roundWaiters.push(resolve));
      wake();
      await firstRound;
    },
    async stop() {
      running = false;
      if (timer) clearTimeout(timer);
      timer = undefined;
      stopReconnectWake?.();
      stopReconnectWake = undefined;
      releaseWaiters();
      await listener?.close();
      listener = undefined;
      await looping;
      await Promise.allSettled([...inFlight]);
    },
    publishDue,
    isListening: () => listener?.isListening() ?? false,
    isNatsAvailable: () => outage === undefined,
  };
}
