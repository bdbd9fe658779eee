import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { QUARANTINE_REASON } from '../../machines/statuses.js';
import { MSG_ID_MAX_LENGTH, decodeEnvelope } from '../../src/messages/decodeEnvelope.js';
import {
  DETAILS_TEXT_BUDGET,
  HEADER_NAMES_MAX,
  HEADER_TEXT_MAX,
  boundedDetails,
  quarantineRecord,
  storableHeaders,
  storableText,
} from '../../src/messages/quarantineRecord.js';
import { MAX_SCHEMA_ERRORS, checkResultEnvelope, resultEnvelopeSchema } from '../../src/messages/schemas.js';

const JOB_ID = '3f1b6c1e-8a3c-4c1e-9d5e-2b7a4f0c9e11';
const service = { name: 'tabular-parser', version: '1.4.2' };
const done = { job_id: JOB_ID, status: 'done', service };
const bytes = (value: unknown): Uint8Array => new TextEncoder().encode(JSON.stringify(value));

/** `n` extra keys `k0`, `k1`, … of value 0. */
const extraKeys = (n: number, prefix = 'k'): Record<string, number> => {
  const out: Record<string, number> = {};
  for (let i = 0; i < n; i++) out[`${prefix}${i}`] = 0;
  return out;
};

/** A reference validator that reports every error, as the daemon once stored them. */
const full = new Ajv2020({ strict: true, strictRequired: false, allErrors: true });
addFormatsModule.default(full, ['uuid', 'date-time']);
const fullResult = full.compile(resultEnvelopeSchema);
const fullCount = (value: unknown): number => (fullResult(value) ? 0 : (fullResult.errors ?? []).length);

/** An envelope just under 1 MiB whose `service` has 90 000 extra keys. */
function floodEnvelope(): Record<string, unknown> {
  return { ...done, service: { ...service, ...extraKeys(90_000) } };
}

describe('schema errors are bounded: the first few and a count', () => {
  it('keeps the first errors of an envelope with 90 000 extra keys and counts them all', () => {
    const envelope = floodEnvelope();
    expect(bytes(envelope).byteLength).toBeLessThan(1024 * 1024);
    const check = checkResultEnvelope(envelope);
    expect(check.valid).toBe(false);
    if (check.valid) return;
    expect(check.errors.length).toBeLessThanOrEqual(MAX_SCHEMA_ERRORS);
    expect(check.errors[0]).toMatchObject({ instancePath: '/service', keyword: 'additionalProperties' });
    expect(check.errorCount).toBe(fullCount(envelope));
    expect(check.errorCount).toBe(90_000);
  });

  it('stores a few KiB of details for it, not one object per error', () => {
    const decoded = decodeEnvelope({
      data: bytes(floodEnvelope()),
      msgId: 'result:x:1',
      maxBytes: 1024 * 1024,
    });
    expect(decoded).toMatchObject({ ok: false, reason: QUARANTINE_REASON.SCHEMA_INVALID, jobId: JOB_ID });
    if (decoded.ok) return;
    expect(decoded.details).toMatchObject({ error_count: 90_000 });
    expect(JSON.stringify(decoded.details).length).toBeLessThan(8 * 1024);
  });

  it('builds no error object per extra key: the heap of one check stays far below one per error', () => {
    const envelope = floodEnvelope();
    checkResultEnvelope(envelope); // compiled and warm
    global.gc?.();
    const before = process.memoryUsage().heapUsed;
    let peak = before;
    for (let i = 0; i < 5; i++) {
      checkResultEnvelope(envelope);
      peak = Math.max(peak, process.memoryUsage().heapUsed);
    }
    // A full explanation builds one error object per extra key; the bounded one a few hundred in all.
    expect(peak - before).toBeLessThan(10 * 1024 * 1024);
  });

  it('counts exactly what the full validator counts, wherever the extra keys are', () => {
    fc.assert(
      fc.property(
        fc.nat(120),
        fc.nat(120),
        fc.nat(120),
        fc.nat(120),
        fc.constantFrom('done', 'error', 'processing', 'bogus'),
        (inService, inError, inS3, atTop, status) => {
          const envelope = {
            job_id: status === 'bogus' ? 'not-a-uuid' : JOB_ID,
            status,
            service: { ...service, ...extraKeys(inService) },
            error: { code: 'E', message: 'm', ...extraKeys(inError) },
            result_s3: { bucket: 'b', key: 'k', ...extraKeys(inS3) },
            ...extraKeys(atTop, 'top'),
          };
          for (const large of [false, true]) {
            const check = checkResultEnvelope(envelope, { large });
            expect(check.valid).toBe(false);
            if (check.valid) return;
            expect(check.errorCount).toBe(fullCount(envelope));
            expect(check.errors.length).toBe(Math.min(MAX_SCHEMA_ERRORS, check.errorCount));
          }
        },
      ),
      { numRuns: 60 },
    );
  });
});

