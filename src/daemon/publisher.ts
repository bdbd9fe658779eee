/**
 * The publisher (docs/lifecycle.md, "The loops"): a transactional outbox from `pending` job rows to
 * the `RECOGNITION_JOBS` stream. This file is its loop (when a round runs) and the wiring of its
 * parts: the round (`publisherRound.ts`), one job's publish (`publishJob.ts`) and the outage
 * (`publisherOutage.ts`). Each job gets one message in effect: a republish carries the same msg id,
 * within JetStream's duplicate window. Rounds wake on `LISTEN recognition_job_created`, a timer to
 * the earliest `next_publish_at` and a poll; a full round is followed by another at once
 * (docs/development.md, "Why the loops are built as they are").
 */
import type { JetStreamClient } from '@nats-io/jetstream';
import { sql, type Kysely } from 'kysely';
import type { ClientConfig, Pool } from 'pg';
import type { Config } from '../config.js';
import { listenForNotifications, type NotificationListener } from '../db/notifications.js';
import type { Database } from '../db/schema.js';
import { isRetryable } from '../errors.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import { CONTRACT_NAMES, type ExchangeNames } from '../nats/subjects.js';
import { applyEvents } from '../step/index.js';
import { createFailureReader, createOutageWatch } from './publisherOutage.js';
import { createPublisherRound, type RoundResult } from './publisherRound.js';

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
  pool?: Pool | undefined;
  /**
   * Where the LISTEN connection goes instead of the pool's settings: a direct connection past a
   * pooler (`DATABASE_LISTEN_URL`), or `null` for none at all (a transaction-mode pooler keeps no
   * session to listen on): the publisher then finds new jobs by its poll.
   */
  listenConnection?: ClientConfig | null | undefined;
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
  provision?: (() => Promise<void>) | undefined;
  logger: Logger;
  metrics?: Metrics;
  config: PublisherConfig;
  /** The job subjects to publish on (the contract's by default). */
  names?: ExchangeNames;
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

/** Milliseconds until the earliest `next_publish_at` of a pending job (negative: due), or null. */
function nextDueQuery() {
  return sql<{ ms: number | null }>`
    SELECT (EXTRACT(EPOCH FROM (min(next_publish_at) - now())) * 1000)::float8 AS ms
    FROM recognition_job WHERE status = 'pending'`;
}

/**
 * How long to sleep before the next round outside an outage, given the milliseconds until the
 * earliest due job (`null`: none pending) and the rounds failed in a row: until that job is due,
 * at most one poll interval, and at least {@link MIN_WAKE_DELAY_MS} — or, after failed rounds, a
 * pause that doubles from {@link ROUND_RETRY_BASE_MS}. Pure.
 */
export function wakeDelayMs(msUntilDue: number | null, failures: number, pollMs: number): number {
  if (msUntilDue === null) return pollMs;
  const floor =
    failures > 0 ? Math.min(ROUND_RETRY_BASE_MS * 2 ** (failures - 1), pollMs) : MIN_WAKE_DELAY_MS;
  return Math.min(Math.max(Math.ceil(msUntilDue), floor), pollMs);
}

/** Create a publisher. Nothing runs until `start()` (or a direct `publishDue()`). */
export function createPublisher(opts: PublisherOptions): Publisher {
  const { db, metrics, config: cfg } = opts;
  const log = opts.logger.child({ loop: 'publisher' });
  const outage = createOutageWatch({ log, metrics, config: cfg, provision: opts.provision });
  const publishRound = createPublisherRound({
    db,
    js: opts.js,
    names: opts.names,
    isConnected: opts.isConnected,
    apply: opts.applyEvents ?? applyEvents,
    failures: createFailureReader({
      js: opts.js,
      jobSubjects: `${(opts.names ?? CONTRACT_NAMES).jobSubjectPrefix}>`,
      provisions: opts.provision !== undefined,
    }),
    log,
    metrics,
    config: cfg,
  });

  const inFlight = new Set<Promise<unknown>>();
  let running = false;
  let again = false;
  let looping: Promise<void> | undefined;
  let timer: NodeJS.Timeout | undefined;
  let listener: NotificationListener | undefined;
  let stopReconnectWake: (() => void) | undefined;
  let failures = 0;
  /** Resolved after the loop's next round (and when the loop stops). */
  const roundWaiters: Array<() => void> = [];
  const releaseWaiters = () => {
    for (const resolve of roundWaiters.splice(0)) resolve();
  };

  /** One round, as many jobs as the outage allows; the outage begins, goes on or ends with it. */
  async function round(): Promise<RoundResult> {
    const result = await publishRound(outage.roundLimit(cfg.PUBLISHER_BATCH_SIZE));
    outage.note(result.attempts.flatMap((a) => (a.kind === 'unavailable' ? [a.error] : [])));
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

  /** How long to sleep before the next round: until the earliest retry, at most one poll interval. */
  async function nextDelay(): Promise<number> {
    if (outage.active) return outage.pauseMs();
    try {
      const { rows } = await nextDueQuery().execute(db);
      return wakeDelayMs(rows[0]?.ms ?? null, failures, cfg.PUBLISHER_POLL_INTERVAL_MS);
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
            await outage.recover(r.provisionWanted);
            // A full batch means more may be due: go again at once (not while NATS is away).
            if (r.full && !outage.active) again = true;
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
      const connection = opts.listenConnection === undefined ? opts.pool?.options : opts.listenConnection;
      if (connection) {
        listener = await listenForNotifications({
          connection,
          channel: JOB_CREATED_CHANNEL,
          applicationName: 'recognition-core:publisher-listen',
          logger: log,
          onNotify: () => {
            if (!outage.active) wake();
          },
        });
      }
      // 2. A reconnect ends the pause of an outage at once.
      stopReconnectWake = opts.onReconnect?.(() => {
        if (outage.active) wake();
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
    isNatsAvailable: () => !outage.active,
  };
}
