/**
 * Tracing without I/O: the rule over the OTEL_* variables, the helpers with no SDK started (they
 * create nothing and pass a stored context on unchanged), and, with the SDK started on an
 * in-memory exporter, the spans each place records and how they join one trace.
 */
import { Writable } from 'node:stream';
import { context, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace-node';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { checkedCarrier } from '../../src/tracing/carrier.js';
import { tracingRequest } from '../../src/tracing/env.js';
import {
  endPublishTrace,
  recordTimeoutSpans,
  startInboxTrace,
  startJobCreateTrace,
  startPublishTrace,
  startServiceJobTrace,
  type InboxTraceItem,
} from '../../src/tracing/jobSpans.js';
import { decodeOtlpJson, renderSpanTree } from '../../workshop/tracing/otlpReceiver.js';
import { startTracingSdk, type TracingSdk } from '../../src/tracing/sdk.js';
import { traceLogMixin, tracingActive } from '../../src/tracing/tracing.js';

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const PARENT_ID = '00f067aa0ba902b7';
const TRACEPARENT = `00-${TRACE_ID}-${PARENT_ID}-01`;

/** A header reader as NATS `MsgHdrs` behaves: '' for a missing header. */
function reader(h: Record<string, string>) {
  return { get: (k: string) => h[k] ?? '', keys: () => Object.keys(h) };
}

function envelope(headers: Record<string, string[]>, jobId = 'job-1', seq = 7): InboxTraceItem {
  return {
    raw: { subject: 'recognition.result', streamSeq: seq, headers },
    decoded: { ok: true, msgId: `result:${jobId}:1`, envelope: { job_id: jobId, status: 'done' } },
  };
}

describe('the rule: when the OTEL_* variables start the SDK', () => {
  it.each([
    [{}, false],
    [{ OTEL_TRACES_EXPORTER: 'otlp' }, true],
    [{ OTEL_TRACES_EXPORTER: 'none' }, false],
    [{ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }, false],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }, true],
    [{ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/v1/traces' }, true],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: '  ' }, false],
    [{ OTEL_TRACES_EXPORTER: 'otlp', OTEL_SDK_DISABLED: 'true' }, false],
    [{ OTEL_TRACES_EXPORTER: 'otlp', OTEL_SDK_DISABLED: 'false' }, true],
    [{ OTEL_TRACES_EXPORTER: 'console,otlp' }, true],
  ] as Array<[NodeJS.ProcessEnv, boolean]>)('%o → %s', (env, on) => {
    expect(tracingRequest(env).on).toBe(on);
  });

  it('warns about what it does not do: other exporters, other protocols', () => {
    expect(tracingRequest({ OTEL_TRACES_EXPORTER: 'zipkin' }).warnings[0]).toMatch(/zipkin not supported/);
    expect(
      tracingRequest({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4317', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })
        .warnings[0],
    ).toMatch(/JSON/);
    expect(tracingRequest({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }).warnings).toEqual([]);
  });
});

describe('--traceparent and --tracestate are checked and normalized', () => {
  it('accepts a W3C traceparent and tracestate', () => {
    expect(checkedCarrier(` ${TRACEPARENT} `, 'congo=t61rcWkgMzE, rojo=00f067aa0ba902b7')).toEqual({
      traceparent: TRACEPARENT,
      tracestate: 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7',
    });
    expect(checkedCarrier(TRACEPARENT, undefined)).toEqual({ traceparent: TRACEPARENT });
  });

  it.each([
    'not-a-traceparent',
    `00-${'0'.repeat(32)}-${PARENT_ID}-01`,
    `00-${TRACE_ID}-${'0'.repeat(16)}-01`,
    `ff-${TRACE_ID}-${PARENT_ID}-01`,
    `00-${TRACE_ID.toUpperCase()}-${PARENT_ID}-01`,
  ])('refuses %s', (bad) => {
    expect(() => checkedCarrier(bad, undefined)).toThrow(/not a W3C traceparent/);
  });

  it('refuses a tracestate with no valid member', () => {
    expect(() => checkedCarrier(TRACEPARENT, '=== ,,')).toThrow(/tracestate/);
  });
});

describe('without a started SDK', () => {
  it('records nothing, and passes a stored or received context on unchanged', () => {
    expect(tracingActive()).toBe(false);
    expect(startInboxTrace([envelope({ traceparent: [TRACEPARENT] })])).toBeUndefined();
    expect(startJobCreateTrace({ parent: undefined, fileId: 'f', targetService: 's' })).toBeUndefined();
    expect(traceLogMixin()).toEqual({});
    // The publisher passes the row's context on; a row without one publishes without headers.
    const stored = { traceparent: TRACEPARENT, tracestate: 'a=b' };
    expect(startPublishTrace({ stored, jobId: 'j', attempt: 1, subject: 's', msgId: 'm' })).toEqual({
      headers: stored,
      span: undefined,
    });
    expect(startPublishTrace({ stored: undefined, jobId: 'j', attempt: 1, subject: 's', msgId: 'm' })).toBe(
      undefined,
    );
    // The service passes the job message's context on to its envelopes.
    const svc = startServiceJobTrace({
      headers: reader({ traceparent: TRACEPARENT }),
      subject: 'recognition.job.x',
      jobId: 'j',
      msgId: 'job:j:1',
    });
    expect(svc?.send('ack:j:1').headers).toEqual({ traceparent: TRACEPARENT });
    expect(
      startServiceJobTrace({
        headers: reader({}),
        subject: 'recognition.job.x',
        jobId: 'j',
        msgId: undefined,
      }),
    ).toBeUndefined();
  });

  it('the logger has no mixin: a line carries no trace fields', () => {
    const lines: string[] = [];
    const destination = new Writable({
      write(c: Buffer, _e, cb) {
        lines.push(c.toString());
        cb();
      },
    });
    createLogger({ destination }).info({ job_id: 'j' }, 'x');
    expect(JSON.parse(lines[0]!)).not.toHaveProperty('trace_id');
  });
});

describe('with the SDK started (in-memory exporter)', () => {
  let sdk: TracingSdk | undefined;
  let exporter: InMemorySpanExporter;
  const start = () => {
    exporter = new InMemorySpanExporter();
    sdk = startTracingSdk({ serviceName: 'unit', exporter, pg: false });
  };
  afterEach(async () => {
    await sdk?.shutdown();
    sdk = undefined;
  });
  const spans = (): ReadableSpan[] => exporter.getFinishedSpans();
  const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;

  it('create → publish → service → envelope → inbox apply is one trace, each a child of the one before', () => {
    start();
    const created = startJobCreateTrace({
      parent: { traceparent: TRACEPARENT },
      fileId: 'f1',
      targetService: 'tabular-parser',
    })!;
    created.end('job-1');
    const stored = created.carrier!;
    expect(stored.traceparent).toMatch(new RegExp(`^00-${TRACE_ID}-[0-9a-f]{16}-01$`));

    const publish = startPublishTrace({
      stored,
      jobId: 'job-1',
      attempt: 1,
      subject: 'recognition.job.tabular-parser',
      msgId: 'job:job-1:1',
    })!;
    endPublishTrace(publish, { ok: true, streamSeq: 3, duplicate: false });

    const svc = startServiceJobTrace({
      headers: reader({ traceparent: publish.headers!.traceparent }),
      subject: 'recognition.job.tabular-parser',
      jobId: 'job-1',
      msgId: 'job:job-1:1',
    })!;
    const send = svc.send('result:job-1:1');
    send.end();
    svc.end('done');

    const inbox = startInboxTrace([envelope({ traceparent: [send.headers!.traceparent] }, 'job-1')])!;
    inbox.end([
      {
        kind: 'step',
        outcome: { decision: 'applied', from: 'processing', to: 'done', event: 'ENVELOPE_RESULT' },
      },
    ]);

    const byName = new Map(spans().map((s) => [s.name, s]));
    expect(new Set(spans().map((s) => s.spanContext().traceId))).toEqual(new Set([TRACE_ID]));
    const c = byName.get('recognition.job create')!;
    const p = byName.get('send recognition.job.tabular-parser')!;
    const w = byName.get('process recognition.job.tabular-parser')!;
    const e = byName.get('send recognition.result')!;
    const a = byName.get('process recognition.result')!;
    expect(parentOf(c)).toBe(PARENT_ID);
    expect(parentOf(p)).toBe(c.spanContext().spanId);
    expect(parentOf(w)).toBe(p.spanContext().spanId);
    expect(parentOf(e)).toBe(w.spanContext().spanId);
    expect(parentOf(a)).toBe(e.spanContext().spanId);
    expect(a.attributes).toMatchObject({
      'messaging.system': 'nats',
      'messaging.operation.type': 'process',
      'messaging.operation': 'process',
      'messaging.destination.name': 'recognition.result',
      'messaging.message.id': 'result:job-1:1',
      'recognition.job.id': 'job-1',
      'recognition.step.decision': 'applied',
      'recognition.job.to': 'done',
    });
    expect(inbox.logFields(0)).toEqual({ trace_id: TRACE_ID, span_id: a.spanContext().spanId });
    expect(p.attributes).toMatchObject({
      'messaging.operation.type': 'send',
      'messaging.message.id': 'job:job-1:1',
    });
  });

  it('an envelope without a trace context gets a root span of its own; a batch of several runs in a span linked to each', () => {
    start();
    const inbox = startInboxTrace([
      envelope({}, 'job-a', 1),
      envelope({ traceparent: [TRACEPARENT] }, 'job-b', 2),
    ])!;
    // The transaction runs in the batch span: what it records is the batch span's child.
    context.with(inbox.context, () => tracer().startSpan('query').end());
    inbox.end([
      {
        kind: 'step',
        outcome: { decision: 'applied', from: 'published', to: 'processing', event: 'ENVELOPE_PROCESSING' },
      },
      { kind: 'quarantined', reason: 'UNKNOWN_JOB' },
    ]);
    const batch = spans().find((s) => s.name === 'inbox batch')!;
    const [a, b] = spans().filter((s) => s.name === 'process recognition.result');
    expect(batch.attributes['messaging.batch.message_count']).toBe(2);
    expect(batch.links.map((l) => l.context.spanId)).toEqual([PARENT_ID]);
    expect(parentOf(a!)).toBeUndefined();
    expect(a!.spanContext().traceId).not.toBe(TRACE_ID);
    expect(parentOf(b!)).toBe(PARENT_ID);
    expect(b!.attributes['recognition.quarantine.reason']).toBe('UNKNOWN_JOB');
    for (const s of [a!, b!])
      expect(s.links.map((l) => l.context.spanId)).toEqual([batch.spanContext().spanId]);
    expect(parentOf(spans().find((s) => s.name === 'query')!)).toBe(batch.spanContext().spanId);
  });

  it('a timeout is a root linked to the stored context; a job without one has no link', () => {
    start();
    const fields = recordTimeoutSpans({
      startTime: Date.now() - 5,
      jobs: [
        { jobId: 'j1', from: 'published', to: 'timeout', stored: { traceparent: TRACEPARENT } },
        { jobId: 'j2', from: 'processing', to: 'timeout', stored: undefined },
      ],
    });
    const [t1, t2] = spans();
    expect(t1!.name).toBe('recognition.job timeout');
    expect(parentOf(t1!)).toBeUndefined();
    expect(t1!.links.map((l) => [l.context.traceId, l.context.spanId])).toEqual([[TRACE_ID, PARENT_ID]]);
    expect(t2!.links).toEqual([]);
    expect(fields.get('j1')).toEqual({
      trace_id: t1!.spanContext().traceId,
      span_id: t1!.spanContext().spanId,
    });
  });

  it('log lines inside a span carry its trace_id and span_id; a line outside carries none', () => {
    start();
    const lines: Array<Record<string, unknown>> = [];
    const destination = new Writable({
      write(c: Buffer, _e, cb) {
        lines.push(JSON.parse(c.toString()) as Record<string, unknown>);
        cb();
      },
    });
    const log = createLogger({ destination });
    const span = tracer().startSpan('work');
    context.with(trace.setSpan(context.active(), span), () => log.info('inside'));
    context.with(trace.setSpan(context.active(), span), () =>
      log.info({ job_id: 'j', trace_id: 'own' }, 'own'),
    );
    span.end();
    log.info({ job_id: 'j' }, 'outside');
    log.info({ job_id: 'j' }, 'outside again');
    expect(lines[0]).toMatchObject({
      trace_id: span.spanContext().traceId,
      span_id: span.spanContext().spanId,
    });
    expect(lines[1]).toMatchObject({ trace_id: 'own', span_id: span.spanContext().spanId });
    expect(lines[2]).toMatchObject({ job_id: 'j' });
    expect(lines[2]).not.toHaveProperty('trace_id');
    expect(lines[3]).toMatchObject({ job_id: 'j', msg: 'outside again' });
  });
});

describe('the OTLP JSON decoding of the test receiver', () => {
  it('reads ids, kinds, attributes and links, and renders one trace as a tree', () => {
    const span = (id: string, parent: string | undefined, name: string, start: number) => ({
      traceId: TRACE_ID,
      spanId: id,
      parentSpanId: parent,
      name,
      kind: 5,
      startTimeUnixNano: String(start),
      endTimeUnixNano: String(start + 2_000_000),
      attributes: [
        { key: 'n', value: { intValue: '3' } },
        { key: 'b', value: { boolValue: true } },
      ],
      links: [{ traceId: TRACE_ID, spanId: PARENT_ID }],
      status: { code: 2 },
    });
    const spans = decodeOtlpJson({
      resourceSpans: [
        {
          resource: { attributes: [{ key: 'service.name', value: { stringValue: 'svc' } }] },
          scopeSpans: [
            {
              spans: [
                span('aaaaaaaaaaaaaaaa', undefined, 'root', 1),
                span('bbbbbbbbbbbbbbbb', 'aaaaaaaaaaaaaaaa', 'child', 2),
              ],
            },
          ],
        },
      ],
    });
    expect(spans[1]).toMatchObject({
      serviceName: 'svc',
      kind: 'consumer',
      parentSpanId: 'aaaaaaaaaaaaaaaa',
      attributes: { n: 3, b: true },
      links: [{ traceId: TRACE_ID, spanId: PARENT_ID }],
      statusCode: 2,
    });
    expect(renderSpanTree(spans, TRACE_ID).split('\n')).toEqual([
      'root  [svc, consumer, 2.0 ms]  links=1 ERROR',
      '  child  [svc, consumer, 2.0 ms]  links=1 ERROR',
    ]);
  });
});

function tracer() {
  return trace.getTracer('unit-test');
}