describe('a large payload is decided by the bounded explanation alone, as the full validator decides', () => {
  const valid = (extra: Record<string, unknown>) => ({
    job_id: JOB_ID,
    status: 'done',
    service,
    result_s3: { bucket: 'b', key: 'k' },
    metrics: { ...extra, rows: Array.from({ length: 100 }, (_, i) => i) },
    ...extra,
  });

  it('accepts a valid envelope with many keys in metrics and at the top level, and many array elements', () => {
    const envelope = valid(extraKeys(5_000));
    expect(fullCount(envelope)).toBe(0);
    expect(checkResultEnvelope(envelope, { large: true })).toEqual({ valid: true, value: envelope });
  });

  it('agrees with the full validator on envelopes near and far from valid', () => {
    const fields = fc.record(
      {
        job_id: fc.oneof(fc.constant(JOB_ID), fc.string(), fc.integer()),
        status: fc.constantFrom('processing', 'done', 'needs_check', 'error', 'other'),
        service: fc.oneof(
          fc.constant(service),
          fc.nat(80).map((n) => ({ ...service, ...extraKeys(n) })),
          fc.constant([service]),
        ),
        result_s3: fc.oneof(
          fc.constant({ bucket: 'b', key: 'k' }),
          fc.nat(80).map((n) => ({ bucket: 'b', ...extraKeys(n) })),
        ),
        error: fc.oneof(fc.constant({ code: 'E', message: 'm' }), fc.constant({ code: '' })),
        metrics: fc.oneof(
          fc.nat(80).map((n) => extraKeys(n)),
          fc.constant([1, 2]),
          fc.constant('x'),
        ),
        sent_at: fc.oneof(fc.constant('2025-03-01T10:00:01Z'), fc.constant('yesterday')),
      },
      { requiredKeys: ['status'] },
    );
    fc.assert(
      fc.property(fields, fc.nat(80), (envelope, top) => {
        const value = { ...envelope, ...extraKeys(top, 'top') };
        const full = fullCount(value);
        const large = checkResultEnvelope(value, { large: true });
        expect(large.valid).toBe(full === 0);
        expect(checkResultEnvelope(value).valid).toBe(full === 0);
        if (!large.valid) expect(large.errorCount).toBe(full);
      }),
      { numRuns: 300 },
    );
  });
});

describe('the Nats-Msg-Id bound', () => {
  const decode = (msgId: string) => decodeEnvelope({ data: bytes(done), msgId, maxBytes: 1024 * 1024 });

  it(`accepts an id of ${MSG_ID_MAX_LENGTH} characters`, () => {
    expect(decode('r'.repeat(MSG_ID_MAX_LENGTH))).toMatchObject({ ok: true });
  });

  it('refuses a longer one, and one with U+0000, as SCHEMA_INVALID with a bounded msg id', () => {
    for (const msgId of ['r'.repeat(MSG_ID_MAX_LENGTH + 1), 'r'.repeat(100_000), 'result:\u0000:1']) {
      const decoded = decode(msgId);
      expect(decoded).toMatchObject({
        ok: false,
        reason: QUARANTINE_REASON.SCHEMA_INVALID,
        details: { error_count: 1, errors: [{ keyword: 'header', params: { header: 'Nats-Msg-Id' } }] },
      });
      if (decoded.ok) return;
      expect(decoded.msgId!.length).toBeLessThanOrEqual(256);
      expect(decoded.msgId).not.toContain('\u0000');
    }
  });
});

