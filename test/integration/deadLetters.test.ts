/**
 * Dead letters against a real nats-server and PostgreSQL: a service consumer that takes the job
 * message and never acks it (max_deliver 2) makes JetStream send its max-deliveries advisory; the
 * job ends `dlq` with `MAX_DELIVERIES` and its file `ERROR`, handled once across instances. An
 * advisory its consumer does not bear out (another stream, a consumer that does not exist, that
 * gives up later, that has not reached the message or reads another subject) changes nothing.
 */
import { randomUUID } from 'node:crypto';
import {
  AckPolicy,
  DeliverPolicy,
  jetstream,
  jetstreamManager,
  type JetStreamManager,
} from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-node';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { openDb } from '../../src/db/database.js';
import { addFile, createJob } from '../../src/db/jobs.js';
import { createDeadLetters, type DeadLetters } from '../../src/daemon/deadLetters.js';
import { createPublisher } from '../../src/daemon/publisher.js';
import { createMetrics } from '../../src/metrics.js';
import { provisionStreams } from '../../src/nats/provision.js';
import { JOBS_STREAM } from '../../src/nats/subjects.js';
import { startTracingSdk } from '../../src/tracing/sdk.js';
import { loadAll } from '../helpers/fixtures.js';
import { createLogSink, type LogSink } from '../helpers/logSink.js';
import { serverUrl } from '../helpers/pgUrls.js';
import { startTcpProxy } from '../helpers/tcpProxy.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true, nats: true });
let jsm: JetStreamManager;

beforeAll(async () => {
  jsm = await jetstreamManager(await t.connect());
  await provisionStreams(jsm, {
    duplicateWindowMs: 120_000,
    replicas: 1,
    ackWaitMs: 30_000,
    maxAckPending: 1000,
  });
});

const running: DeadLetters[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((d) => d.stop()));
});

async function startDeadLetters() {
  const logs = createLogSink();
  const metrics = createMetrics({}, { defaultMetrics: false });
  const deadLetters = createDeadLetters({
    db: t.db,
    nc: await t.connect(),
    logger: logs.logger,
    metrics,
  });
  running.push(deadLetters);
  await deadLetters.start();
  return { deadLetters, logs, metrics };
}

/** Create a job and publish it with the real publisher; returns its ids and stream sequence. */
async function publishedJob() {
  const file = await addFile(t.db, {
    bucket: 'arm-ka',
    key: `uploads/${randomUUID()}.xlsx`,
    name: 'report.xlsx',
  });
  const job = await createJob(t.db, { fileId: file.id, targetService: 'tabular-parser' });
  const logs = createLogSink();
  const publisher = createPublisher({
    db: t.db,
    js: jetstream(await t.connect()),
    logger: logs.logger,
    config: loadConfig({}),
  });
  expect(await publisher.publishDue()).toBe(1);
  const line = logs.lines.find((l) => l.job_id === job.id && l.event === 'PUBLISHED');
  return { jobId: job.id, fileId: file.id, seq: line!.stream_seq as number };
}

let consumers = 0;
/**
 * A durable consumer of the service's subject, with `maxDeliver`, that has delivered the message
 * at `seq` (acked, so JetStream never announces it): what a real advisory's consumer looks like.
 * Returns its name.
 */
async function deliveredBy(seq: number, maxDeliver: number): Promise<string> {
  const name = `dl-${++consumers}`;
  await jsm.consumers.add(JOBS_STREAM, {
    durable_name: name,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: seq,
    filter_subject: 'recognition.job.tabular-parser',
    max_deliver: maxDeliver,
  });
  const consumer = await jetstream(await t.connect()).consumers.get(JOBS_STREAM, name);
  const m = await consumer.next({ expires: 5_000 });
  expect(m?.seq).toBe(seq);
  await m!.ackAck();
  return name;
}

