/**
 * A recognition service written without the kit, straight on the NATS client, that breaks the
 * contract in one way chosen by its first argument; the conformance test runs it to see that
 * the check names what is broken. Otherwise it keeps the contract: it answers each job with an
 * ack and a `done` result, answers an invalid job message INVALID_JOB_MESSAGE and terminates it,
 * and stops on SIGTERM after the job in hand.
 *
 *   never-acks         sends no `processing` ack, only the result
 *   random-ids         a fresh random `Nats-Msg-Id` on every envelope
 *   drops-traceparent  no `traceparent` on its envelopes
 *   schema-invalid     a result whose `result_s3` has a field the schema does not allow
 *   other-service      `service.name` of another service
 */
import { randomUUID } from 'node:crypto';
import { jetstream } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';

const MODES = ['never-acks', 'random-ids', 'drops-traceparent', 'schema-invalid', 'other-service'];
const mode = process.argv[2] ?? '';
const service = process.argv[3] ?? 'tabular-parser';
if (!MODES.includes(mode)) {
  process.stderr.write(`brokenService: mode must be one of ${MODES.join(', ')}\n`);
  process.exit(2);
}
const env = process.env;
const stream = env.RECOGNITION_JOBS_STREAM ?? 'RECOGNITION_JOBS';
const resultSubject = env.RECOGNITION_RESULT_SUBJECT ?? 'recognition.result';

const nc = await connect({ servers: env.NATS_URL ?? '127.0.0.1:4222' });
const js = jetstream(nc);
const consumer = await js.consumers.get(stream, service);
let stopping = false;
process.on('SIGTERM', () => (stopping = true));

async function send(jobId: string, kind: 'ack' | 'result', body: object, traceparent: string) {
  const h = natsHeaders();
  if (traceparent && mode !== 'drops-traceparent') h.set('traceparent', traceparent);
  const msgID = mode === 'random-ids' ? randomUUID() : `${kind}:${jobId}:1`;
  const name = mode === 'other-service' ? `${service}-impostor` : service;
  const envelope = { job_id: jobId, service: { name, version: '0.0.1-broken' }, ...body };
  await js.publish(resultSubject, JSON.stringify(envelope), { msgID, headers: h });
}

while (!stopping) {
  const batch = await consumer.fetch({ max_messages: 1, expires: 1_000 });
  for await (const msg of batch) {
    let job: Record<string, unknown> | undefined;
    try {
      job = msg.json<Record<string, unknown>>();
    } catch {
      msg.term();
      continue;
    }
    const jobId = String(job.job_id);
    const traceparent = msg.headers?.get('traceparent') ?? '';
    if (typeof job.source_s3 !== 'object' || job.source_s3 === null) {
      const error = { code: 'INVALID_JOB_MESSAGE', message: 'source_s3 is missing' };
      await send(jobId, 'result', { status: 'error', error }, traceparent);
      msg.term();
      continue;
    }
    if (mode !== 'never-acks') await send(jobId, 'ack', { status: 'processing' }, traceparent);
    await new Promise((r) => setTimeout(r, 300));
    const prefix = job.result_s3_prefix as { bucket: string; key_prefix: string };
    const result_s3 = { bucket: prefix.bucket, key: `${prefix.key_prefix}result.json` };
    await send(
      jobId,
      'result',
      { status: 'done', result_s3: mode === 'schema-invalid' ? { ...result_s3, etag: 'x' } : result_s3 },
      traceparent,
    );
    msg.ack();
  }
}
await nc.drain();
