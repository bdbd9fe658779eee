/**
 * Tracing end to end, as an operator runs it: the built CLI's daemon (`start`) and the reference
 * service (`service tabular-parser`) as processes with OTEL_EXPORTER_OTLP_ENDPOINT pointing at a
 * real OTLP/HTTP receiver this test starts, which decodes what the exporters really send. Real
 * PostgreSQL, a private nats-server; nothing of the SDK is mocked.
 */
import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  startOtlpReceiver,
  type OtlpReceiver,
  type ReceivedSpan,
} from '../../workshop/tracing/otlpReceiver.js';
import { runCli, spawnCli, type CliProcess } from '../helpers/cliProcess.js';
import { insertJob } from '../helpers/fixtures.js';
import { waitFor } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true, nats: true, client: true });
let receiver: OtlpReceiver;
let daemon: CliProcess;
let service: CliProcess;

const env = () => ({
  DATABASE_URL: t.url,
  NATS_URL: t.nats.url,
  HTTP_HOST: '127.0.0.1',
  HTTP_PORT: '0',
  LOG_LEVEL: 'info',
  LOG_PRETTY: 'false',
});
const otel = () => ({
  OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
  // Export within a tenth of a second of a span's end, so the test waits little.
  OTEL_BSP_SCHEDULE_DELAY: '100',
});

beforeAll(async () => {
  receiver = await startOtlpReceiver();
  daemon = spawnCli(['start'], {
    ...env(),
    ...otel(),
    REPLY_TIMEOUT_MS: '3000',
    WATCHDOG_INTERVAL_MS: '200',
    PUBLISHER_POLL_INTERVAL_MS: '200',
  });
  await daemon.waitForLog((l) => l.event === 'started', 30_000);
  service = spawnCli(['service', 'tabular-parser', '--weights', 'done=1', '--delay', '50'], {
    ...env(),
    ...otel(),
  });
  await service.waitForLog((l) => l.event === 'ready', 30_000);
});

afterAll(async () => {
  for (const p of [service, daemon]) {
    if (p && p.child.exitCode === null) {
      p.child.kill('SIGTERM');
      await p.exited;
    }
  }
  await receiver?.close();
});

const hex = (bytes: number) => randomBytes(bytes).toString('hex');

async function jobStatus(jobId: string): Promise<string | undefined> {
  const row = await t.db
    .selectFrom('recognition_job')
    .select('status')
    .where('id', '=', jobId)
    .executeTakeFirst();
  return row?.status;
}

async function createFile(): Promise<string> {
  const r = await runCli(
    ['files', 'add', '--bucket', 'arm-ka', '--key', `uploads/${hex(6)}.xlsx`, '--name', 'report.xlsx'],
    env(),
  );
  expect(r.code, r.output).toBe(0);
  return (JSON.parse(r.stdout.join('\n')) as { id: string }).id;
}

const inTrace = (traceId: string) => (s: ReceivedSpan) => s.traceId === traceId;
const one = (spans: ReceivedSpan[], pred: (s: ReceivedSpan) => boolean, what: string): ReceivedSpan => {
  const found = spans.filter(pred);
  expect(found, `${what} in\n${spans.map((s) => `${s.traceId} ${s.name}`).join('\n')}`).toHaveLength(1);
  return found[0]!;
};

