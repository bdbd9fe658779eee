/**
 * One round of the outbox, in one transaction: lock due `pending` jobs (`SKIP LOCKED`, held across
 * the publish so another instance skips them), publish them all and wait for every answer, record
 * through the step what JetStream answered, commit, and only then log and count. A publish put off
 * by an outage records nothing; a database failure rolls the round back.
 */
import { sql, type Kysely, type Transaction } from 'kysely';
import { publishBackoffMs, type PublishRetryPolicy } from '../../machines/index.js';
import type { Config } from '../config.js';
import type { Database } from '../db/schema.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import type { applyEvents, StepItem, StepOutcome } from '../step/index.js';
import { publishLogFields } from '../tracing/jobSpans.js';
import {
  publishJob,
  type Attempt,
  type DecidedAttempt,
  type DueJobRow,
  type PublishJobOptions,
} from './publishJob.js';
import type { RoundFailureReader } from './publisherOutage.js';

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

/** What a round did: every attempt, the outcomes of those it recorded, and whether it was full. */
export interface RoundResult {
  attempts: Attempt[];
  recorded: Array<{ attempt: DecidedAttempt; outcome: StepOutcome }>;
  full: boolean;
  /** No stream answered on a job subject where the core provisions them: provision again. */
  provisionWanted: boolean;
}

/** The retry policies of a refused publish. */
export interface PublishPolicies {
  /** A refusal that waiting may cure: backoff up to `MAX_PUBLISH_ATTEMPTS`. */
  retry: PublishRetryPolicy;
  /** An invalid job message cannot become valid by waiting: its only attempt is its last one. */
  permanent: PublishRetryPolicy;
}

/** The retry policies of the configuration. Pure. */
export function publishPolicies(
  cfg: Pick<Config, 'MAX_PUBLISH_ATTEMPTS' | 'PUBLISH_BACKOFF_BASE_MS' | 'PUBLISH_BACKOFF_MAX_MS'>,
): PublishPolicies {
  const retry: PublishRetryPolicy = {
    maxAttempts: cfg.MAX_PUBLISH_ATTEMPTS,
    baseDelayMs: cfg.PUBLISH_BACKOFF_BASE_MS,
    maxDelayMs: cfg.PUBLISH_BACKOFF_MAX_MS,
  };
  return { retry, permanent: { ...retry, maxAttempts: 1 } };
}

/** The step's event for a publish JetStream answered. Pure. */
export function stepItemOf(
  attempt: DecidedAttempt,
  replyTimeoutMs: number,
  policies: PublishPolicies,
): StepItem {
  return {
    jobId: attempt.row.job_id,
    event:
      attempt.kind === 'published'
        ? { type: 'PUBLISHED', replyTimeoutMs }
        : {
            type: 'PUBLISH_FAILED',
            error: attempt.error,
            policy: attempt.permanent ? policies.permanent : policies.retry,
          },
  };
}

/** What {@link createPublisherRound} needs. */
export interface PublisherRoundOptions extends PublishJobOptions {
  db: Kysely<Database>;
  /** The step's `applyEvents` (or a stand-in for fault injection in tests). */
  apply: typeof applyEvents;
  /** A reader of publish failures for each round. */
  failures: () => RoundFailureReader;
  log: Logger;
  metrics?: Metrics | undefined;
  config: PublishJobOptions['config'] &
    Pick<Config, 'MAX_PUBLISH_ATTEMPTS' | 'PUBLISH_BACKOFF_BASE_MS' | 'PUBLISH_BACKOFF_MAX_MS'>;
}

/**
 * Create the round of a publisher: called with `limit`, it locks up to `limit` due jobs, publishes
 * them, records and reports their outcomes. Rejects if the database fails.
 */
export function createPublisherRound(opts: PublisherRoundOptions): (limit: number) => Promise<RoundResult> {
  const { db, apply, log, metrics, config: cfg } = opts;
  const policies = publishPolicies(cfg);

  function report(attempt: DecidedAttempt, outcome: StepOutcome): void {
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
          retry_in_ms: publishBackoffMs(attempts, policies.retry),
          error: attempt.error,
        },
        'job message refused; will retry',
      );
    }
  }

  return async function round(limit: number): Promise<RoundResult> {
    const started = performance.now();
    const failures = opts.failures();
    const { attempts, recorded } = await db.transaction().execute(async (tx: Transaction<Database>) => {
      // 1. Lock the due jobs (rows other instances hold are skipped).
      const { rows } = await duePublishQuery(limit).execute(tx);
      if (rows.length === 0) return { attempts: [], recorded: [] };
      // 2. Build, check and publish every message at once; wait for every ack or failure.
      const attempts = await Promise.all(rows.map((row) => publishJob(row, failures, opts)));
      // 3. Record the outcome of every publish JetStream answered, still holding the locks; one put
      //    off by an outage leaves its job as it is.
      const decided = attempts.filter((a): a is DecidedAttempt => a.kind !== 'unavailable');
      if (decided.length === 0) return { attempts, recorded: [] };
      const outcomes = await apply(
        tx,
        decided.map((a) => stepItemOf(a, cfg.REPLY_TIMEOUT_MS, policies)),
      );
      return { attempts, recorded: decided.map((attempt, i) => ({ attempt, outcome: outcomes[i]! })) };
      // 4. Commit (on return).
    });
    // 5. Report, only after the commit.
    if (recorded.length > 0) {
      metrics?.stepDuration.observe({ loop: 'publisher' }, (performance.now() - started) / 1000);
      metrics?.batchSize.observe({ loop: 'publisher' }, recorded.length);
    }
    for (const { attempt, outcome } of recorded) report(attempt, outcome);
    return { attempts, recorded, full: attempts.length >= limit, provisionWanted: failures.provisionWanted };
  };
}
