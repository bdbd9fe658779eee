/**
 * The root pino logger. JSON lines by default; pretty when a person runs it in a terminal.
 * Secrets never reach a line: keys that name secrets are redacted, URLs lose their passwords, and
 * the configured secret values are scrubbed wherever they appear (messages, errors, stacks).
 * Every Error, under whatever key and however deep, is logged with what names it (see
 * {@link errorRecord}).
 */
import { types } from 'node:util';
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

/** The errors of an AggregateError a line shows, at most: the rest are counted. */
const MAX_AGGREGATED_ERRORS = 10;

/** How deep the scrubber walks a line's object; an error deeper down keeps its type and message. */
const MAX_DEPTH = 8;

function isError(value: object): value is Error {
  return value instanceof Error || types.isNativeError(value);
}

function errorType(err: Error): string {
  const ctor: unknown = (err as { constructor?: unknown }).constructor;
  const name = typeof ctor === 'function' ? ctor.name : '';
  return name && name !== 'Object' ? name : typeof err.name === 'string' && err.name ? err.name : 'Error';
}

/**
 * The message of an error, never empty: an AggregateError (what `net` throws when every address of
 * a host refuses) often has none of its own and is named by its errors' messages, else by its code.
 */
function errorMessage(err: Error): string {
  if (typeof err.message === 'string' && err.message !== '') return err.message;
  const errors: unknown = (err as { errors?: unknown }).errors;
  if (Array.isArray(errors)) {
    const inner = errors
      .filter((e): e is Error => typeof e === 'object' && e !== null && isError(e) && e.message !== '')
      .map((e) => e.message);
    if (inner.length > 0) return [...new Set(inner)].join('; ');
  }
  const code: unknown = (err as { code?: unknown }).code;
  return typeof code === 'string' && code !== '' ? code : errorType(err);
}

/**
 * What removes secrets from a line and gives each error its fields. Both functions return their
 * input itself when nothing in it needs removing, so a line without secrets or errors (nearly every
 * line) costs no copy.
 */
function scrubber(secrets: readonly string[]) {
  const sorted = [...secrets].sort((a, b) => b.length - a.length);
  const scrubString = (s: string) => {
    // A URL's password or token comes before an '@', or after `password=`: with neither, nothing
    // for redactUrl to do.
    let out = s.includes('@') || s.includes('password=') ? redactUrl(s) : s;
    for (const secret of sorted) if (out.includes(secret)) out = out.split(secret).join('[REDACTED]');
    return out;
  };
  /**
   * An error as a line shows it: `type`, `message`, `code` when it has one, its other own fields
   * (pg's `detail`, `constraint`, a system error's `syscall`, `address`, `port`), an
   * AggregateError's `errors`, the `cause` chain, and `stack` when asked for. Message, stack and
   * fields are text written by others (a driver's message quotes the URL it failed on), so they are
   * scrubbed like the rest of the line.
   */
  const errorRecord = (err: Error, depth: number, withStack: boolean, chain = new Set<Error>()) => {
    const out: Record<string, unknown> = { type: errorType(err), message: scrubString(errorMessage(err)) };
    if (depth > MAX_DEPTH) return out;
    const code: unknown = (err as { code?: unknown }).code;
    if (code !== undefined && code !== null) out.code = scrub(code, depth + 1, withStack, chain);
    chain.add(err);
    const record = err as unknown as Record<string, unknown>;
    for (const k of Object.keys(record)) {
      if (k === 'message' || k === 'stack' || k === 'code' || k === 'cause' || k === 'errors') continue;
      const v = record[k];
      if (v === undefined || typeof v === 'function' || (k === 'name' && v === out.type)) continue;
      out[k] = REDACT_KEYS.has(k.toLowerCase()) && v ? '[REDACTED]' : scrub(v, depth + 1, withStack, chain);
    }
    const errors: unknown = record.errors;
    if (Array.isArray(errors) && errors.length > 0) {
      out.errors = errors
        .slice(0, MAX_AGGREGATED_ERRORS)
        .map((e: unknown) => scrub(e, depth + 1, withStack, chain));
      if (errors.length > MAX_AGGREGATED_ERRORS) out.errors_omitted = errors.length - MAX_AGGREGATED_ERRORS;
    }
    const cause: unknown = record.cause;
    if (cause !== undefined) out.cause = scrub(cause, depth + 1, withStack, chain);
    if (withStack && typeof err.stack === 'string') out.stack = scrubString(err.stack);
    chain.delete(err);
    return out;
  };
  // `chain`: the errors whose record is being made, so that a cause that loops back ends the walk.
  const scrub = (value: unknown, depth = 0, withStack = false, chain?: Set<Error>): unknown => {
    if (typeof value === 'string') return scrubString(value);
    if (value === null || typeof value !== 'object') return value;
    if (Array.isArray(value)) {
      if (depth > MAX_DEPTH) return value;
      let copy: unknown[] | undefined;
      for (let i = 0; i < value.length; i++) {
        const v: unknown = value[i];
        const clean = scrub(v, depth + 1, withStack, chain);
        if (clean !== v) (copy ??= [...(value as unknown[])])[i] = clean;
      }
      return copy ?? value;
    }
    const proto: unknown = Object.getPrototypeOf(value);
    const plain = proto === Object.prototype || proto === null;
    if (!plain && isError(value))
      return chain?.has(value) ? '[Circular]' : errorRecord(value, depth, withStack, chain);
    if (depth > MAX_DEPTH) return value;
    // Anything but a plain object or an error is logged as the plain object of its own enumerable fields.
    let copy: Record<string, unknown> | undefined = plain ? undefined : {};
    const record = value as Record<string, unknown>;
    const keys = Object.keys(record);
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i]!;
      const v = record[k];
      const clean =
        REDACT_KEYS.has(k.toLowerCase()) && v ? '[REDACTED]' : scrub(v, depth + 1, withStack, chain);
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
  // Whether the line being logged shows stacks: the logger that logs it is at debug or below. Set
  // by logMethod just before pino formats the line, synchronously, in the same call.
  let withStack = false;
  const options: pino.LoggerOptions = {
    level: opts.level ?? 'info',
    base: { service: 'recognition-core', ...opts.base },
    timestamp: isoTime,
    // Lines logged inside a span carry its trace_id and span_id. Only when tracing was started
    // before the logger was made: otherwise no line pays for it.
    ...(tracingActive() ? { mixin: traceLogMixin } : {}),
    serializers: {
      // The log formatter below has already made every error a plain record: pino's own
      // serializer would make it one again, as an `Object`.
      err: (err: unknown) => err,
    },
    formatters: {
      level: (label) => ({ level: label }),
      log: (obj) => scrub(obj, 0, withStack) as Record<string, unknown>,
    },
    hooks: {
      logMethod(args, method) {
        for (let i = 0; i < args.length; i++) {
          const a: unknown = args[i];
          if (typeof a === 'string') (args as unknown[])[i] = scrubString(a);
        }
        // A line logged with an error and no message of its own takes the error's message, as
        // pino would, but scrubbed and never empty.
        if (args.length === 1 && typeof args[0] === 'object' && args[0] !== null) {
          const obj = args[0] as { err?: unknown; msg?: unknown };
          const err = isError(obj) ? obj : obj.msg === undefined ? obj.err : undefined;
          if (typeof err === 'object' && err !== null && isError(err))
            (args as unknown[]).push(scrubString(errorMessage(err)));
        }
        withStack = this.isLevelEnabled('debug');
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
