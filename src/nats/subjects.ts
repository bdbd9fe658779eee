/**
 * Subjects, streams and consumers of the exchange. The contract's names are the defaults and the
 * only ones an operator configures; a namespaced set gives a run of its own (the demo on servers
 * it shares) streams, subjects and an inbox consumer that no daemon on the contract's names uses.
 */

/** The names one exchange runs on: the daemon, its provisioning and a service must share one set. */
export interface ExchangeNames {
  /** Subject services publish envelopes on; the results stream holds it and the inbox filters on it. */
  readonly resultSubject: string;
  /** Stream of the envelopes. */
  readonly resultsStream: string;
  /** Stream of the job messages, holding `<jobSubjectPrefix>>`. */
  readonly jobsStream: string;
  /** A job for service `s` is published on `<jobSubjectPrefix><s>`. */
  readonly jobSubjectPrefix: string;
  /** Durable pull consumer on the results stream shared by every core instance. */
  readonly inboxConsumer: string;
}

/**
 * The contract's names. A job message's `reply_subject` is always this `resultSubject`, whatever
 * names an exchange runs on: the job schema fixes it. A service on a namespaced exchange answers
 * on that exchange's `resultSubject`, which it is given.
 */
export const CONTRACT_NAMES = Object.freeze({
  resultSubject: 'recognition.result',
  resultsStream: 'RECOGNITION_RESULTS',
  jobsStream: 'RECOGNITION_JOBS',
  jobSubjectPrefix: 'recognition.job.',
  inboxConsumer: 'core-inbox',
} as const) satisfies ExchangeNames;

/** The contract's envelope subject (`CONTRACT_NAMES.resultSubject`). */
export const RESULT_SUBJECT = CONTRACT_NAMES.resultSubject;
/** The contract's results stream (`CONTRACT_NAMES.resultsStream`). */
export const RESULTS_STREAM = CONTRACT_NAMES.resultsStream;
/** The contract's jobs stream (`CONTRACT_NAMES.jobsStream`). */
export const JOBS_STREAM = CONTRACT_NAMES.jobsStream;
/** The contract's job subject prefix (`CONTRACT_NAMES.jobSubjectPrefix`). */
export const JOB_SUBJECT_PREFIX = CONTRACT_NAMES.jobSubjectPrefix;
/** The contract's inbox consumer (`CONTRACT_NAMES.inboxConsumer`). */
export const INBOX_CONSUMER = CONTRACT_NAMES.inboxConsumer;

/**
 * The names of the demo exchange `id` (lower-case letters and digits): subjects prefixed
 * `demo_<id>.`, streams `DEMO_<ID>_`, inbox consumer `demo-<id>-inbox`. They share no subject with
 * the contract's streams (JetStream refuses two streams on one subject) nor with another id's.
 */
export function demoNames(id: string): ExchangeNames {
  if (!/^[a-z0-9]{1,32}$/.test(id))
    throw new Error(`demo exchange id must be [a-z0-9]{1,32}: ${JSON.stringify(id)}`);
  const subjects = `demo_${id}.`;
  const streams = `DEMO_${id.toUpperCase()}_`;
  return Object.freeze({
    resultSubject: `${subjects}${CONTRACT_NAMES.resultSubject}`,
    resultsStream: `${streams}${CONTRACT_NAMES.resultsStream}`,
    jobsStream: `${streams}${CONTRACT_NAMES.jobsStream}`,
    jobSubjectPrefix: `${subjects}${CONTRACT_NAMES.jobSubjectPrefix}`,
    inboxConsumer: `demo-${id}-inbox`,
  });
}

/** The subject a job for `service` is published to on the exchange `names` (the contract's by default). */
export function jobSubject(service: string, names: ExchangeNames = CONTRACT_NAMES): string {
  return `${names.jobSubjectPrefix}${service}`;
}

/** `Nats-Msg-Id` of a job message: JetStream drops a republication inside the duplicate window. */
export function jobMsgId(jobId: string, attempt: number): string {
  return `job:${jobId}:${attempt}`;
}

/**
 * The advisory JetStream sends when a message of `stream` reached a consumer's max deliveries:
 * `consumer`'s, or any consumer's unless given.
 */
export function maxDeliveriesAdvisory(
  stream: string,
  { consumer = '*' }: { consumer?: string } = {},
): string {
  return `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.${stream}.${consumer}`;
}

/**
 * The inbox prefix of service `service`'s NATS client (docs/nats-permissions.md): its replies and
 * pulled job messages arrive on `<prefix>.>`, the one inbox its user may subscribe to, so it
 * never reads another client's replies.
 */
export function serviceInboxPrefix(service: string): string {
  return `_INBOX_${service}`;
}