describe('one job, one trace', () => {
  it('jobs create --traceparent → the publish → the service → the inbox applying ack and result', async () => {
    const traceId = hex(16);
    const callerSpan = hex(8);
    const fileId = await createFile();
    const created = await runCli(
      [
        'jobs',
        'create',
        '--file',
        fileId,
        '--service',
        'tabular-parser',
        '--traceparent',
        `00-${traceId}-${callerSpan}-01`,
      ],
      { ...env(), ...otel() },
    );
    expect(created.code, created.output).toBe(0);
    const job = JSON.parse(created.stdout.join('\n')) as { id: string; trace_parent: string };
    // The row stores the creation span's context: same trace, the span `jobs create` recorded.
    expect(job.trace_parent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));

    await waitFor(async () => (await jobStatus(job.id)) === 'done', 'the job to be done');
    const spans = // Each process exports on its own schedule: wait until the core's applies and the service's
      // work and sends have all arrived.
      (
        await receiver.waitFor((all) => {
          const named = (name: string) =>
            all.filter((s) => s.traceId === traceId && s.name === name && s.parentSpanId !== undefined)
              .length;
          return (
            named('process recognition.result') >= 2 &&
            named('process recognition.job.tabular-parser') >= 1 &&
            named('send recognition.result') >= 2
          );
        })
      ).filter(inTrace(traceId));

    const create = one(spans, (s) => s.name === 'recognition.job create', 'the creation span');
    const publish = one(spans, (s) => s.name === 'send recognition.job.tabular-parser', 'the publish span');
    const work = one(spans, (s) => s.name === 'process recognition.job.tabular-parser', "the service's span");
    const sends = spans.filter((s) => s.name === 'send recognition.result');
    const applies = spans.filter((s) => s.name === 'process recognition.result');
    expect(sends).toHaveLength(2);
    expect(applies).toHaveLength(2);

    // Who recorded what: the CLI and the daemon are recognition-core, the service is its own.
    expect(create.serviceName).toBe('recognition-core');
    expect(publish.serviceName).toBe('recognition-core');
    expect(work.serviceName).toBe('tabular-parser');
    expect(applies.map((s) => s.serviceName)).toEqual(['recognition-core', 'recognition-core']);

    // Parent and child, all the way: caller → create → publish → service → each send → its apply.
    expect(create.parentSpanId).toBe(callerSpan);
    expect(job.trace_parent.split('-')[2]).toBe(create.spanId);
    expect(publish.parentSpanId).toBe(create.spanId);
    expect(publish.kind).toBe('producer');
    expect(work.parentSpanId).toBe(publish.spanId);
    expect(work.kind).toBe('consumer');
    for (const s of sends) expect(s.parentSpanId).toBe(work.spanId);
    const bySend = new Map(applies.map((a) => [a.parentSpanId, a]));
    const ack = bySend.get(
      sends.find((s) => String(s.attributes['messaging.message.id']).startsWith('ack:'))!.spanId,
    )!;
    const result = bySend.get(
      sends.find((s) => String(s.attributes['messaging.message.id']).startsWith('result:'))!.spanId,
    )!;
    expect(ack.attributes).toMatchObject({
      'messaging.system': 'nats',
      'messaging.operation.type': 'process',
      'messaging.destination.name': 'recognition.result',
      'messaging.message.id': `ack:${job.id}:1`,
      'recognition.job.id': job.id,
      'recognition.step.decision': 'applied',
      'recognition.job.to': 'processing',
    });
    expect(result.attributes).toMatchObject({
      'messaging.message.id': `result:${job.id}:1`,
      'recognition.job.to': 'done',
    });
    expect(publish.attributes).toMatchObject({
      'messaging.system': 'nats',
      'messaging.destination.name': 'recognition.job.tabular-parser',
      'messaging.message.id': `job:${job.id}:1`,
      'recognition.job.id': job.id,
    });

    // PostgreSQL spans from the pg instrumentation: the creation's insert and the apply's statements.
    const pg = spans.filter((s) => s.name.startsWith('pg.query'));
    expect(pg.some((s) => s.parentSpanId === create.spanId && s.name.includes('INSERT'))).toBe(true);
    expect(pg.some((s) => s.parentSpanId === result.spanId)).toBe(true);

    // The daemon's log line of the applied result carries the trace.
    const line = await daemon.waitForLog(
      (l) => l.job_id === job.id && l.to === 'done' && l.decision === 'applied',
    );
    expect(line).toMatchObject({ trace_id: traceId, span_id: result.spanId });
    const published = daemon.logs().find((l) => l.job_id === job.id && l.event === 'PUBLISHED');
    expect(published).toMatchObject({ trace_id: traceId, span_id: publish.spanId });
  });

  it("the watchdog's timeout links to the trace stored on the job's row", async () => {
    const traceId = hex(16);
    const fileId = await createFile();
    // No service listens on this subject: the job is published and times out.
    const created = await runCli(
      [
        'jobs',
        'create',
        '--file',
        fileId,
        '--service',
        'nobody-listens',
        '--traceparent',
        `00-${traceId}-${hex(8)}-01`,
      ],
      { ...env(), ...otel() },
    );
    expect(created.code, created.output).toBe(0);
    const job = JSON.parse(created.stdout.join('\n')) as { id: string; trace_parent: string };
    await waitFor(async () => (await jobStatus(job.id)) === 'timeout', 'the job to time out');
    const spans = await receiver.waitFor((all) =>
      all.some((s) => s.name === 'recognition.job timeout' && s.attributes['recognition.job.id'] === job.id),
    );
    const timeout = one(
      spans,
      (s) => s.name === 'recognition.job timeout' && s.attributes['recognition.job.id'] === job.id,
      'the timeout span',
    );
    expect(timeout.parentSpanId).toBeUndefined();
    expect(timeout.traceId).not.toBe(traceId);
    expect(timeout.links).toEqual([{ traceId, spanId: job.trace_parent.split('-')[2] }]);
    expect(timeout.attributes).toMatchObject({
      'recognition.job.from': 'published',
      'recognition.job.to': 'timeout',
    });
    const line = await daemon.waitForLog((l) => l.job_id === job.id && l.to === 'timeout');
    expect(line).toMatchObject({ trace_id: timeout.traceId, span_id: timeout.spanId });
  });

  it('an envelope without a trace context (a C-client service) is applied exactly as without tracing', async () => {
    // A job published by someone else, answered by a client that sends no trace headers.
    const job = await insertJob(t.db, { status: 'published' });
    await t.svc.ack(job);
    await t.svc.done(job);
    await waitFor(async () => (await jobStatus(job.jobId)) === 'done', 'the job to be done');
    const row = await t.db
      .selectFrom('recognition_job')
      .select(['status', 'result_msg_id', 'service_name', 'trace_parent'])
      .where('id', '=', job.jobId)
      .executeTakeFirstOrThrow();
    expect(row).toEqual({
      status: 'done',
      result_msg_id: `result:${job.jobId}:1`,
      service_name: 'tabular-parser',
      trace_parent: null,
    });
    const { rows: transitions } = await sql<{ from_status: string; to_status: string; msg_id: string }>`
      SELECT from_status, to_status, msg_id FROM recognition_job_transition WHERE job_id = ${job.jobId} ORDER BY id`.execute(
      t.db,
    );
    expect(transitions).toEqual([
      { from_status: 'published', to_status: 'processing', msg_id: `ack:${job.jobId}:1` },
      { from_status: 'processing', to_status: 'done', msg_id: `result:${job.jobId}:1` },
    ]);
    // Each envelope's span is a root of its own: there was no context to continue.
    const spans = await receiver.waitFor(
      (all) =>
        all.filter(
          (s) => s.name === 'process recognition.result' && s.attributes['recognition.job.id'] === job.jobId,
        ).length >= 2,
    );
    const applies = spans.filter(
      (s) => s.name === 'process recognition.result' && s.attributes['recognition.job.id'] === job.jobId,
    );
    for (const a of applies) expect(a.parentSpanId).toBeUndefined();
    expect(new Set(applies.map((a) => a.traceId)).size).toBe(2);
  });
});
