/**
 * The root pino logger. JSON lines by default; pretty when a person runs it in a terminal.
 * Secrets never reach a line: keys that name secrets are redacted, URLs lose their passwords, and
 * the configured secret values are scrubbed wherever they appear (messages, errors, stacks).
 */
import pino, { type DestinationStream, type Logger } from 'pino';
import { redactUrl } from './config.js';
import { traceLogMixin, tracingActive } from './tracing/tracing.js';

export type { Logger };

export interface LoggerOptions {
  level?: string;
  pretty?: boolean;
  /** Secret values to scrub from every line. */
  secrets?: readonly string[];
  /** Where lines go (tests pass a sink); default stdout. */
  destination?: DestinationStream;
  base?: Record<string, unknown>;
}

const REDACT_KEYS = [
  'password',
  'pass',
  'token',
  'creds',
  'credentials',
  'secret',
  'authorization',
  'auth_token',
];

function scrubber(secrets: readonly string[]) {
  const sorted = [...secrets].sort((a, b) => b.length - a.length);
  const scrubString = (s: string) => {
    let out = redactUrl(s);
    for (const secret of sorted) if (out.includes(secret)) out = out.split(secret).join('[REDACTED]');
    return out;
  };
  const scrub = (value: unknown, depth = 0): unknown => {
    if (typeof value === 'string') return scrubString(value);
    if (depth > 8 || value === null || typeof value !== 'object') return value;
    if (Array.isArray(value)) return value.map((v) => scrub(v, depth + 1));
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      out[k] = REDACT_KEYS.includes(k.toLowerCase()) && v ? '[REDACTED]' : scrub(v, depth + 1);
    }
    return out;
  };
  return { scrub, scrubString };
}

/**
 * Create the root logger. Children carry `job_id`, `msg_id`; errors go under `err`; with tracing
 * on, lines logged inside a span carry `trace_id` and `span_id`.
 */
export function createLogger(opts: LoggerOptions = {}): Logger {
  const { scrub, scrubString } = scrubber(opts.secrets ?? []);
  const options: pino.LoggerOptions = {
    level: opts.level ?? 'info',
    base: { service: 'recognition-core', ...opts.base },
    timestamp: pino.stdTimeFunctions.isoTime,
    // Lines logged inside a span carry its trace_id and span_id. Only when tracing was started
    // before the logger was made: otherwise no line pays for it.
    ...(tracingActive() ? { mixin: traceLogMixin } : {}),
    serializers: {
      err: (err: unknown) => scrub(pino.stdSerializers.err(err as Error)),
    },
    formatters: {
      level: (label) => ({ level: label }),
      log: (obj) => scrub(obj) as Record<string, unknown>,
    },
    hooks: {
      logMethod(args, method) {
        const clean = args.map((a) => (typeof a === 'string' ? scrubString(a) : a)) as Parameters<
          typeof method
        >;
        method.apply(this, clean);
      },
    },
  };
  if (opts.destination) return pino(options, opts.destination);
  if (opts.pretty) {
    return pino({
      ...options,
      transport: { target: 'pino-pretty', options: { colorize: true, translateTime: 'SYS:HH:MM:ss.l' } },
    });
  }
  return pino(options);
}
