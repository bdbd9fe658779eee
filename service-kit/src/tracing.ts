/**
 * Trace context through the OpenTelemetry API only: the kit starts spans with whatever tracer
 * provider the service registered, and none when it registered none. Either way the job
 * message's `traceparent` reaches every envelope: with an SDK as the parent of the envelope's send
 * span, without one as it came. The W3C headers are read and written here directly when no
 * propagator is registered, so a service without an SDK still passes the trace on.
 */
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  TraceFlags,
  createTraceState,
  propagation,
  trace,
  type Context,
  type Span,
} from '@opentelemetry/api';

export const TRACEPARENT = 'traceparent';
export const TRACESTATE = 'tracestate';

/** What the kit reads of a message's headers. */
export interface HeaderLike {
  get(name: string): string;
  keys(): string[];
}

const TRACEPARENT_FORMAT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The context a message's headers carry (the root context when they carry none). */
export function contextOfHeaders(headers: HeaderLike | undefined): Context {
  if (!headers) return ROOT_CONTEXT;
  const ctx = propagation.extract(ROOT_CONTEXT, headers, {
    keys: (h) => h.keys(),
    get: (h, key) => h.get(key) || undefined,
  });
  if (trace.getSpanContext(ctx)) return ctx;
  // No propagator registered: read the W3C header itself.
  const m = TRACEPARENT_FORMAT.exec(headers.get(TRACEPARENT).trim());
  if (!m || /^0+$/.test(m[1]!) || /^0+$/.test(m[2]!)) return ROOT_CONTEXT;
  const state = headers.get(TRACESTATE);
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId: m[1]!,
    spanId: m[2]!,
    traceFlags: parseInt(m[3]!, 16) & TraceFlags.SAMPLED,
    isRemote: true,
    ...(state ? { traceState: createTraceState(state) } : {}),
  });
}

/** `traceparent` (and `tracestate`) of a context, or nothing when it holds no valid span. */
export function headersOfContext(ctx: Context): Record<string, string> {
  const out: Record<string, string> = {};
  propagation.inject(ctx, out);
  if (out[TRACEPARENT]) return out;
  const sc = trace.getSpanContext(ctx);
  if (!sc || !trace.isSpanContextValid(sc)) return {};
  const flags = (sc.traceFlags & TraceFlags.SAMPLED).toString(16).padStart(2, '0');
  const state = sc.traceState?.serialize();
  return {
    [TRACEPARENT]: `00-${sc.traceId}-${sc.spanId}-${flags}`,
    ...(state ? { [TRACESTATE]: state } : {}),
  };
}

const tracer = () => trace.getTracer('@recognition/service-kit');

/** The spans of one job message's handling. */
export interface JobTrace {
  /** The context the handler runs in (its own spans become children of the job's). */
  context: Context;
  /** Start an envelope's send span; its headers go on the envelope. */
  send(subject: string, msgId: string): { headers: Record<string, string>; end(err?: unknown): void };
  end(outcome: string): void;
}

function failed(span: Span, err: unknown): void {
  span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
  if (err instanceof Error) span.recordException(err);
}

/** Start `process <subject>`, a child of the job message's context. */
export function startJobTrace(opts: {
  headers: HeaderLike | undefined;
  subject: string;
  jobId: string;
  msgId: string | undefined;
}): JobTrace {
  const parent = contextOfHeaders(opts.headers);
  const base = { 'messaging.system': 'nats', 'recognition.job.id': opts.jobId };
  const span = tracer().startSpan(
    `process ${opts.subject}`,
    {
      kind: SpanKind.CONSUMER,
      attributes: {
        ...base,
        'messaging.operation.type': 'process',
        'messaging.operation': 'process',
        'messaging.destination.name': opts.subject,
        ...(opts.msgId ? { 'messaging.message.id': opts.msgId } : {}),
      },
    },
    parent,
  );
  const ctx = trace.setSpan(parent, span);
  return {
    context: ctx,
    send(subject, msgId) {
      const send = tracer().startSpan(
        `send ${subject}`,
        {
          kind: SpanKind.PRODUCER,
          attributes: {
            ...base,
            'messaging.operation.type': 'send',
            'messaging.operation': 'publish',
            'messaging.destination.name': subject,
            'messaging.message.id': msgId,
          },
        },
        ctx,
      );
      return {
        headers: headersOfContext(trace.setSpan(ctx, send)),
        end(err) {
          if (err !== undefined) failed(send, err);
          send.end();
        },
      };
    },
    end(outcome) {
      span.setAttribute('recognition.service.outcome', outcome);
      if (outcome === 'failed') span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    },
  };
}
