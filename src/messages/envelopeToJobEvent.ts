/**
 * A decoded result envelope as the machine event it is for its job: the one translation from the
 * message contract to the machine's vocabulary, used by the inbox and by scenario runs alike.
 */
import type { StepItem } from '../../machines/index.js';
import type { ResultEnvelope } from './schemas.js';

/** The machine event of a valid envelope; `msgId` is its `Nats-Msg-Id` (pure). */
export function envelopeToJobEvent(envelope: ResultEnvelope, msgId: string | null): StepItem {
  const service = { name: envelope.service.name, version: envelope.service.version };
  if (envelope.status === 'processing') {
    return { jobId: envelope.job_id, event: { type: 'ENVELOPE_PROCESSING', msgId, service } };
  }
  return {
    jobId: envelope.job_id,
    event: {
      type: 'ENVELOPE_RESULT',
      msgId: msgId!,
      status: envelope.status,
      service,
      resultS3:
        'result_s3' in envelope && envelope.result_s3
          ? { bucket: envelope.result_s3.bucket, key: envelope.result_s3.key }
          : undefined,
      resultSchemaVersion: envelope.result_schema_version,
      metrics: envelope.metrics as Record<string, unknown> | undefined,
      error:
        'error' in envelope && envelope.error
          ? { code: envelope.error.code, message: envelope.error.message }
          : undefined,
    },
  };
}

/** The `details` of a `SERVICE_MISMATCH` quarantine row: both names, and a sentence naming them. */
export interface ServiceMismatchDetails {
  /** The job's `target_service`: the only service whose envelopes the job takes. */
  expected: string;
  /** The envelope's `service.name`. */
  got: string;
  message: string;
}

/**
 * The quarantine details of an envelope whose `service.name` (`got`) is not its job's
 * `target_service` (`expected`); the inbox and scenario runs write the same (pure).
 */
export function serviceMismatchDetails(expected: string, got: string): ServiceMismatchDetails {
  return {
    expected,
    got,
    message: `service.name ${JSON.stringify(got)} is not the job's target_service ${JSON.stringify(expected)}`,
  };
}
