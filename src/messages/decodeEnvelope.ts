/**
 * Turns the raw bytes of a `recognition.result` message into a typed envelope, or into the
 * quarantine reason that says why it can never be applied.
 */
import { isUtf8 } from 'node:buffer';
import { QUARANTINE_REASON, RESULT_STATUSES } from '../../machines/statuses.js';
import type { QuarantineReason } from '../../machines/statuses.js';
import { ID_TEXT_MAX, storableText } from './quarantineRecord.js';
import { checkResultEnvelope } from './schemas.js';
import type { ResultEnvelope, SchemaError } from './schemas.js';

/**
 * Longest `Nats-Msg-Id` accepted, in characters (docs/contract.md). The contract's ids
 * (`result:<job_id>:<attempt>`) are about 50; a longer id, or one PostgreSQL cannot store (U+0000,
 * an unpaired surrogate), is refused: it would be stored on the job and in every log line.
 */
export const MSG_ID_MAX_LENGTH = 256;

/**
 * A payload from this size on is schema-checked by the bounded explanation alone (see
 * `checkResultEnvelope`): one walk over a hostile object's keys instead of two. Smaller ones,
 * nearly every envelope, take the faster deciding validator first.
 */
const LARGE_PAYLOAD_BYTES = 64 * 1024;

/** Longest `service.name` a refused envelope's quarantine line and metric read (the schema's bound). */
const SERVICE_NAME_MAX = 200;

/**
 * Deepest nesting of arrays/objects accepted. Envelopes are shallow (metrics a few levels at most);
 * the bound keeps anything that later walks or re-serialises the value recursively (loggers,
 * `JSON.stringify` into a jsonb column) from overflowing the stack.
 */
export const MAX_JSON_DEPTH = 64;

/**
 * Keys that can reach `Object.prototype` when a parsed object is later merged or spread.
 * `JSON.parse` itself makes them harmless own properties, but no legitimate envelope uses them.
 */
const FORBIDDEN_KEYS: ReadonlySet<string> = new Set(['__proto__', 'constructor', 'prototype']);

/** An unpaired UTF-16 surrogate (`\ud800` in JSON text): PostgreSQL text and jsonb refuse it. */
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;

/** A byte order mark, which a UTF-8 decoder drops at the start of a text. */
const BOM = 0xfeff;

/**
 * The text of UTF-8 `data`, or null when it is not valid UTF-8 (a leading byte order mark
 * dropped, as a UTF-8 decoder does). The check and the decoding are Node's native ones, several
 * times cheaper than a `TextDecoder` that throws on an invalid byte.
 */
function utf8Text(data: Uint8Array): string | null {
  if (!isUtf8(data)) return null;
  const text = Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('utf8');
  return text.charCodeAt(0) === BOM ? text.slice(1) : text;
}

/** What {@link decodeEnvelope} returns: the envelope, or a quarantine reason with its details. */
export type DecodeResult =
  | { ok: true; envelope: ResultEnvelope; msgId: string | null }
  | {
      ok: false;
      reason: QuarantineReason;
      details: unknown;
      jobId?: string | undefined;
      msgId?: string | null;
      /** The envelope's `service.name` when it can be read (a string, cut to the schema's bound). */
      serviceName?: string;
    };

/** The raw message: its payload, its `Nats-Msg-Id` header (`''` or `undefined` when absent), the size limit. */
export interface DecodeInput {
  data: Uint8Array;
  msgId: string | undefined;
  maxBytes: number;
}

/**
 * Decodes one message from `recognition.result`. Pure; never throws, whatever the input.
 *
 * Checks, in order, each failure naming the first that fails:
 * 1. `data` longer than `maxBytes` → `PAYLOAD_TOO_LARGE`, details `{ bytes, limit }`;
 * 2. not UTF-8, not JSON, a `__proto__`/`constructor`/`prototype` key at any depth, nesting deeper
 *    than {@link MAX_JSON_DEPTH}, or a string/key PostgreSQL cannot store (U+0000, an unpaired
 *    surrogate) → `INVALID_JSON`, details `{ message }`;
 * 3. not valid against the result envelope schema → `SCHEMA_INVALID`, details `{ errors, error_count }`:
 *    the first few Ajv errors (`instancePath`, `schemaPath`, `keyword`, `params`, `message`) and
 *    how many there are in all;
 * 4. a `Nats-Msg-Id` longer than {@link MSG_ID_MAX_LENGTH} or holding U+0000 or an unpaired
 *    surrogate → `SCHEMA_INVALID`, one error of keyword `header`;
 * 5. a result (`done`/`needs_check`/`error`) without a msg id → `MISSING_MSG_ID`.
 *
 * An ack (`processing`) needs no msg id. `msgId` is `null` when the header is absent or empty, the
 * header value otherwise (on a failure, cut and escaped as quarantine stores it). A failure carries
 * `jobId` whenever the payload has a string `job_id` (cut to the length quarantine stores), and
 * `serviceName` whenever it has a string `service.name`.
 * Strings in the envelope are kept verbatim; unknown top-level fields are kept too.
 */