const handled = (logs: LogSink, jobId: string) =>
  logs.lines.filter((l) => l.job_id === jobId && l.event === 'DELIVERY_EXHAUSTED');

describe('max-deliveries advisory', () => {
  it('a consumer that never acks (max_deliver 2): the job ends dlq with MAX_DELIVERIES, file ERROR, handled by one instance', async () => {
    // Two core instances in the queue group.
    const a = await startDeadLetters();
    const b = await startDeadLetters();

    // The "service": a durable pull consumer on its subject that takes every message and never acks.
    await jsm.consumers.add(JOBS_STREAM, {
      durable_name: 'tabular-parser',
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      filter_subject: 'recognition.job.tabular-parser',
      max_deliver: 2,
      ack_wait: nanos(1_000),
    });
    const consumer = await jetstream(await t.connect()).consumers.get(JOBS_STREAM, 'tabular-parser');
    const deliveries: number[] = [];
    const messages = await consumer.consume({ max_messages: 10 });
    void (async () => {
      for await (const m of messages) deliveries.push(m.info.deliveryCount);
    })();

    const { jobId } = await publishedJob();
    const before = await loadAll(t.db, jobId);
    expect(before.job.status).toBe('published');

    await vi.waitFor(
      async () => {
        const { job } = await loadAll(t.db, jobId);
        expect(job.status).toBe('dlq');
      },
      { timeout: 15_000, interval: 50 },
    );
    messages.stop();

    const after = await loadAll(t.db, jobId);
    expect(after.job.finished_at).toBeInstanceOf(Date);
    expect(after.job).toEqual({
      ...before.job,
      status: 'dlq',
      error_code: 'MAX_DELIVERIES',
      error_message: 'the job message reached its maximum deliveries without being taken',
      finished_at: after.job.finished_at,
      updated_at: after.job.updated_at,
    });
    expect(after.file).toEqual({
      ...before.file,
      status: 'ERROR',
      error_code: 'MAX_DELIVERIES',
      updated_at: after.file.updated_at,
    });
    expect(after.transitions.map((r) => [r.from_status, r.to_status, r.event, r.detail])).toEqual([
      ['pending', 'published', 'PUBLISHED', {}],
      ['published', 'dlq', 'DELIVERY_EXHAUSTED', { deliveries: 2 }],
    ]);
    expect(deliveries).toEqual([1, 2]);

    // One instance of the queue group handled it; the other never saw it.
    const lines = [...handled(a.logs, jobId), ...handled(b.logs, jobId)];
    expect(lines).toEqual([
      expect.objectContaining({
        level: 'warn',
        loop: 'dead_letters',
        msg_id: `job:${jobId}:1`,
        from: 'published',
        to: 'dlq',
        decision: 'applied',
        consumer: 'tabular-parser',
        deliveries: 2,
      }),
    ]);
    const counted = await Promise.all([a, b].map(async (x) => (await x.metrics.deadLetters.get()).values));
    // Each instance exports every reason from the start (at 0); one of them counted the dead letter.
    expect(counted.flat().filter((v) => v.value > 0)).toEqual([
      expect.objectContaining({ labels: { reason: 'MAX_DELIVERIES' }, value: 1 }),
    ]);
  });

  it('a database outage while handling the advisory is retried (the advisory is not redelivered)', async () => {
    const pgServer = new URL(serverUrl());
    const proxy = await startTcpProxy({ host: pgServer.hostname, port: Number(pgServer.port || 5432) });
    const url = new URL(t.url);
    url.host = `127.0.0.1:${proxy.port}`;
    const viaProxy = openDb(url.toString(), {
      max: 2,
      connectionTimeoutMillis: 1_000,
      onIdleError: () => undefined,
    });
    try {
      const logs = createLogSink();
      const deadLetters = createDeadLetters({
        db: viaProxy.db,
        nc: await t.connect(),
        logger: logs.logger,
      });
      running.push(deadLetters);
      await deadLetters.start();
      const { jobId, seq } = await publishedJob();
      const consumer = await deliveredBy(seq, 2);

      proxy.cut();
      // What JetStream would send; handled by the loop, as a real advisory is.
      const nc = await t.connect();
      nc.publish(
        `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.${JOBS_STREAM}.${consumer}`,
        JSON.stringify({
          type: 'io.nats.jetstream.advisory.v1.max_deliver',
          stream: JOBS_STREAM,
          consumer,
          stream_seq: seq,
          deliveries: 2,
        }),
      );
      await vi.waitFor(() => expect(logs.lines.some((l) => l.event === 'dead_letter_retry')).toBe(true), {
        timeout: 5_000,
        interval: 20,
      });
      proxy.restore();
      await vi.waitFor(async () => expect((await loadAll(t.db, jobId)).job.status).toBe('dlq'), {
        timeout: 10_000,
        interval: 50,
      });
      expect((await loadAll(t.db, jobId)).job.error_code).toBe('MAX_DELIVERIES');
    } finally {
      await Promise.all(running.splice(0).map((d) => d.stop()));
      await viaProxy.close();
      await proxy.close();
    }
  });

  it('the same advisory handled a second time changes nothing (the step ignores it)', async () => {
    const { deadLetters } = await startDeadLetters();
    const { jobId, seq } = await publishedJob();
    const advisory = JSON.stringify({
      type: 'io.nats.jetstream.advisory.v1.max_deliver',
      stream: JOBS_STREAM,
      consumer: await deliveredBy(seq, 5),
      stream_seq: seq,
      deliveries: 5,
    });
    expect(await deadLetters.handleAdvisory(advisory)).toMatchObject({
      jobId,
      decision: 'applied',
      from: 'published',
      to: 'dlq',
    });
    const before = await loadAll(t.db, jobId);
    expect(await deadLetters.handleAdvisory(advisory)).toMatchObject({
      jobId,
      decision: 'ignored',
      from: 'dlq',
      to: 'dlq',
    });
    expect(await loadAll(t.db, jobId)).toEqual(before);
  });

  it('with tracing on, the dead-letter step is a span linked to the trace of the job message', async () => {
    // The SDK on an in-memory exporter, in this process: the publisher's span and its headers are real.
    const exporter = new InMemorySpanExporter();
    const sdk = startTracingSdk({ serviceName: 'test', exporter, pg: false });
    try {
      const { deadLetters, logs } = await startDeadLetters();
      const { jobId, seq } = await publishedJob();
      const stored = await jsm.streams.getMessage(JOBS_STREAM, { seq });
      const [, traceId, spanId] = stored!.header!.get('traceparent').split('-');
      const publish = exporter
        .getFinishedSpans()
        .find((s) => s.name === 'send recognition.job.tabular-parser');
      expect(publish?.spanContext()).toMatchObject({ traceId, spanId });
      const advisory = JSON.stringify({
        stream: JOBS_STREAM,
        consumer: await deliveredBy(seq, 5),
        stream_seq: seq,
        deliveries: 5,
      });
      expect(await deadLetters.handleAdvisory(advisory)).toMatchObject({
        jobId,
        decision: 'applied',
        to: 'dlq',
      });
      const span = exporter.getFinishedSpans().find((s) => s.name === 'recognition.job dead-letter')!;
      expect(span.parentSpanContext).toBeUndefined();
      expect(span.links.map((l) => [l.context.traceId, l.context.spanId])).toEqual([[traceId, spanId]]);
      expect(span.attributes).toMatchObject({
        'recognition.job.id': jobId,
        'recognition.step.decision': 'applied',
        'recognition.job.to': 'dlq',
        'messaging.message.id': `job:${jobId}:1`,
      });
      expect(handled(logs, jobId)[0]).toMatchObject({
        trace_id: span.spanContext().traceId,
        span_id: span.spanContext().spanId,
      });
    } finally {
      await sdk.shutdown();
    }
  });

  it('an advisory for a message no longer in the stream, or not an advisory at all, is logged and dropped', async () => {
    const { deadLetters, logs } = await startDeadLetters();
    expect(
      await deadLetters.handleAdvisory(
        JSON.stringify({ stream: JOBS_STREAM, stream_seq: 999_999, deliveries: 2 }),
      ),
    ).toBeUndefined();
    expect(await deadLetters.handleAdvisory('not json')).toBeUndefined();
    expect(logs.lines.map((l) => [l.level, l.event])).toEqual([
      ['warn', 'dead_letter_message_gone'],
      ['warn', 'dead_letter_advisory_invalid'],
    ]);
  });

  it('an advisory its consumer does not bear out changes nothing: logged and counted with the reason', async () => {
    const { deadLetters, logs, metrics } = await startDeadLetters();
    const { jobId, seq } = await publishedJob();
    const before = await loadAll(t.db, jobId);
    const genuine = await deliveredBy(seq, 3);
    // Consumers that exist but could not have given up on the message: one that has not reached
    // it yet, one that starts after it, one that reads another service's subject.
    await jsm.consumers.add(JOBS_STREAM, {
      durable_name: 'dl-idle',
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      filter_subject: 'recognition.job.tabular-parser',
      max_deliver: 3,
    });
    await jsm.consumers.add(JOBS_STREAM, {
      durable_name: 'dl-behind',
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: seq + 1_000,
      filter_subject: 'recognition.job.tabular-parser',
      max_deliver: 3,
    });
    await jsm.consumers.add(JOBS_STREAM, {
      durable_name: 'dl-ocr',
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.New,
      filter_subject: 'recognition.job.ocr',
      max_deliver: 3,
    });
    const advisory = (over: Record<string, unknown>) =>
      JSON.stringify({
        type: 'io.nats.jetstream.advisory.v1.max_deliver',
        stream: JOBS_STREAM,
        consumer: genuine,
        stream_seq: seq,
        deliveries: 3,
        ...over,
      });
    const cases: Array<[string, string, string | undefined]> = [
      ['other_stream', advisory({ stream: 'RECOGNITION_RESULTS' }), undefined],
      [
        'subject_mismatch',
        advisory({}),
        `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.${JOBS_STREAM}.another-consumer`,
      ],
      ['unknown_consumer', advisory({ consumer: 'no-such-consumer' }), undefined],
      ['unknown_consumer', advisory({ consumer: undefined }), undefined],
      ['below_max_deliver', advisory({ deliveries: 2 }), undefined],
      ['never_delivered', advisory({ consumer: 'dl-idle' }), undefined],
      ['never_delivered', advisory({ consumer: 'dl-behind' }), undefined],
      ['not_its_subject', advisory({ consumer: 'dl-ocr' }), undefined],
    ];
    for (const [reason, data, subject] of cases)
      expect(await deadLetters.handleAdvisory(data, subject), reason).toBeUndefined();
    expect(logs.lines.map((l) => [l.level, l.event, l.reason])).toEqual(
      cases.map(([reason]) => ['warn', 'dead_letter_advisory_untrusted', reason]),
    );
    expect(await loadAll(t.db, jobId)).toEqual(before);
    const counted = (await metrics.untrustedAdvisories.get()).values.map((v) => [v.labels.reason, v.value]);
    expect(Object.fromEntries(counted)).toEqual({
      other_stream: 1,
      subject_mismatch: 1,
      unknown_consumer: 2,
      below_max_deliver: 1,
      never_delivered: 2,
      not_its_subject: 1,
    });

    // The same advisory, borne out by its consumer and on its own subject, is applied.
    expect(
      await deadLetters.handleAdvisory(
        advisory({}),
        `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.${JOBS_STREAM}.${genuine}`,
      ),
    ).toMatchObject({ jobId, decision: 'applied', to: 'dlq' });
  });
});
