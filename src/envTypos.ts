/**
 * Misspelt variables: an environment variable recognition-core does not read but that is one or two
 * edits from one it does (`DATABSE_URL`), or one of them without its unit (`REPLY_TIMEOUT`), is
 * named at start with the variable meant. Variables other programs read are never named. Pure and
 * free of imports but the tracing names, so the CLI can load it with the configuration only
 * (docs/development.md, "Why the loops are built as they are").
 */
import { OTEL_VARIABLES } from './tracing/env.js';

/**
 * Variables other programs read: never taken for a misspelling of ours. The standard
 * OpenTelemetry SDK variables this process leaves to the SDK's defaults or does not use (see
 * docs/tracing.md), the options of the trace context a caller passes (`jobs create`), and the
 * variables of the local servers the demo and the tests start.
 */
const OTHER_PROGRAMS_VARIABLES: readonly string[] = [
  'TRACEPARENT',
  'TRACESTATE',
  'NATS_SERVER_BIN',
  'PG_BINDIR',
  'OTEL_LOG_LEVEL',
  'OTEL_PROPAGATORS',
  'OTEL_CONFIG_FILE',
  'OTEL_EXPERIMENTAL_CONFIG_FILE',
  'OTEL_SEMCONV_STABILITY_OPT_IN',
  'OTEL_NODE_RESOURCE_DETECTORS',
  'OTEL_NODE_ENABLED_INSTRUMENTATIONS',
  'OTEL_NODE_DISABLED_INSTRUMENTATIONS',
  'OTEL_METRICS_EXPORTER',
  'OTEL_LOGS_EXPORTER',
  'OTEL_METRIC_EXPORT_INTERVAL',
  'OTEL_METRIC_EXPORT_TIMEOUT',
  'OTEL_METRICS_EXEMPLAR_FILTER',
  'OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE',
  'OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION',
  'OTEL_EXPORTER_ZIPKIN_ENDPOINT',
  'OTEL_EXPORTER_ZIPKIN_TIMEOUT',
  'OTEL_EXPORTER_PROMETHEUS_HOST',
  'OTEL_EXPORTER_PROMETHEUS_PORT',
  'OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT',
  'OTEL_ATTRIBUTE_COUNT_LIMIT',
  'OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT',
  'OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT',
  'OTEL_SPAN_EVENT_COUNT_LIMIT',
  'OTEL_SPAN_LINK_COUNT_LIMIT',
  'OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT',
  'OTEL_LINK_ATTRIBUTE_COUNT_LIMIT',
  'OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT',
  'OTEL_LOGRECORD_ATTRIBUTE_COUNT_LIMIT',
  ...['SCHEDULE_DELAY', 'EXPORT_TIMEOUT', 'MAX_QUEUE_SIZE', 'MAX_EXPORT_BATCH_SIZE'].map(
    (s) => `OTEL_BLRP_${s}`,
  ),
  // The OTLP exporter's variables: every signal, every setting.
  ...['', 'TRACES_', 'METRICS_', 'LOGS_'].flatMap((signal) =>
    [
      'ENDPOINT',
      'PROTOCOL',
      'HEADERS',
      'TIMEOUT',
      'COMPRESSION',
      'INSECURE',
      'CERTIFICATE',
      'CLIENT_KEY',
      'CLIENT_CERTIFICATE',
    ].map((s) => `OTEL_EXPORTER_OTLP_${signal}${s}`),
  ),
];

/** One misspelt variable and the variable it is close to. */
export interface EnvTypo {
  /** The variable as set. */
  name: string;
  /** The variable recognition-core reads that it is closest to. */
  suggestion: string;
}

/**
 * The optimal string alignment distance of `a` and `b`: the fewest insertions, deletions,
 * substitutions and swaps of two adjacent characters that turn one into the other, no substring
 * edited twice. Symmetric; 0 only for equal strings.
 */
export function editDistance(a: string, b: string): number {
  if (a === b) return 0;
  // Three rows of the matrix: the one before the previous (for swaps), the previous, the current.
  let before: number[] = [];
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        d = Math.min(d, before[j - 2]! + 1);
      current.push(d);
    }
    before = previous;
    previous = current;
  }
  return previous[b.length]!;
}

/** The most edits a variable may be from `known` and still count as a misspelling of it. */
function allowedEdits(known: string): number {
  return known.length < 8 ? 1 : 2;
}

/**
 * The variables of the process `configVariables` (every name the configuration reads, `_FILE`
 * forms included) are checked against: those and the `OTEL_*` variables of the tracing rule.
 */
export function knownVariables(configVariables: Iterable<string>): string[] {
  return [...new Set([...configVariables, ...OTEL_VARIABLES])];
}

/**
 * The variables set in `env` (non-empty names) that recognition-core does not read but that are
 * within the allowed edits of one in `known` (see the rule above), each with the closest; sorted
 * by name. Pure.
 */
export function findEnvTypos(env: NodeJS.ProcessEnv, known: readonly string[]): EnvTypo[] {
  const exact = new Set(known);
  const elsewhere = new Set(OTHER_PROGRAMS_VARIABLES);
  const typos: EnvTypo[] = [];
  for (const name of Object.keys(env).sort()) {
    const upper = name.toUpperCase();
    if (exact.has(name) || elsewhere.has(upper)) continue;
    let best: { known: string; distance: number } | undefined =
      exact.has(`${upper}_MS`) && !exact.has(upper) ? { known: `${upper}_MS`, distance: 0 } : undefined;
    for (const k of known) {
      if (Math.abs(k.length - upper.length) > allowedEdits(k)) continue;
      const distance = editDistance(upper, k);
      if (distance <= allowedEdits(k) && (best === undefined || distance < best.distance))
        best = { known: k, distance };
    }
    if (best) typos.push({ name, suggestion: best.known });
  }
  return typos;
}

/** `DATABSE_URL: did you mean DATABASE_URL?` for each misspelling, joined into one line. */
export function envTypoMessage(typos: readonly EnvTypo[]): string {
  return typos.map((t) => `${t.name}: did you mean ${t.suggestion}?`).join('; ');
}
