/**
 * The spans of one job's way through the exchange, one function per place that records them (the
 * trace's shape: docs/tracing.md). Each starts with `tracingActive()`: without a started SDK it
 * returns undefined (or the context it was given) and does nothing else.
 */
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Link,
  type Span,
} from '@opentelemetry/api';
import {
  carrierOf,
  contextOf,
  contextOfHeaderRecord,
  contextOfHeaders,
  carrierOfHeaders,
  logFieldsOf,
  tracer,
  tracingActive,
  type HeaderReader,
  type TraceCarrier,
  type TraceLogFields,
  type Traced,
} from './tracing.js';

/** Attribute of every span about one job: the `recognition_job.id`. */
export const ATTR_JOB_ID = 'recognition.job.id';

function messaging(
  operation: 'send' | 'process',
  destination: string,
  messageId?: string | null,
): Attributes {
  const attrs: Attributes = {
    'messaging.system': 'nats',
    'messaging.operation.type': operation,
    // The name older backends and the semantic conventions before 1.26 read.
    'messaging.operation': operation === 'send' ? 'publish' : 'process',
    'messaging.destination.name': destination,
  };
  if (messageId) attrs['messaging.message.id'] = messageId;
  return attrs;
}

function failSpan(span: Span, err: unknown): void {
  span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
  if (err instanceof Error) span.recordException(err);
}

/** A job message's link to a stored context, when it has a valid one. */
function linkTo(carrier: TraceCarrier | undefined | null): Link[] {
  if (!carrier) return [];
  const sc = trace.getSpanContext(contextOf(carrier));
  return sc && trace.isSpanContextValid(sc) ? [{ context: sc }] : [];
}

// ---------------------------------------------------------------------------------------------
// jobs create

/** The span of a job's creation; its carrier is what the row stores. */
export interface JobCreateTrace extends Traced {
  /** What to store on the row: the creation span's context. */
  carrier: TraceCarrier | undefined;
  end(jobId: string): void;
}

/**
 * Start `recognition.job create` as a child of `parent` (a new root without one). Undefined when
 * tracing is off: the caller stores `parent` as it came, so the publisher continues the caller's
 * trace all the same.
 */
export function startJobCreateTrace(opts: {
  parent: TraceCarrier | undefined;
  fileId: string;
  targetService: string;
}): JobCreateTrace | undefined {
  if (!tracingActive()) return undefined;
  const span = tracer().startSpan(
    'recognition.job create',
    {
      kind: SpanKind.INTERNAL,
      attributes: {
        'recognition.file.id': opts.fileId,
        'recognition.job.target_service': opts.targetService,
      },
    },
    contextOf(opts.parent),
  );
  const ctx = trace.setSpan(contextOf(opts.parent), span);
  return {
    context: ctx,
    carrier: carrierOf(ctx),
    end(jobId) {
      span.setAttribute(ATTR_JOB_ID, jobId);
      span.end();
    },
    fail(err) {
      failSpan(span, err);
      span.end();
    },
  };
}

// ---------------------------------------------------------------------------------------------
// The publisher

/** A job message's publish: the headers to send and the span to end. */
export interface PublishTrace {
  /** `traceparent`/`tracestate` for the message's headers. */
  headers: TraceCarrier | undefined;
  span: Span | undefined;
}

/**
 * Start `send recognition.job.<service>` as a child of the row's stored context (a new root when
 * the row has none); its context goes on the message. Tracing off: the stored context is passed
 * on as it is (the service and the inbox then continue the creator's trace), or nothing.
 */
export function startPublishTrace(opts: {
  stored: TraceCarrier | undefined;
  jobId: string;
  attempt: number;
  subject: string;
  msgId: string;
}): PublishTrace | undefined {
  if (!tracingActive()) return opts.stored ? { headers: opts.stored, span: undefined } : undefined;
  const parent = contextOf(opts.stored);
  const span = tracer().startSpan(
    `send ${opts.subject}`,
    {
      kind: SpanKind.PRODUCER,
      attributes: {
        ...messaging('send', opts.subject, opts.msgId),
        [ATTR_JOB_ID]: opts.jobId,
        'recognition.job.attempt': opts.attempt,
      },
    },
    parent,
  );
  return { headers: carrierOf(trace.setSpan(parent, span)), span };
}

/** End a publish span with JetStream's answer. */
export function endPublishTrace(
  t: PublishTrace | undefined,
  result: { ok: true; streamSeq: number; duplicate: boolean } | { ok: false; error: string },
): void {
  const span = t?.span;
  if (!span) return;
  if (result.ok) {
    span.setAttribute('messaging.nats.stream_sequence', result.streamSeq);
    span.setAttribute('recognition.publish.duplicate', result.duplicate);
  } else span.setStatus({ code: SpanStatusCode.ERROR, message: result.error });
  span.end();
}

