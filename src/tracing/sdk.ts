/**
 * OpenTelemetry's SDK for this process: a Node tracer provider exporting OTLP/HTTP (JSON) in
 * batches, the W3C propagator, an AsyncLocalStorage context manager and the pg instrumentation.
 * Loaded only by dynamic import when `./env.ts` says so, and before `pg` is first imported (the
 * instrumentation patches it as it loads). Its parts read their standard `OTEL_*` variables.
 */
import { context, diag, DiagConsoleLogger, DiagLogLevel, propagation, trace } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { PgInstrumentation } from '@opentelemetry/instrumentation-pg';
import { detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import {
  BatchSpanProcessor,
  NodeTracerProvider,
  SimpleSpanProcessor,
  type SpanExporter,
} from '@opentelemetry/sdk-trace-node';
import { setTracingActive } from './tracing.js';

/** A started SDK. */
export interface TracingSdk {
  /** Export every span ended so far. */
  forceFlush(): Promise<void>;
  /** Export what is left, then unregister everything (the API is a no-op again). */
  shutdown(): Promise<void>;
}

export interface TracingSdkOptions {
  /** `service.name` unless OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) says otherwise. */
  serviceName: string;
  /**
   * Where spans go instead of OTLP, each as it ends (unit tests pass an in-memory exporter).
   * Default: the OTLP/HTTP exporter behind a batch processor.
   */
  exporter?: SpanExporter;
  /** Record queries of `pg` as spans (default true; only under a span of ours). */
  pg?: boolean;
}

/** Start the SDK and register it as this process's global provider. */
export function startTracingSdk(opts: TracingSdkOptions): TracingSdk {
  // Export failures (a collector that is down) are reported on stderr, not swallowed.
  diag.setLogger(new DiagConsoleLogger(), DiagLogLevel.WARN);
  const resource = resourceFromAttributes({ 'service.name': opts.serviceName }).merge(
    detectResources({ detectors: [envDetector] }),
  );
  const processor = opts.exporter
    ? new SimpleSpanProcessor(opts.exporter)
    : new BatchSpanProcessor(new OTLPTraceExporter());
  const provider = new NodeTracerProvider({ resource, spanProcessors: [processor] });
  provider.register();
  const unregister =
    opts.pg === false
      ? () => undefined
      : registerInstrumentations({
          tracerProvider: provider,
          // Only queries made inside a span of ours: the polls of idle loops would otherwise be
          // a root trace each, every few seconds.
          instrumentations: [new PgInstrumentation({ requireParentSpan: true })],
        });
  setTracingActive(true);
  return {
    forceFlush: () => provider.forceFlush(),
    async shutdown() {
      setTracingActive(false);
      unregister();
      try {
        await provider.shutdown();
      } finally {
        trace.disable();
        context.disable();
        propagation.disable();
        diag.disable();
      }
    },
  };
}