export function decodeEnvelope(input: DecodeInput): DecodeResult {
  try {
    return decode(input);
  } catch (err) {
    // Unreachable for a Uint8Array; guards against a caller passing something else at runtime.
    return {
      ok: false,
      reason: QUARANTINE_REASON.INVALID_JSON,
      details: { message: `undecodable: ${describe(err)}` },
    };
  }
}

function decode({ data, msgId: header, maxBytes }: DecodeInput): DecodeResult {
  const msgId = typeof header === 'string' && header !== '' ? header : null;
  const failMsgId = msgId === null ? null : storableText(msgId, ID_TEXT_MAX).text;
  /** What of the payload a failure reports, once it is read. */
  const read: { serviceName?: string } = {};
  const fail = (reason: QuarantineReason, details: unknown, jobId?: string): DecodeResult => ({
    ok: false,
    reason,
    details,
    ...(jobId === undefined ? {} : { jobId }),
    msgId: failMsgId,
    ...(read.serviceName === undefined ? {} : { serviceName: read.serviceName }),
  });

  if (data.byteLength > maxBytes) {
    return fail(QUARANTINE_REASON.PAYLOAD_TOO_LARGE, { bytes: data.byteLength, limit: maxBytes });
  }

  const text = utf8Text(data);
  if (text === null) return fail(QUARANTINE_REASON.INVALID_JSON, { message: 'payload is not valid UTF-8' });
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return fail(QUARANTINE_REASON.INVALID_JSON, { message: `payload is not JSON: ${describe(err)}` });
  }
  const unsafe = mayBeUnsafe(text) ? findUnsafeJson(value) : null;
  if (unsafe !== null) return fail(QUARANTINE_REASON.INVALID_JSON, { message: unsafe });

  const jobId = readJobId(value);
  const serviceName = readServiceName(value);
  if (serviceName !== undefined) read.serviceName = serviceName;
  const check = checkResultEnvelope(value, { large: data.byteLength > LARGE_PAYLOAD_BYTES });
  if (!check.valid)
    return fail(QUARANTINE_REASON.SCHEMA_INVALID, schemaDetails(check.errors, check.errorCount), jobId);

  const envelope = check.value;
  // S3 limits object keys to 1 024 bytes of UTF-8 (the schema can only count characters), and a
  // longer key would also overflow PostgreSQL's unique index on s3_object (bucket, key).
  if ('result_s3' in envelope && envelope.result_s3) {
    // A UTF-16 code unit is at most 3 bytes of UTF-8: a short key needs no count.
    const key = envelope.result_s3.key;
    const bytes = key.length * 3 <= S3_KEY_MAX_BYTES ? 0 : Buffer.byteLength(key, 'utf8');
    if (bytes > S3_KEY_MAX_BYTES) {
      return fail(
        QUARANTINE_REASON.SCHEMA_INVALID,
        schemaDetails([
          {
            instancePath: '/result_s3/key',
            schemaPath: '#/properties/result_s3/properties/key/maxBytes',
            keyword: 'maxBytes',
            params: { limit: S3_KEY_MAX_BYTES, bytes },
            message: `must be at most ${S3_KEY_MAX_BYTES} bytes of UTF-8`,
          },
        ]),
        jobId,
      );
    }
  }
  if (
    msgId !== null &&
    (msgId.length > MSG_ID_MAX_LENGTH || storableText(msgId, MSG_ID_MAX_LENGTH).altered)
  ) {
    return fail(
      QUARANTINE_REASON.SCHEMA_INVALID,
      schemaDetails([
        {
          instancePath: '',
          schemaPath: '#/headers/Nats-Msg-Id',
          keyword: 'header',
          params: { header: 'Nats-Msg-Id', limit: MSG_ID_MAX_LENGTH, length: msgId.length },
          message: `Nats-Msg-Id must be at most ${MSG_ID_MAX_LENGTH} characters, without U+0000 or an unpaired surrogate`,
        },
      ]),
      jobId,
    );
  }
  if (msgId === null && (RESULT_STATUSES as readonly string[]).includes(envelope.status)) {
    return fail(
      QUARANTINE_REASON.MISSING_MSG_ID,
      { message: `a ${envelope.status} result needs a Nats-Msg-Id header to be applied idempotently` },
      jobId,
    );
  }
  return { ok: true, envelope, msgId };
}

