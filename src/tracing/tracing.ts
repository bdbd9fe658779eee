/**
 * Tracing through the standard API (`@opentelemetry/api`) only: whether a tracer provider was
 * started, W3C trace context in and out of message headers, and the fields log lines carry. Without
 * a started SDK every helper is a check of one boolean. A *carrier* is a W3C trace context as text
 * (`traceparent`, optionally `tracestate`), as the job row stores it and the headers carry it.
 */
import {
  context,
  propagation,
  ROOT_CONTEXT,
  trace,
  type Context,
  type Span,
  type TextMapGetter,
  type Tracer,
} from '@opentelemetry/api';

/** The W3C headers, as NATS messages carry them (lowercase, as W3C spells them). */
export const TRACEPARENT = 'traceparent';
export const TRACESTATE = 'tracestate';

/** A W3C trace context as text: what the job row stores and the messages' headers carry. */
export interface TraceCarrier {
  traceparent: string;
  tracestate?: string | null;
}

let active = false;

/** Whether an SDK is started in this process (set by `src/tracing/sdk.ts`). */
export function tracingActive(): boolean {
  return active;
}

/** Set by the SDK when it starts and stops; nothing else calls it. */
export function setTracingActive(on: boolean): void {
  active = on;
}

/** The tracer of this process's spans. */
export function tracer(): Tracer {
  return trace.getTracer('recognition-core');
}

/** Headers as the inbox keeps them: name → values. W3C names are matched case-insensitively. */
const recordGetter: TextMapGetter<Readonly<Record<string, readonly string[]>>> = {
  keys: (carrier) => Object.keys(carrier),
  get(carrier, key) {
    const exact = carrier[key];
    if (exact) return exact[0];
    for (const k of Object.keys(carrier)) if (k.toLowerCase() === key) return carrier[k]![0];
    return undefined;
  },
};

/** NATS message headers (`MsgHdrs`): `get` returns '' for a missing header. */
export interface HeaderReader {
  get(name: string): string;
  keys(): string[];
}

const readerGetter: TextMapGetter<HeaderReader> = {
  keys: (carrier) => carrier.keys(),
  get: (carrier, key) => carrier.get(key) || undefined,
};

const carrierGetter: TextMapGetter<TraceCarrier> = {
  keys: () => [TRACEPARENT, TRACESTATE],
  get: (carrier, key) =>
    key === TRACEPARENT
      ? carrier.traceparent
      : key === TRACESTATE
        ? (carrier.tracestate ?? undefined)
        : undefined,
};

/** The context a stored or received carrier names (the root context when there is none). */
export function contextOf(carrier: TraceCarrier | undefined | null): Context {
  if (!carrier) return ROOT_CONTEXT;
  return propagation.extract(ROOT_CONTEXT, carrier, carrierGetter);
}

/** The context headers kept as name → values carry (the root context when they carry none). */
export function contextOfHeaderRecord(headers: Readonly<Record<string, readonly string[]>>): Context {
  return propagation.extract(ROOT_CONTEXT, headers, recordGetter);
}

/** The context NATS headers carry (the root context when they carry none, or there are none). */
export function contextOfHeaders(headers: HeaderReader | undefined): Context {
  if (!headers) return ROOT_CONTEXT;
  return propagation.extract(ROOT_CONTEXT, headers, readerGetter);
}

/** The carrier of a NATS message's headers as they came, or undefined without `traceparent`. */
export function carrierOfHeaders(headers: HeaderReader | undefined): TraceCarrier | undefined {
  const traceparent = headers?.get(TRACEPARENT);
  if (!traceparent) return undefined;
  const tracestate = headers!.get(TRACESTATE);
  return tracestate ? { traceparent, tracestate } : { traceparent };
}

/** The carrier of `ctx` (W3C propagator), or undefined when it holds no valid span context. */
export function carrierOf(ctx: Context): TraceCarrier | undefined {
  const out: Record<string, string> = {};
  propagation.inject(ctx, out);
  if (!out[TRACEPARENT]) return undefined;
  return out[TRACESTATE]
    ? { traceparent: out[TRACEPARENT], tracestate: out[TRACESTATE] }
    : { traceparent: out[TRACEPARENT] };
}

/** A carrier as header fields: `traceparent` and, when present, `tracestate`. */
export function headerFieldsOf(carrier: TraceCarrier): Record<string, string> {
  return carrier.tracestate
    ? { [TRACEPARENT]: carrier.traceparent, [TRACESTATE]: carrier.tracestate }
    : { [TRACEPARENT]: carrier.traceparent };
}

/** The fields a log line about a span's work carries. */
export interface TraceLogFields {
  trace_id: string;
  span_id: string;
}

/** `trace_id` and `span_id` of a span (of a valid span context; else undefined). */
export function logFieldsOf(span: Span | undefined): TraceLogFields | undefined {
  if (!span) return undefined;
  const sc = span.spanContext();
  if (!trace.isSpanContextValid(sc)) return undefined;
  return { trace_id: sc.traceId, span_id: sc.spanId };
}

/**
 * A pino mixin adding `trace_id` and `span_id` of the active span to every line logged inside it;
 * a line's own fields win. A fresh object each time: pino merges the line's fields into it.
 */
export function traceLogMixin(): object {
  if (!active) return {};
  return logFieldsOf(trace.getSpan(context.active())) ?? {};
}

/** Something that holds a span's context to run work in. */
export interface Traced {
  context: Context;
  /** End the spans as failed (the work threw). */
  fail(err: unknown): void;
}

/**
 * Run `fn` with `t`'s context active (the pg instrumentation then records the queries as its
 * children); without `t`, just run it. A rejection fails `t`'s spans, then propagates.
 */
export function runTraced<T>(t: Traced | undefined, fn: () => Promise<T>): Promise<T> {
  if (!t) return fn();
  return context.with(t.context, fn).catch((err: unknown) => {
    t.fail(err);
    throw err;
  });
}
