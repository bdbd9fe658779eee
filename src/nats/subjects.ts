/** Subjects, streams and consumers of the exchange (SPEC §5). Names are contracts. */
export const RESULT_SUBJECT = 'recognition.result';
export const RESULTS_STREAM = 'RECOGNITION_RESULTS';
export const JOBS_STREAM = 'RECOGNITION_JOBS';
export const JOB_SUBJECT_PREFIX = 'recognition.job.';
export const INBOX_CONSUMER = 'core-inbox';

/** The subject a job for `service` is published to. */
export function jobSubject(service: string): string {
  return `${JOB_SUBJECT_PREFIX}${service}`;
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