/** S3's limit on an object key, in bytes of UTF-8. */
export const S3_KEY_MAX_BYTES = 1024;

/** Any of {@link FORBIDDEN_KEYS}, as it would appear unescaped in JSON text. */
const FORBIDDEN_TEXT = /__proto__|constructor|prototype/;

/**
 * Whether the JSON text `text` can hold anything {@link findUnsafeJson} refuses — a cheap scan that
 * lets the usual envelope skip the walk. Conservative: in text that is valid UTF-8 and valid JSON,
 * U+0000 and unpaired surrogates can only be `\u` escapes, a forbidden key appears verbatim
 * unless escaped, and nesting MAX_JSON_DEPTH deep needs that many `{` or `[` characters.
 */
function mayBeUnsafe(text: string): boolean {
  if (text.includes('\\u') || FORBIDDEN_TEXT.test(text)) return true;
  return countUpTo(text, '{', MAX_JSON_DEPTH) + countUpTo(text, '[', MAX_JSON_DEPTH) >= MAX_JSON_DEPTH;
}

/** How often `c` occurs in `text`, counted up to `limit` (string search, not a loop over every character). */
function countUpTo(text: string, c: string, limit: number): number {
  let n = 0;
  for (let i = text.indexOf(c); i !== -1 && n < limit; i = text.indexOf(c, i + 1)) n += 1;
  return n;
}

/** Iterative (no recursion on hostile depth): returns why `root` is unsafe, or `null`. */
function findUnsafeJson(root: unknown): string | null {
  const stack: { value: unknown; depth: number }[] = [{ value: root, depth: 0 }];
  for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
    const { value, depth } = item;
    if (typeof value === 'string') {
      if (!isStorableText(value)) return 'a string contains U+0000 or an unpaired surrogate';
      continue;
    }
    if (value === null || typeof value !== 'object') continue;
    if (depth >= MAX_JSON_DEPTH) return `JSON nested deeper than ${MAX_JSON_DEPTH} levels`;
    if (Array.isArray(value)) {
      for (const element of value as unknown[]) stack.push({ value: element, depth: depth + 1 });
      continue;
    }
    for (const [key, element] of Object.entries(value)) {
      if (FORBIDDEN_KEYS.has(key)) return `forbidden key "${key}" (prototype pollution attempt)`;
      if (!isStorableText(key)) return 'a key contains U+0000 or an unpaired surrogate';
      stack.push({ value: element, depth: depth + 1 });
    }
  }
  return null;
}

function isStorableText(s: string): boolean {
  return !s.includes('\u0000') && !LONE_SURROGATE.test(s);
}

/** The details of a `SCHEMA_INVALID` failure: the first errors and how many there are. */
function schemaDetails(
  errors: SchemaError[],
  errorCount = errors.length,
): { errors: SchemaError[]; error_count: number } {
  return { errors, error_count: errorCount };
}

function readJobId(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const jobId: unknown = (value as Record<string, unknown>)['job_id'];
  return typeof jobId === 'string' ? storableText(jobId, ID_TEXT_MAX).text : undefined;
}

function readServiceName(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const service: unknown = (value as Record<string, unknown>)['service'];
  if (typeof service !== 'object' || service === null || Array.isArray(service)) return undefined;
  const name: unknown = (service as Record<string, unknown>)['name'];
  return typeof name === 'string' ? storableText(name, SERVICE_NAME_MAX).text : undefined;
}

/** A short, storable description of a thrown value (it may embed a fragment of the payload). */
function describe(err: unknown): string {
  try {
    const text = err instanceof Error ? err.message : String(err);
    return text.slice(0, 200).replace(/[\p{Cc}\p{Cs}]/gu, '?');
  } catch {
    return 'unknown error';
  }
}
