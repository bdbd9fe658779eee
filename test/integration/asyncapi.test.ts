/**
 * `schemas/asyncapi.yaml` against a real nats-server: the streams and consumers the core and the
 * reference service create are the ones its JetStream extensions describe, and the reference
 * service answers the document's job example with envelopes that its messages describe.
 */
import { jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { headers as natsHeaders, nanos, type NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { decodeEnvelope } from '../../src/messages/decodeEnvelope.js';
import { SCHEMA_FILES } from '../../src/messages/schemas.js';
import { provisionStreams } from '../../src/nats/provision.js';
import { INBOX_CONSUMER, RESULTS_STREAM, jobSubject } from '../../src/nats/subjects.js';
import {
  TABULAR_PARSER,
  startTabularParser,
  type TabularParserService,
} from '../../src/reference/tabularParserService.js';
import { messageExamples, messageValidators, readAsyncApi, readSchemaFiles } from '../helpers/asyncapi.js';
import { createLogSink } from '../helpers/logSink.js';
import { startNatsServer, type NatsServerHandle } from '../../src/localServers/natsServer.js';

type Facts = Record<string, unknown>;
const doc = readAsyncApi() as {
  channels: Record<string, { 'x-jetstream-stream': Facts }>;
  operations: Record<string, { bindings: { nats: { 'x-jetstream-consumer': Facts } } }>;
};
const cfg = loadConfig({});

let server: NatsServerHandle;
let nc: NatsConnection;
let jsm: JetStreamManager;
let service: TabularParserService;

beforeAll(async () => {
  server = await startNatsServer();
  nc = await connect({ servers: server.url });
  jsm = await jetstreamManager(nc);
  // What the daemon does at start with its default configuration.
  await provisionStreams(jsm, {
    duplicateWindowMs: cfg.NATS_DUPLICATE_WINDOW_MS,
    replicas: cfg.NATS_STREAM_REPLICAS,
    ackWaitMs: cfg.INBOX_ACK_WAIT_MS,
    maxAckPending: cfg.INBOX_MAX_ACK_PENDING,
  });
  service = await startTabularParser({
    nc,
    seed: 1,
    weights: { done: 1, needs_check: 0, error: 0, silent: 0 },
    replyDelayMs: 20,
    logger: createLogSink({ level: 'warn' }).logger,
  });
});
afterAll(async () => {
  await service?.stop();
  await nc?.close();
  await server?.cleanup();
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
    const js = jetstream(nc);
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