/** The log fields of a publish. */
export function publishLogFields(t: PublishTrace | undefined): TraceLogFields | undefined {
  return logFieldsOf(t?.span);
}

// ---------------------------------------------------------------------------------------------
// The reference service

/** A service's work on one job message. */
export interface ServiceJobTrace {
  logFields: TraceLogFields | undefined;
  /** Start the send span of an envelope; its `headers` go on the envelope. */
  send(msgId: string): { headers: TraceCarrier | undefined; end(err?: unknown): void };
  end(fate: string): void;
  fail(err: unknown): void;
}

/**
 * Start `process recognition.job.<service>` as a child of the job message's context. Tracing off:
 * the job message's own context is passed on to the envelopes as it came (or nothing).
 */
export function startServiceJobTrace(opts: {
  headers: HeaderReader | undefined;
  subject: string;
  jobId: string;
  msgId: string | undefined;
}): ServiceJobTrace | undefined {
  if (!tracingActive()) {
    const incoming = carrierOfHeaders(opts.headers);
    if (!incoming) return undefined;
    return {
      logFields: undefined,
      send: () => ({ headers: incoming, end: () => undefined }),
      end: () => undefined,
      fail: () => undefined,
    };
  }
  const parent = contextOfHeaders(opts.headers);
  const span = tracer().startSpan(
    `process ${opts.subject}`,
    {
      kind: SpanKind.CONSUMER,
      attributes: { ...messaging('process', opts.subject, opts.msgId), [ATTR_JOB_ID]: opts.jobId },
    },
    parent,
  );
  const ctx = trace.setSpan(parent, span);
  return {
    logFields: logFieldsOf(span),
    send(msgId) {
      const send = tracer().startSpan(
        'send recognition.result',
        {
          kind: SpanKind.PRODUCER,
          attributes: { ...messaging('send', 'recognition.result', msgId), [ATTR_JOB_ID]: opts.jobId },
        },
        ctx,
      );
      return {
        headers: carrierOf(trace.setSpan(ctx, send)),
        end(err) {
          if (err !== undefined) failSpan(send, err);
          send.end();
        },
      };
    },
    end(fate) {
      span.setAttribute('recognition.service.fate', fate);
      span.end();
    },
    fail(err) {
      failSpan(span, err);
      span.end();
    },
  };
}

// ---------------------------------------------------------------------------------------------
// The inbox

/** What the inbox's spans read of a message (structurally the inbox's own item). */
export interface InboxTraceItem {
  raw: { subject: string; streamSeq: number | null; headers: Readonly<Record<string, readonly string[]>> };
  decoded:
    | { ok: true; msgId: string | null; envelope: { job_id: string; status: string } }
    | { ok: false; msgId?: string | null; jobId?: string | null | undefined; reason: string };
}

/** What the inbox's spans record of an outcome (structurally the inbox's own outcome). */
export type InboxTraceOutcome =
  | { kind: 'step'; outcome: { decision: string; from?: string | null; to?: string | null; event: string } }
  | { kind: 'quarantined'; reason: string };

/** The spans of one applied batch. */
export interface InboxTrace extends Traced {
  /** End every span with its envelope's outcome. */
  end(outcomes: readonly InboxTraceOutcome[]): void;
  /** `trace_id`/`span_id` of the i-th envelope's span. */
  logFields(i: number): TraceLogFields | undefined;
}

/**
 * Start one `process recognition.result` span per envelope of a batch, each a child of its
 * envelope's context (a new root for an envelope that carries none), and — for a batch of several —
 * the `inbox batch` span the transaction runs in, linked to them all. Undefined when tracing is off.
 */
