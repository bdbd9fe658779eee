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

const REDACT_KEYS: ReadonlySet<string> = new Set([
  'password',
  'pass',
  'token',
  'creds',
  'credentials',
  'secret',
  'authorization',
  'auth_token',
]);

/**
 * What removes secrets from a line. Both functions return their input itself when nothing in it
 * needs removing, so a line without secrets (nearly every line) costs no copy.
 */
function scrubber(secrets: readonly string[]) {
  const sorted = [...secrets].sort((a, b) => b.length - a.length);
  const scrubString = (s: string) => {
    // A URL with a password has an '@' after it: no '@', nothing for redactUrl to do.
    let out = s.includes('@') ? redactUrl(s) : s;
    for (const secret of sorted) if (out.includes(secret)) out = out.split(secret).join('[REDACTED]');
    return out;
  };
  const scrub = (value: unknown, depth = 0): unknown => {
    if (typeof value === 'string') return scrubString(value);
    if (depth > 8 || value === null || typeof value !== 'object') return value;
    if (Array.isArray(value)) {
      let copy: unknown[] | undefined;
      for (let i = 0; i < value.length; i++) {
        const v: unknown = value[i];
        const clean = scrub(v, depth + 1);
        if (clean !== v) (copy ??= [...(value as unknown[])])[i] = clean;
      }
      return copy ?? value;
    }
    const proto: unknown = Object.getPrototypeOf(value);
    const plain = proto === Object.prototype || proto === null;
    // Anything but a plain object is logged as the plain object of its own enumerable fields.
    let copy: Record<string, unknown> | undefined = plain ? undefined : {};
    const record = value as Record<string, unknown>;
    const keys = Object.keys(record);
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i]!;
      const v = record[k];
      const clean = REDACT_KEYS.has(k.toLowerCase()) && v ? '[REDACTED]' : scrub(v, depth + 1);
      if (copy === undefined && clean !== v) {
        copy = {};
        for (let j = 0; j < i; j++) copy[keys[j]!] = record[keys[j]!];
      }
      if (copy !== undefined) copy[k] = clean;
    }
    return copy ?? value;
  };
  return { scrub, scrubString };
}

/**
 * The `time` of a line, ISO 8601 in UTC as pino's `isoTime` writes it, formatted once per
 * millisecond: the inbox logs a batch's lines within the same few milliseconds.
 */
let stampMs = NaN;
let stamp = '';
function isoTime(): string {
  const ms = Date.now();
  if (ms !== stampMs) {
    stampMs = ms;
    stamp = `,"time":"${new Date(ms).toISOString()}"`;
  }
  return stamp;
}

/**
 * The most a single write of the log stream carries: one write call for dozens of lines, each call
 * a round through the thread pool.
 */
const LOG_MAX_WRITE = 65_536;

/**
 * The stream the daemon logs to: `dest` (a file descriptor, stdout by default, or a file path),
 * written asynchronously as pino's own stream is — a line logged while a write is in flight goes
 * out with the next one, and what is left is flushed when the process exits.
 *
 * The stream holds bytes, not text: each line is encoded once, as it is logged. Holding text, the
 * stream would measure the byte length of all it has not written yet at every line, flattening
 * that text each time; holding buffers, it adds one line's length and joins the buffers once per
 * write.
 */
export function logDestination(dest: number | string = 1): ReturnType<typeof pino.destination> {
  const stream = pino.destination({ dest, sync: false, contentMode: 'buffer', maxWrite: LOG_MAX_WRITE });
  // In buffer mode the stream's own `write` (an instance property) takes only buffers; pino
  // writes strings.
  const writeBytes = stream.write.bind(stream) as unknown as (chunk: Uint8Array) => boolean;
  stream.write = (line: string) => writeBytes(Buffer.from(line, 'utf8'));
  return stream;
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
    timestamp: isoTime,
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
        for (let i = 0; i < args.length; i++) {
          const a: unknown = args[i];
          if (typeof a === 'string') (args as unknown[])[i] = scrubString(a);
        }
        method.apply(this, args);
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
  return pino(options, logDestination());
}

let warningTarget: Logger | undefined;

/**
 * Send the process's warnings (`process.emitWarning`: deprecations, a library's warning) to
 * `logger` as one JSON line each (`event: process_warning`, at warn), instead of Node's own
 * multi-line plain text on stderr, which would break a stream of JSON lines. The last call wins;
 * Node's own printing is removed on the first.
 */
export function routeProcessWarnings(logger: Logger): void {
  if (warningTarget === undefined) {
    process.removeAllListeners('warning');
    process.on('warning', (warning: Error & { code?: string }) => {
      warningTarget?.warn(
        {
          event: 'process_warning',
          warning: { name: warning.name, code: warning.code, message: warning.message },
        },
        `${warning.name}: ${warning.message.split('\n')[0]}`,
      );
    });
  }
  warningTarget = logger;
}
