/**
 * When tracing is on, from the standard `OTEL_*` variables (docs/tracing.md): off with
 * `OTEL_SDK_DISABLED=true`; else on when `OTEL_TRACES_EXPORTER` names `otlp`, or, when that is
 * unset, when an OTLP endpoint is set. Unset variables leave tracing off. Pure and free of imports,
 * so the launcher can ask before OpenTelemetry's SDK is loaded.
 */

/** The standard variables the rule and the SDK read (listed in docs/tracing.md). */
export const OTEL_VARIABLES = [
  'OTEL_SDK_DISABLED',
  'OTEL_TRACES_EXPORTER',
  'OTEL_EXPORTER_OTLP_ENDPOINT',
  'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT',
  'OTEL_EXPORTER_OTLP_PROTOCOL',
  'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL',
  'OTEL_EXPORTER_OTLP_HEADERS',
  'OTEL_EXPORTER_OTLP_TRACES_HEADERS',
  'OTEL_EXPORTER_OTLP_TIMEOUT',
  'OTEL_EXPORTER_OTLP_COMPRESSION',
  'OTEL_SERVICE_NAME',
  'OTEL_RESOURCE_ATTRIBUTES',
  'OTEL_TRACES_SAMPLER',
  'OTEL_TRACES_SAMPLER_ARG',
  'OTEL_BSP_SCHEDULE_DELAY',
  'OTEL_BSP_MAX_QUEUE_SIZE',
  'OTEL_BSP_MAX_EXPORT_BATCH_SIZE',
  'OTEL_BSP_EXPORT_TIMEOUT',
] as const;

/** What the rule decided, with the reason in words (for `demo --trace` and start-up lines). */
export interface TracingRequest {
  on: boolean;
  reason: string;
  /** Lines to print once at start: a variable set to something this process does not do. */
  warnings: string[];
}

const set = (v: string | undefined): v is string => v !== undefined && v.trim() !== '';

/** Decide from `env` whether to start the SDK. Pure. */
export function tracingRequest(env: NodeJS.ProcessEnv): TracingRequest {
  const warnings: string[] = [];
  if (set(env.OTEL_SDK_DISABLED) && env.OTEL_SDK_DISABLED.trim().toLowerCase() === 'true') {
    return { on: false, reason: 'OTEL_SDK_DISABLED=true', warnings };
  }
  let on: boolean;
  let reason: string;
  if (set(env.OTEL_TRACES_EXPORTER)) {
    const names = env.OTEL_TRACES_EXPORTER.split(',').map((s) => s.trim().toLowerCase());
    const other = names.filter((n) => n !== 'otlp' && n !== 'none' && n !== '');
    if (other.length > 0)
      warnings.push(`OTEL_TRACES_EXPORTER: ${other.join(', ')} not supported here (only otlp); ignored`);
    on = names.includes('otlp');
    reason = on ? 'OTEL_TRACES_EXPORTER names otlp' : `OTEL_TRACES_EXPORTER=${env.OTEL_TRACES_EXPORTER}`;
  } else if (set(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) || set(env.OTEL_EXPORTER_OTLP_ENDPOINT)) {
    on = true;
    reason = set(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
      ? 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set'
      : 'OTEL_EXPORTER_OTLP_ENDPOINT is set';
  } else {
    on = false;
    reason = 'no OTEL_TRACES_EXPORTER and no OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT';
  }
  if (on) {
    const protocol = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL;
    if (set(protocol) && protocol.trim() !== 'http/json')
      warnings.push(`OTEL_EXPORTER_OTLP_PROTOCOL=${protocol}: this process sends OTLP over HTTP as JSON`);
  }
  return { on, reason, warnings };
}
