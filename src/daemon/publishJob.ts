/**
 * One job's publish: the job message (docs/contract.md) built from the due row and checked against
 * the schema, sent with `Nats-Msg-Id = job:<job_id>:<attempt>` and the job's trace context, and what
 * became of it (an {@link Attempt}); the round records it. A message the schema refuses is a
 * permanent refusal; nothing is handed to a client that knows it is disconnected.
 */
import type { JetStreamClient, PubAck } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/nats-core';
import type { Config } from '../config.js';
import { checkJobMessage, type JobMessage } from '../messages/schemas.js';
import { resultKeyPrefix } from '../messages/resultObject.js';
import { jobMsgId, jobSubject, RESULT_SUBJECT, type ExchangeNames } from '../nats/subjects.js';
import { endPublishTrace, startPublishTrace, type PublishTrace } from '../tracing/jobSpans.js';
import { headerFieldsOf } from '../tracing/tracing.js';
import type { RoundFailureReader } from './publisherOutage.js';

/** A due job as the publisher's query returns it: the job, its upload and the database clock. */
export interface DueJobRow {
  job_id: string;
  file_id: string;
  attempt: number;
  target_service: string;
  publish_attempts: number;
  source_bucket: string;
  source_key: string;
  /** The job's stored W3C trace context (migration 0006): the publish continues that trace. */
  trace_parent: string | null;
  trace_state: string | null;
  /** `date_trunc('milliseconds', now())`: the same value the step reads as the event's `now`. */
  db_now: Date;
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
    result_s3_prefix: {
      bucket: opts.resultsBucket,
      key_prefix: resultKeyPrefix({ fileId: row.file_id, jobId: row.job_id }),
    },
    reply_subject: RESULT_SUBJECT,
    reply_deadline: new Date(row.db_now.getTime() + opts.replyTimeoutMs).toISOString(),
    published_at: row.db_now.toISOString(),
  };
}

/**
 * One job's publish: published (JetStream acked it), refused (an attempt spent; `permanent` when no
 * retry can help), or put off by an outage (nothing recorded).
 */
export type Attempt = { row: DueJobRow; msgId: string; subject: string; trace?: PublishTrace | undefined } & (
  | { kind: 'published'; ack: PubAck }
  | { kind: 'rejected'; error: string; permanent: boolean }
  | { kind: 'unavailable'; error: string }
);

/** A publish JetStream answered: its outcome is recorded. */
export type DecidedAttempt = Attempt & { kind: 'published' | 'rejected' };

/** What {@link publishJob} needs. */
export interface PublishJobOptions {
  js: JetStreamClient;
  /** The job subjects to publish on (the contract's by default). */
  names?: ExchangeNames | undefined;
  /** Whether the NATS connection is up; without it, every publish is tried. */
  isConnected?: (() => boolean) | undefined;
  config: Pick<Config, 'RESULTS_BUCKET' | 'REPLY_TIMEOUT_MS' | 'PUBLISH_TIMEOUT_MS'>;
}

/** NATS headers holding `fields`. */
function withHeaders(fields: { traceparent: string; tracestate?: string | null }) {
  const h = natsHeaders();
  for (const [k, v] of Object.entries(headerFieldsOf(fields))) h.set(k, v);
  return h;
}

/** Build, check and publish the message of `row`; resolves with what became of it. */
export async function publishJob(
  row: DueJobRow,
  failures: RoundFailureReader,
  opts: PublishJobOptions,
): Promise<Attempt> {
  const { config: cfg } = opts;
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
    const ack = await opts.js.publish(subject, JSON.stringify(message), {
      msgID: msgId,
      timeout: cfg.PUBLISH_TIMEOUT_MS,
      ...(trace?.headers ? { headers: withHeaders(trace.headers) } : {}),
    });
    attempt = { row, msgId, subject, trace, kind: 'published', ack };
  } catch (err) {
    const verdict = await failures.read(err, subject);
    attempt =
      verdict.kind === 'rejected'
        ? { row, msgId, subject, trace, kind: 'rejected', permanent: false, error: verdict.error }
        : { row, msgId, subject, trace, kind: 'unavailable', error: verdict.error };
  }
  endPublishTrace(
    trace,
    attempt.kind === 'published'
      ? { ok: true, streamSeq: attempt.ack.seq, duplicate: attempt.ack.duplicate }
      : { ok: false, error: attempt.error },
  );
  return attempt;
}
