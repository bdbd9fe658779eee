/**
 * Checking a W3C trace context given on the command line (`jobs create --traceparent`), with the
 * W3C propagator's own parser. Imported only when one is given: it loads `@opentelemetry/core`.
 */
import { parseTraceParent, TraceState } from '@opentelemetry/core';
import type { TraceCarrier } from './tracing.js';

/** W3C Trace Context's limit on what a vendor must pass on of `tracestate`. */
const TRACE_STATE_MAX_CHARS = 512;

/**
 * The carrier to store, normalized to the `00-<trace id>-<span id>-<flags>` form the job row
 * accepts; throws an Error naming what is wrong.
 */
export function checkedCarrier(traceparent: string, tracestate: string | undefined): TraceCarrier {
  const sc = parseTraceParent(traceparent.trim());
  if (!sc) {
    throw new Error(
      `--traceparent is not a W3C traceparent (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>): ${JSON.stringify(traceparent)}`,
    );
  }
  const normalized = `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
  if (tracestate === undefined || tracestate.trim() === '') return { traceparent: normalized };
  const state = new TraceState(tracestate).serialize();
  if (state === '')
    throw new Error(`--tracestate holds no valid W3C list member: ${JSON.stringify(tracestate)}`);
  if (state.length > TRACE_STATE_MAX_CHARS)
    throw new Error(`--tracestate is longer than ${TRACE_STATE_MAX_CHARS} characters`);
  return { traceparent: normalized, tracestate: state };
}