export function startInboxTrace(items: readonly InboxTraceItem[]): InboxTrace | undefined {
  if (!tracingActive()) return undefined;
  const t = tracer();
  const parents = items.map((item) => contextOfHeaderRecord(item.raw.headers));
  let batch: Span | undefined;
  if (items.length > 1) {
    const links: Link[] = [];
    for (const p of parents) {
      const sc = trace.getSpanContext(p);
      if (sc && trace.isSpanContextValid(sc)) links.push({ context: sc });
    }
    batch = t.startSpan('inbox batch', {
      kind: SpanKind.INTERNAL,
      links,
      attributes: {
        ...messaging('process', 'recognition.result'),
        'messaging.batch.message_count': items.length,
      },
    });
  }
  const batchLinks: Link[] = batch ? [{ context: batch.spanContext() }] : [];
  const spans = items.map((item, i) => {
    const d = item.decoded;
    const attributes: Attributes = {
      ...messaging('process', item.raw.subject, d.msgId ?? undefined),
    };
    const jobId = d.ok ? d.envelope.job_id : d.jobId;
    if (jobId) attributes[ATTR_JOB_ID] = jobId;
    if (d.ok) attributes['recognition.envelope.status'] = d.envelope.status;
    if (item.raw.streamSeq !== null) attributes['messaging.nats.stream_sequence'] = item.raw.streamSeq;
    return t.startSpan(
      `process ${item.raw.subject}`,
      { kind: SpanKind.CONSUMER, attributes, links: batchLinks },
      parents[i],
    );
  });
  return {
    context: batch ? trace.setSpan(ROOT_CONTEXT, batch) : trace.setSpan(parents[0]!, spans[0]!),
    end(outcomes) {
      spans.forEach((span, i) => {
        const o = outcomes[i];
        if (o?.kind === 'step') {
          span.setAttribute('recognition.step.decision', o.outcome.decision);
          span.setAttribute('recognition.step.event', o.outcome.event);
          if (o.outcome.from) span.setAttribute('recognition.job.from', o.outcome.from);
          if (o.outcome.to) span.setAttribute('recognition.job.to', o.outcome.to);
        } else if (o?.kind === 'quarantined') span.setAttribute('recognition.quarantine.reason', o.reason);
        span.end();
      });
      batch?.end();
    },
    fail(err) {
      for (const span of spans) {
        failSpan(span, err);
        span.end();
      }
      if (batch) {
        failSpan(batch, err);
        batch.end();
      }
    },
    logFields: (i) => logFieldsOf(spans[i]),
  };
}

// ---------------------------------------------------------------------------------------------
// The watchdog and the dead-letter step

/**
 * Record one `recognition.job timeout` span per timed-out job, from `startTime` (the batch's start)
 * to now, linked to the job's stored context. Returns each job's log fields. Call only when
 * tracing is on (the caller reads the stored contexts for it).
 */
export function recordTimeoutSpans(opts: {
  startTime: number;
  jobs: ReadonlyArray<{
    jobId: string;
    from: string | null;
    to: string | null;
    stored: TraceCarrier | undefined;
  }>;
}): Map<string, TraceLogFields> {
  const fields = new Map<string, TraceLogFields>();
  for (const job of opts.jobs) {
    const attributes: Attributes = { [ATTR_JOB_ID]: job.jobId, 'recognition.step.event': 'DEADLINE_PASSED' };
    if (job.from) attributes['recognition.job.from'] = job.from;
    if (job.to) attributes['recognition.job.to'] = job.to;
    const span = tracer().startSpan('recognition.job timeout', {
      kind: SpanKind.INTERNAL,
      root: true,
      startTime: opts.startTime,
      links: linkTo(job.stored),
      attributes,
    });
    const f = logFieldsOf(span);
    if (f) fields.set(job.jobId, f);
    span.end();
  }
  return fields;
}

/** The dead-letter step of one job. */
export interface DeadLetterTrace extends Traced {
  logFields: TraceLogFields | undefined;
  end(outcome: { decision: string; from?: string | null; to?: string | null }): void;
}

/**
 * Start `recognition.job dead-letter`, a root linked to the undeliverable job message's context
 * (the publish span of the job's trace). Undefined when tracing is off.
 */
export function startDeadLetterTrace(opts: {
  jobId: string;
  msgId: string | null;
  deliveries: number;
  headers: HeaderReader | undefined;
}): DeadLetterTrace | undefined {
  if (!tracingActive()) return undefined;
  const span = tracer().startSpan('recognition.job dead-letter', {
    kind: SpanKind.INTERNAL,
    root: true,
    links: linkTo(carrierOfHeaders(opts.headers)),
    attributes: {
      [ATTR_JOB_ID]: opts.jobId,
      'recognition.step.event': 'DELIVERY_EXHAUSTED',
      'recognition.deliveries': opts.deliveries,
      ...(opts.msgId ? { 'messaging.message.id': opts.msgId } : {}),
    },
  });
  return {
    context: trace.setSpan(ROOT_CONTEXT, span),
    logFields: logFieldsOf(span),
    end(outcome) {
      span.setAttribute('recognition.step.decision', outcome.decision);
      if (outcome.from) span.setAttribute('recognition.job.from', outcome.from);
      if (outcome.to) span.setAttribute('recognition.job.to', outcome.to);
      span.end();
    },
    fail(err) {
      failSpan(span, err);
      span.end();
    },
  };
}
