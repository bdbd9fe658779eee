/**
 * What of a message the inbox cannot apply goes into `inbox_quarantine` and its log line: text
 * PostgreSQL can store, of a bounded size, whatever the sender put in it. Pure. A record that lost
 * anything says so in its details (`payload_truncated`, `headers_altered`, `details_truncated`)
 * (docs/development.md, "Why the loops are built as they are").
 */

/** Longest header name or value stored or logged, in UTF-16 code units. */
export const HEADER_TEXT_MAX = 1024;
/** Header names kept per message. */
export const HEADER_NAMES_MAX = 64;
/** Values kept per header name. */
export const HEADER_VALUES_MAX = 16;
/** Longest string kept in the details, in UTF-16 code units. */
export const DETAILS_TEXT_MAX = 512;
/** Values (objects, arrays, scalars) kept in the details. */
export const DETAILS_NODES_MAX = 200;
/** Characters of all the strings and keys of the details together, after escaping (about). */
export const DETAILS_TEXT_BUDGET = 8192;
/** The default of `QUARANTINE_PAYLOAD_MAX_BYTES`: the payload prefix a quarantine row keeps. */
export const QUARANTINE_PAYLOAD_MAX_BYTES_DEFAULT = 65_536;

/** U+0000 and unpaired surrogates: what PostgreSQL text and jsonb refuse. */
// eslint-disable-next-line no-control-regex -- U+0000 is exactly what PostgreSQL refuses.
const UNSTORABLE = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/gu;
const UNSTORABLE_TEST = new RegExp(UNSTORABLE.source, 'u');

/** A string as PostgreSQL can store it, and whether that changed it. */
export interface StorableText {
  text: string;
  altered: boolean;
}

/**
 * `s` cut to `max` code units (never inside a surrogate pair), with U+0000 and unpaired surrogates
 * written as `\uXXXX` text. `altered` is true when either changed `s`.
 */
export function storableText(s: string, max: number): StorableText {
  let text = s;
  let altered = false;
  if (text.length > max) {
    let end = max;
    const last = text.charCodeAt(end - 1);
    if (last >= 0xd800 && last <= 0xdbff) end -= 1;
    text = text.slice(0, end);
    altered = true;
  }
  if (UNSTORABLE_TEST.test(text)) {
    text = text.replace(UNSTORABLE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
    altered = true;
  }
  return { text, altered };
}

/** Headers as a jsonb column can hold them, bounded; `altered` when anything was escaped or cut. */
export function storableHeaders(headers: Record<string, string[]>): {
  headers: Record<string, string[]>;
  altered: boolean;
} {
  const out: Record<string, string[]> = {};
  let altered = false;
  let names = 0;
  for (const name of Object.keys(headers)) {
    if (names === HEADER_NAMES_MAX) {
      altered = true;
      break;
    }
    names += 1;
    const key = storableText(name, HEADER_TEXT_MAX);
    const values = headers[name] ?? [];
    if (values.length > HEADER_VALUES_MAX) altered = true;
    const kept = values.slice(0, HEADER_VALUES_MAX).map((v) => {
      const t = storableText(String(v), HEADER_TEXT_MAX);
      if (t.altered) altered = true;
      return t.text;
    });
    if (key.altered) altered = true;
    // Two names that escape to the same text keep the values of both.
    out[key.text] = [...(out[key.text] ?? []), ...kept];
  }
  return { headers: out, altered };
}

/**
 * `details` as plain JSON of bounded size: at most {@link DETAILS_NODES_MAX} values, strings and
 * keys storable and cut to {@link DETAILS_TEXT_MAX}. `truncated` when anything was left out or cut
 * (escaping alone is not counted: it loses nothing).
 */
export function boundedDetails(details: unknown): { details: unknown; truncated: boolean } {
  let nodes = 0;
  let budget = DETAILS_TEXT_BUDGET;
  let truncated = false;
  const text = (s: string): string => {
    const max = Math.max(0, Math.min(DETAILS_TEXT_MAX, budget));
    const t = storableText(s, max);
    if (s.length > max) truncated = true;
    budget -= t.text.length;
    return t.text;
  };
  // Recursion is bounded: the node budget stops it long before the stack matters.
  const copy = (value: unknown): unknown => {
    nodes += 1;
    if (nodes > DETAILS_NODES_MAX) {
      truncated = true;
      return null;
    }
    if (typeof value === 'string') return text(value);
    if (typeof value === 'number') return Number.isFinite(value) ? value : null;
    if (typeof value === 'boolean' || value === null || value === undefined) return value ?? null;
    if (Array.isArray(value)) {
      const out: unknown[] = [];
      for (const element of value) {
        if (nodes >= DETAILS_NODES_MAX) {
          truncated = true;
          break;
        }
        out.push(copy(element));
      }
      return out;
    }
    if (typeof value === 'object') {
      const out: Record<string, unknown> = {};
      for (const [key, element] of Object.entries(value)) {
        if (nodes >= DETAILS_NODES_MAX) {
          truncated = true;
          break;
        }
        out[text(key)] = copy(element);
      }
      return out;
    }
    return text(String(value));
  };
  return { details: copy(details), truncated };
}

/** What a quarantine row and its log line carry of a message, bounded and storable. */
export interface QuarantineRecord {
  msgId: string | null;
  jobId: string | null;
  details: Record<string, unknown>;
  headers: Record<string, string[]>;
  payload: Uint8Array;
}

/** Longest msg id or job id stored in its column (the contract's ids are far shorter). */
export const ID_TEXT_MAX = 256;

/**
 * The bounded, storable record of a message quarantined with `details`. Details that are not an
 * object are kept under `details.details`.
 */
export function quarantineRecord(input: {
  msgId: string | null;
  jobId: string | null;
  details: unknown;
  headers: Record<string, string[]>;
  data: Uint8Array;
  payloadMaxBytes: number;
}): QuarantineRecord {
  const bounded = boundedDetails(input.details);
  const base =
    typeof bounded.details === 'object' && bounded.details !== null && !Array.isArray(bounded.details)
      ? (bounded.details as Record<string, unknown>)
      : { details: bounded.details };
  const details: Record<string, unknown> = { ...base };
  if (bounded.truncated) details['details_truncated'] = true;
  const headers = storableHeaders(input.headers);
  if (headers.altered) details['headers_altered'] = true;
  let payload = input.data;
  if (payload.byteLength > input.payloadMaxBytes) {
    details['payload_truncated'] = true;
    details['payload_bytes'] = payload.byteLength;
    payload = payload.subarray(0, input.payloadMaxBytes);
  }
  const id = (s: string | null): string | null => (s === null ? null : storableText(s, ID_TEXT_MAX).text);
  return { msgId: id(input.msgId), jobId: id(input.jobId), details, headers: headers.headers, payload };
}
