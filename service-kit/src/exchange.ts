/**
 * Names and ids of the exchange as a service sees it: where its jobs come from and where its
 * envelopes go, the `Nats-Msg-Id` of each envelope, and where its result file belongs.
 */
import type { JobMessage } from './generated/messages.js';

/** Where a service reads its jobs and sends its envelopes. */
export interface Exchange {
  /** Stream holding the job messages. */
  readonly jobsStream: string;
  /** A job for service `s` is on `<jobSubjectPrefix><s>`. */
  readonly jobSubjectPrefix: string;
  /** Subject of the envelopes. */
  readonly resultSubject: string;
}

/** The contract's exchange: `RECOGNITION_JOBS`, `recognition.job.<service>`, `recognition.result`. */
export const CONTRACT_EXCHANGE: Exchange = Object.freeze({
  jobsStream: 'RECOGNITION_JOBS',
  jobSubjectPrefix: 'recognition.job.',
  resultSubject: 'recognition.result',
});

/**
 * Environment variables that point a service at another exchange than the contract's (the
 * conformance check runs a service on a private one, so it never touches the core's streams).
 * Unset, the contract's names hold.
 */
export const EXCHANGE_ENV = Object.freeze({
  jobsStream: 'RECOGNITION_JOBS_STREAM',
  jobSubjectPrefix: 'RECOGNITION_JOB_SUBJECT_PREFIX',
  resultSubject: 'RECOGNITION_RESULT_SUBJECT',
});

/** The exchange the environment names, field by field over the contract's. Pure. */
export function exchangeFromEnv(env: Readonly<Record<string, string | undefined>>): Exchange {
  const pick = (k: keyof Exchange) => env[EXCHANGE_ENV[k]] || CONTRACT_EXCHANGE[k];
  return Object.freeze({
    jobsStream: pick('jobsStream'),
    jobSubjectPrefix: pick('jobSubjectPrefix'),
    resultSubject: pick('resultSubject'),
  });
}

/** The subject a service's jobs arrive on. */
export function jobSubjectOf(service: string, exchange: Exchange = CONTRACT_EXCHANGE): string {
  return `${exchange.jobSubjectPrefix}${service}`;
}

/**
 * `Nats-Msg-Id` of an envelope: derived from the job, never from the moment, so that a job
 * handled again after a redelivery or a crash sends the same ids, which JetStream and the core
 * drop as duplicates.
 */
export function envelopeMsgId(kind: 'ack' | 'result', jobId: string, attempt: number): string {
  return `${kind}:${jobId}:${attempt}`;
}

/** A service's name: the subject suffix and durable it uses, `service.name` of its envelopes. */
export const SERVICE_NAME_PATTERN = /^[A-Za-z0-9_-]{1,200}$/;

/** An object in S3. */
export interface S3Ref {
  bucket: string;
  key: string;
}

/**
 * Where a result file named `name` belongs: the job's `result_s3_prefix` bucket, and its
 * `key_prefix` (`results/<file_id>/<job_id>/`) followed by `name`. The core accepts a `result_s3`
 * only there. `name` is a relative key: non-empty, no leading `/`, no `.` or `..` segment.
 */
export function resultKey(job: Pick<JobMessage, 'result_s3_prefix'>, name: string): S3Ref {
  const segments = name.split('/');
  if (!name || name.startsWith('/') || segments.some((s) => s === '.' || s === '..' || s === ''))
    throw new Error(
      `result file name must be a relative key without empty, . or .. segments: ${JSON.stringify(name)}`,
    );
  const prefix = job.result_s3_prefix.key_prefix;
  return {
    bucket: job.result_s3_prefix.bucket,
    key: `${prefix.endsWith('/') ? prefix : `${prefix}/`}${name}`,
  };
}

/** The `key_prefix` the core gives a job: `results/<file_id>/<job_id>/`. */
export function expectedResultPrefix(job: Pick<JobMessage, 'file_id' | 'job_id'>): string {
  return `results/${job.file_id}/${job.job_id}/`;
}
