/**
 * `schemas/asyncapi.yaml` against a real nats-server: the streams and consumers the core and the
 * reference service create are the ones its JetStream extensions describe, and the reference
 * service answers the document's job example with envelopes that its messages describe, reads job
 * messages tolerantly and answers an invalid one as the contract says.
 */
import { randomUUID } from 'node:crypto';
import { jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { headers as natsHeaders, nanos } from '@nats-io/nats-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { decodeEnvelope } from '../../src/messages/decodeEnvelope.js';
import { SCHEMA_FILES } from '../../src/messages/schemas.js';
import { provisionStreams } from '../../src/nats/provision.js';
import { INBOX_CONSUMER, JOBS_STREAM, RESULTS_STREAM, jobSubject } from '../../src/nats/subjects.js';
import { INVALID_JOB_MESSAGE } from '../../service-kit/src/serve.js';
import {
  TABULAR_PARSER,
  startTabularParser,
  type TabularParserService,
} from '../../workshop/reference/tabularParserService.js';
import { messageExamples, messageValidators, readAsyncApi, readSchemaFiles } from '../helpers/asyncapi.js';
import { createLogSink } from '../helpers/logSink.js';
import { useHarness } from '../helpers/harness.js';

type Facts = Record<string, unknown>;
const doc = readAsyncApi() as {
  channels: Record<string, { 'x-jetstream-stream': Facts }>;
  operations: Record<string, { bindings: { nats: { 'x-jetstream-consumer': Facts } } }>;
};
const cfg = loadConfig({});

const t = useHarness({ nats: true, client: true });
let jsm: JetStreamManager;
let service: TabularParserService;

beforeAll(async () => {
  jsm = await jetstreamManager(t.nc);
  // What the daemon does at start with its default configuration.
  await provisionStreams(jsm, {
    duplicateWindowMs: cfg.NATS_DUPLICATE_WINDOW_MS,
    replicas: cfg.NATS_STREAM_REPLICAS,
    ackWaitMs: cfg.INBOX_ACK_WAIT_MS,
    maxAckPending: cfg.INBOX_MAX_ACK_PENDING,
  });
  service = await startTabularParser({
    nc: t.nc,
    seed: 1,
    weights: { done: 1, needs_check: 0, error: 0, silent: 0 },
    replyDelayMs: 20,
    logger: createLogSink({ level: 'warn' }).logger,
  });
});
afterAll(async () => {
  await service?.stop();
});

/** `{service}` in a documented name, for the reference service. */
const forService = (value: unknown) => String(value).replaceAll('{service}', TABULAR_PARSER);

describe('the JetStream extensions of schemas/asyncapi.yaml are what the server holds', () => {
  it.each(['recognitionJob', 'recognitionResult'])('x-jetstream-stream of %s', async (channel) => {
    const facts = doc.channels[channel]!['x-jetstream-stream'];
    const { config } = await jsm.streams.info(String(facts['name']));
    expect(config.subjects).toEqual(facts['subjects']);
    expect(config.storage).toBe(facts['storage']);
    expect(config.retention).toBe(facts['retention']);
    expect(config.duplicate_window).toBe(nanos(Number(facts['duplicate_window_ms'])));
    expect(config.max_age).toBe(nanos(Number(facts['max_age_ms'])));
    expect(config.num_replicas).toBe(facts['num_replicas']);
  });

  it.each([
    ['receiveEnvelope', 'the core'],
    ['receiveJob', 'the reference service'],
  ])('x-jetstream-consumer of %s (created by %s)', async (operation) => {
    const facts = doc.operations[operation]!.bindings.nats['x-jetstream-consumer'];
    const durable = forService(facts['durable_name']);
    if (operation === 'receiveEnvelope') expect(durable).toBe(INBOX_CONSUMER);
    const { config } = await jsm.consumers.info(String(facts['stream']), durable);
    expect(config.durable_name).toBe(durable);
    expect(config.filter_subject).toBe(forService(facts['filter_subject']));
    expect(config.ack_policy).toBe(facts['ack_policy']);
    expect(config.deliver_policy).toBe(facts['deliver_policy']);
    expect(config.ack_wait).toBe(nanos(Number(facts['ack_wait_ms'])));
    expect(config.max_deliver).toBe(facts['max_deliver']);
    if ('max_ack_pending' in facts) expect(config.max_ack_pending).toBe(facts['max_ack_pending']);
  });
});

describe('the reference service and the document agree', () => {
  it('answers the job example, sent as documented, with an ack and a result its messages describe', async () => {
    const job = messageExamples(doc as never).find((e) => e.message === 'job')!;
    const js = jetstream(t.nc);
    const h = natsHeaders();
    for (const [k, v] of Object.entries(job.headers ?? {})) h.set(k, v);
    await js.publish(jobSubject(TABULAR_PARSER), JSON.stringify(job.payload), {
      headers: h,
      msgID: job.headers!['Nats-Msg-Id']!,
    });

    // Read RECOGNITION_RESULTS with an ordered consumer of its own (core-inbox stays untouched).
    const consumer = await js.consumers.get(RESULTS_STREAM);
    const received: Array<{ msgId: string | undefined; headers: Record<string, string>; data: Uint8Array }> =
      [];
    const deadline = Date.now() + 30_000;
    while (received.length < 2 && Date.now() < deadline) {
      const batch = await consumer.fetch({ max_messages: 2 - received.length, expires: 2_000 });
      for await (const m of batch) {
        const headers: Record<string, string> = {};
        for (const k of m.headers?.keys() ?? []) headers[k] = m.headers!.get(k);
        received.push({ msgId: headers['Nats-Msg-Id'], headers, data: m.data });
      }
    }
    expect(received).toHaveLength(2);

    const validators = messageValidators(doc as never, readSchemaFiles(Object.keys(SCHEMA_FILES)));
    const byStatus = Object.fromEntries(
      Object.entries(validators).flatMap(([key, v]) => (v.status ? [[v.status, { key, ...v }]] : [])),
    );
    const statuses: string[] = [];
    for (const envelope of received) {
      const decoded = decodeEnvelope({
        data: envelope.data,
        msgId: envelope.msgId,
        maxBytes: cfg.MAX_ENVELOPE_BYTES,
      });
      expect(decoded.ok).toBe(true);
      if (!decoded.ok) continue;
      statuses.push(decoded.envelope.status);
      const message = byStatus[decoded.envelope.status]!;
      expect(message.payload(JSON.parse(new TextDecoder().decode(envelope.data)))).toBe(true);
      expect(message.headers(envelope.headers), JSON.stringify(message.headers.errors)).toBe(true);
      const prefix = decoded.envelope.status === 'processing' ? 'ack' : 'result';
      expect(envelope.msgId).toBe(
        `${prefix}:${String(job.payload['job_id'])}:${String(job.payload['attempt'])}`,
      );
      expect(decoded.envelope.service.name).toBe(TABULAR_PARSER);
    }
    expect(statuses).toEqual(['processing', 'done']);
  });
});

/** The envelopes on RECOGNITION_RESULTS for `jobId`, once `count` of them are there (read-only). */
async function envelopesFor(jobId: string, count: number) {
  const js = jetstream(t.nc);
  const deadline = Date.now() + 30_000;
  for (;;) {
    const found: Array<{ msgId: string | undefined; body: Record<string, unknown> }> = [];
    const consumer = await js.consumers.get(RESULTS_STREAM);
    const { num_pending: pending } = await consumer.info();
    if (pending > 0) {
      const batch = await consumer.fetch({ max_messages: pending, expires: 2_000 });
      for await (const m of batch) {
        const body = m.json<Record<string, unknown>>();
        if (body['job_id'] === jobId) found.push({ msgId: m.headers?.get('Nats-Msg-Id'), body });
        if (m.info.pending === 0) break;
      }
    }
    if (found.length >= count || Date.now() > deadline) return found;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Publish a job message as the core does: on the service's subject, with its Nats-Msg-Id. */
async function publishJob(payload: unknown, msgId: string): Promise<void> {
  await jetstream(t.nc).publish(jobSubject(TABULAR_PARSER), JSON.stringify(payload), { msgID: msgId });
}

/** The reference service's durable: nothing left to ack once every job message is settled. */
async function jobsSettled(): Promise<boolean> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const info = await jsm.consumers.info(JOBS_STREAM, TABULAR_PARSER);
    if (info.num_pending === 0 && info.num_ack_pending === 0) return true;
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('a service reads job messages tolerantly (docs/contract.md, "Evolving the contract")', () => {
  const example = () =>
    structuredClone(messageExamples(doc as never).find((e) => e.message === 'job')!.payload) as Record<
      string,
      unknown
    >;

  it('a job message with fields the service does not know is answered as usual', async () => {
    const jobId = randomUUID();
    const payload = {
      ...example(),
      job_id: jobId,
      priority: 'high',
      routing: { tenant: 'acme' },
      source_s3: { ...(example()['source_s3'] as object), version_id: 'v7' },
    };
    await publishJob(payload, `job:${jobId}:1`);
    const envelopes = await envelopesFor(jobId, 2);
    expect(envelopes.map((e) => [e.body['status'], e.msgId])).toEqual([
      ['processing', `ack:${jobId}:1`],
      ['done', `result:${jobId}:1`],
    ]);
    expect(await jobsSettled()).toBe(true);
  });

  it('an invalid job message naming its job: an error result INVALID_JOB_MESSAGE, then terminated', async () => {
    const jobId = randomUUID();
    const before = service.stats().invalid;
    await publishJob(
      { ...example(), job_id: jobId, attempt: 3, source_s3: 'not an object' },
      `job:${jobId}:3`,
    );
    const [answer, ...more] = await envelopesFor(jobId, 1);
    expect(more).toEqual([]);
    expect(answer!.msgId).toBe(`result:${jobId}:3`);
    expect(answer!.body).toMatchObject({
      job_id: jobId,
      status: 'error',
      service: { name: TABULAR_PARSER },
      error: { code: INVALID_JOB_MESSAGE, message: expect.stringContaining('/source_s3') },
    });
    const decoded = decodeEnvelope({
      data: new TextEncoder().encode(JSON.stringify(answer!.body)),
      msgId: answer!.msgId,
      maxBytes: cfg.MAX_ENVELOPE_BYTES,
    });
    expect(decoded.ok).toBe(true);
    expect(await jobsSettled()).toBe(true);
    expect(service.stats().invalid).toBe(before + 1);
  });

  it('an invalid job message naming no job (not JSON): terminated, nothing published', async () => {
    const before = (await jsm.streams.info(RESULTS_STREAM)).state.messages;
    const invalid = service.stats().invalid;
    await jetstream(t.nc).publish(jobSubject(TABULAR_PARSER), 'this is {not json', {
      msgID: `job:${randomUUID()}:1`,
    });
    expect(await jobsSettled()).toBe(true);
    expect(service.stats().invalid).toBe(invalid + 1);
    expect((await jsm.streams.info(RESULTS_STREAM)).state.messages).toBe(before);
  });
});
