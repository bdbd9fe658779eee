/**
 * A test client that talks to the core exactly as a recognition service would: JetStream publish
 * to `recognition.result` with a `Nats-Msg-Id` header and the schema's fields. Tests read like the
 * rules of docs/lifecycle.md: `svc.ack(job)`, `svc.done(job)`, `svc.error(job, code, message)`.
 */
import { headers as natsHeaders, type NatsConnection } from '@nats-io/nats-core';
import { jetstream, type PubAck } from '@nats-io/jetstream';
import { RESULT_SUBJECT } from '../../src/nats/subjects.js';

export interface JobRef {
  jobId: string;
  fileId: string;
  attempt?: number;
}

const SERVICE = { name: 'tabular-parser', version: '2.3.1' };

export function createServiceClient(nc: NatsConnection) {
  const js = jetstream(nc);
  const enc = new TextEncoder();

  /** Publish raw bytes with optional headers (for hostile input). */
  async function raw(data: Uint8Array | string, hdrs: Record<string, string> = {}): Promise<PubAck> {
    const h = natsHeaders();
    for (const [k, v] of Object.entries(hdrs)) h.set(k, v);
    const msgID = hdrs['Nats-Msg-Id'];
    return js.publish(RESULT_SUBJECT, typeof data === 'string' ? enc.encode(data) : data, {
      headers: h,
      ...(msgID ? { msgID } : {}),
    });
  }

  /** Publish an envelope object with a msg id (null: no header). */
  function envelope(body: Record<string, unknown>, msgId: string | null): Promise<PubAck> {
    return raw(JSON.stringify(body), msgId ? { 'Nats-Msg-Id': msgId } : {});
  }

  return {
    raw,
    envelope,
    ack: (j: JobRef) =>
      envelope(
        { job_id: j.jobId, status: 'processing', service: SERVICE, sent_at: new Date().toISOString() },
        `ack:${j.jobId}:${j.attempt ?? 1}`,
      ),
    done: (j: JobRef, opts: { msgId?: string; status?: 'done' | 'needs_check' } = {}) =>
      envelope(
        {
          job_id: j.jobId,
          status: opts.status ?? 'done',
          service: SERVICE,
          result_s3: { bucket: 'arm-ka', key: `results/${j.fileId}/${j.jobId}/result.json` },
          result_schema_version: '1.0',
          metrics: { pages: 2, duration_ms: 420 },
          sent_at: new Date().toISOString(),
        },
        opts.msgId ?? `result:${j.jobId}:${j.attempt ?? 1}`,
      ),
    error: (j: JobRef, code: string, message: string) =>
      envelope(
        { job_id: j.jobId, status: 'error', service: SERVICE, error: { code, message } },
        `result:${j.jobId}:${j.attempt ?? 1}`,
      ),
  };
}
export type ServiceClient = ReturnType<typeof createServiceClient>;