describe('storable text and headers', () => {
  it('escapes U+0000 and unpaired surrogates as \\uXXXX text, and says so', () => {
    expect(storableText('a\u0000b', 100)).toEqual({ text: 'a\\u0000b', altered: true });
    expect(storableText('x\ud800y\udc00', 100)).toEqual({ text: 'x\\ud800y\\udc00', altered: true });
    expect(storableText('ok 😀', 100)).toEqual({ text: 'ok 😀', altered: false });
  });

  it('cuts a long string, never inside a surrogate pair', () => {
    expect(storableText('abcdef', 3)).toEqual({ text: 'abc', altered: true });
    // '😀' is two code units: cutting after the first would leave an unpaired surrogate.
    expect(storableText('ab😀', 3)).toEqual({ text: 'ab', altered: true });
  });

  it('always yields text jsonb can hold, within the bound', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), fc.integer({ min: 1, max: 50 }), (s, max) => {
        const { text } = storableText(s, max);
        // The escape of each code unit is at most six characters.
        expect(text.length).toBeLessThanOrEqual(max * 6);
        expect(text).not.toContain('\u0000');
        expect(text).not.toMatch(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/u);
      }),
    );
  });

  it('escapes a U+0000 header value, cuts long values and too many names, and flags it', () => {
    const many: Record<string, string[]> = {};
    for (let i = 0; i < HEADER_NAMES_MAX + 10; i++) many[`X-${i}`] = ['v'];
    expect(storableHeaders({ 'Nats-Msg-Id': ['result:1'], 'X-Ok': ['fine'] })).toEqual({
      headers: { 'Nats-Msg-Id': ['result:1'], 'X-Ok': ['fine'] },
      altered: false,
    });
    const escaped = storableHeaders({ 'X-Evil': ['a\u0000b'], 'X-Long': ['v'.repeat(100_000)] });
    expect(escaped.altered).toBe(true);
    expect(escaped.headers['X-Evil']).toEqual(['a\\u0000b']);
    expect(escaped.headers['X-Long']![0]!.length).toBe(HEADER_TEXT_MAX);
    expect(Object.keys(storableHeaders(many).headers)).toHaveLength(HEADER_NAMES_MAX);
    expect(storableHeaders(many).altered).toBe(true);
  });
});

describe('the quarantine record', () => {
  it('keeps a payload prefix and the original length, and flags altered headers', () => {
    const data = new Uint8Array(200_000).fill(0x41);
    const record = quarantineRecord({
      msgId: 'm\u0000',
      jobId: null,
      details: { errors: [], error_count: 3 },
      headers: { 'X-Evil': ['\u0000'] },
      data,
      payloadMaxBytes: 1000,
    });
    expect(record.payload.byteLength).toBe(1000);
    expect(record.msgId).toBe('m\\u0000');
    expect(record.details).toEqual({
      errors: [],
      error_count: 3,
      headers_altered: true,
      payload_truncated: true,
      payload_bytes: 200_000,
    });
  });

  it('keeps a payload within the bound whole, and adds no flag', () => {
    const record = quarantineRecord({
      msgId: null,
      jobId: JOB_ID,
      details: { message: 'x' },
      headers: {},
      data: new Uint8Array(10),
      payloadMaxBytes: 1000,
    });
    expect(record.payload.byteLength).toBe(10);
    expect(record.details).toEqual({ message: 'x' });
  });

  it('bounds details of any size and shape to a few KiB of storable JSON', () => {
    const huge = {
      message: 'x'.repeat(1_000_000),
      list: Array.from({ length: 10_000 }, (_, i) => ({ i, s: `\u0000${'y'.repeat(600)}` })),
    };
    const { details, truncated } = boundedDetails(huge);
    expect(truncated).toBe(true);
    const text = JSON.stringify(details);
    expect(text.length).toBeLessThan(DETAILS_TEXT_BUDGET + 8 * 1024);
    // A raw U+0000 would serialise as the JSON escape \u0000; an escaped one as \\u0000.
    expect(text).not.toMatch(/(?<!\\)\\u0000/);
    expect(boundedDetails([1, 'a', null, { b: true }])).toEqual({
      details: [1, 'a', null, { b: true }],
      truncated: false,
    });
  });
});
