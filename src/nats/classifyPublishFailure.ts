/**
 * Why a JetStream publish failed, as the publisher must act on it: an outage of NATS or JetStream
 * (wait; the job's attempts are not spent) or a refusal of this one message (an attempt spent;
 * `dlq` after `MAX_PUBLISH_ATTEMPTS`). docs/reliability.md lists the errors and their kinds.
 */
import { JetStreamApiError } from '@nats-io/jetstream';
import {
  ClosedConnectionError,
  DrainingConnectionError,
  InvalidArgumentError,
  PermissionViolationError,
  RequestError,
  TimeoutError,
} from '@nats-io/nats-core';

/**
 * A failed publish, classified:
 * - `unavailable`: NATS or JetStream cannot take any message now (disconnected, no ack in time,
 *   JetStream or its cluster unavailable, storage failing). Waiting is the remedy.
 * - `rejected`: JetStream or the client refuses this message (too large, a stream limit, a wrong
 *   expectation, no permission for its subject). No wait makes it deliverable.
 * - `no_responders`: nothing answered on the subject (status 503). Either no stream binds the
 *   subject, or the stream that does has no leader or is being re-created; the caller tells them
 *   apart (it knows whether the core provisions the streams and can ask JetStream).
 */
export type PublishFailure =
  | { kind: 'unavailable'; reason: string }
  | { kind: 'rejected'; reason: string }
  | { kind: 'no_responders'; reason: string };

/**
 * JetStream API error codes (`err_code`) that say JetStream as a whole cannot store messages now:
 * the system or its cluster is unavailable or without a leader, JetStream is off for the account,
 * the server is short of storage or memory. None of them is about the message.
 */
const UNAVAILABLE_API_CODES: ReadonlySet<number> = new Set([
  10004, // incomplete results
  10007, // JetStream cluster not assigned to this server
  10008, // JetStream system temporarily unavailable
  10009, // JetStream cluster can not handle request (no leader)
  10023, // insufficient resources
  10028, // insufficient memory resources available
  10039, // JetStream not enabled for account
  10041, // RAFT error
  10047, // insufficient storage resources available
  10076, // JetStream not enabled
]);

/** `err_code` of "stream store failed": a stream limit (rejection) or a storage failure (outage). */
const STORE_FAILED = 10077;
/** The store's own messages for a limit of the stream (with the discard policy `new`). */
const STREAM_LIMIT = /^maximum (messages|bytes|messages per subject) exceeded$/i;

function describe(err: unknown): string {
  if (err instanceof Error) return `${err.name}: ${err.message}`;
  return String(err);
}

/**
 * Classify what `JetStreamClient.publish` threw (@nats-io/jetstream 3.x). Pure.
 *
 * Outages: `TimeoutError` (no ack within the publish timeout: a server frozen, restarting, or a
 * stream without leader), `RequestError`s of the connection (disconnected, cancelled),
 * `ClosedConnectionError` and `DrainingConnectionError` (the daemon is stopping), and
 * `JetStreamApiError`s whose code is in {@link UNAVAILABLE_API_CODES}, or 10077 with a storage
 * failure.
 * Rejections: `InvalidArgumentError` (the message is over the server's `max_payload`),
 * `PermissionViolationError` (the connection may not publish on the subject), every other
 * `JetStreamApiError` (10054 over the stream's `max_msg_size`, 10060 expected stream does not
 * match, 10077 `maximum … exceeded` of a stream that discards new messages, 10002 account limits,
 * …), `JetStreamError` (an answer that is no JetStream ack) and anything unknown, as before.
 * `no_responders`: the client's `JetStreamNotEnabled` caused by a 503 (`jetstream is not enabled`
 * is its name for "no stream took the subject").
 */
export function classifyPublishFailure(err: unknown): PublishFailure {
  const reason = describe(err);
  if (err instanceof TimeoutError) return { kind: 'unavailable', reason };
  if (err instanceof ClosedConnectionError || err instanceof DrainingConnectionError)
    return { kind: 'unavailable', reason };
  if (err instanceof InvalidArgumentError || err instanceof PermissionViolationError)
    return { kind: 'rejected', reason };
  if (err instanceof RequestError) {
    if (err.isNoResponders()) return { kind: 'no_responders', reason };
    if (err.cause instanceof PermissionViolationError) return { kind: 'rejected', reason };
    return { kind: 'unavailable', reason };
  }
  if (err instanceof JetStreamApiError) {
    if (UNAVAILABLE_API_CODES.has(err.code)) return { kind: 'unavailable', reason };
    if (err.code === STORE_FAILED && !STREAM_LIMIT.test(err.message)) return { kind: 'unavailable', reason };
    return { kind: 'rejected', reason };
  }
  // The client names a 503 on a publish `JetStreamNotEnabled` (not exported); its cause tells.
  if (err instanceof Error && err.name === 'JetStreamNotEnabled') {
    if (err.cause instanceof RequestError && err.cause.isNoResponders())
      return { kind: 'no_responders', reason };
    return { kind: 'unavailable', reason };
  }
  // A `JetStreamError` (an answer that is no JetStream ack) and anything unknown count, as before.
  return { kind: 'rejected', reason };
}
