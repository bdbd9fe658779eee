import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { QUARANTINE_REASON, QUARANTINE_REASONS } from '../../machines/statuses.js';
import type { QuarantineReason } from '../../machines/statuses.js';
import { MAX_JSON_DEPTH, decodeEnvelope } from '../../src/messages/decodeEnvelope.js';
import type { DecodeResult } from '../../src/messages/decodeEnvelope.js';
import { checkResultEnvelope } from '../../src/messages/schemas.js';

const JOB_ID = '3f1b6c1e-8a3c-4c1e-9d5e-2b7a4f0c9e11';
const FILE_ID = '0b8f7a52-51d4-4f5e-a0a7-6c3d2e1f9a10';
const MSG_ID = `result:${JOB_ID}:1`;
const MAX_BYTES = 1024 * 1024;
const service = { name: 'tabular-parser', version: '1.4.2' };

const processing = { job_id: JOB_ID, status: 'processing', service, sent_at: '2025-03-01T10:00:01Z' };
const done = {
  job_id: JOB_ID,
  status: 'done',
  service,
  result_s3: { bucket: 'arm-ka', key: `results/${FILE_ID}/${JOB_ID}/result.json` },
  result_schema_version: '2.1',
  metrics: { pages: 3, rows: 120, timings: { parse_ms: 412.5 } },
  sent_at: '2025-03-01T10:02:00.123+03:00',
};
const needsCheck = { ...done, status: 'needs_check' };
const error = {
  job_id: JOB_ID,
  status: 'error',
  service,
  error: { code: 'UNSUPPORTED_FORMAT', message: 'xls 95 is not supported' },
};
const VALID = { processing, done, needs_check: needsCheck, error };

const bytes = (value: unknown): Uint8Array =>
  new TextEncoder().encode(typeof value === 'string' ? value : JSON.stringify(value));

/** Decodes with a msg id (`MSG_ID` unless given) and a 1 MiB limit unless given. */
const decode = (data: Uint8Array, msgId: string | undefined = MSG_ID, maxBytes = MAX_BYTES): DecodeResult =>
  decodeEnvelope({ data, msgId, maxBytes });
const decodeWithoutHeader = (data: Uint8Array): DecodeResult =>
  decodeEnvelope({ data, msgId: undefined, maxBytes: MAX_BYTES });

const deepArray = (depth: number): string => `${'['.repeat(depth)}${']'.repeat(depth)}`;

interface BadCase {
  name: string;
  data: Uint8Array;
  msgId?: string;
  maxBytes?: number;
  reason: QuarantineReason;
  jobId?: string;
  /** For SCHEMA_INVALID: an `instancePath keyword` that must be among the errors. */
  error?: string;
}

const { INVALID_JSON, SCHEMA_INVALID, MISSING_MSG_ID, PAYLOAD_TOO_LARGE } = QUARANTINE_REASON;

const badCases: BadCase[] = [
  { name: 'not JSON', data: bytes('{"job_id": '), reason: INVALID_JSON },
  { name: 'plain text', data: bytes('hello'), reason: INVALID_JSON },
  { name: 'empty payload', data: new Uint8Array(), reason: INVALID_JSON },
  { name: 'invalid UTF-8', data: new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]), reason: INVALID_JSON },
  { name: 'a JSON array', data: bytes([done]), reason: SCHEMA_INVALID, error: ' type' },
  { name: 'a JSON string', data: bytes('"done"'), reason: SCHEMA_INVALID, error: ' type' },
  { name: 'JSON null', data: bytes('null'), reason: SCHEMA_INVALID, error: ' type' },
  { name: 'a JSON number', data: bytes('42'), reason: SCHEMA_INVALID, error: ' type' },
  {
    name: 'status outside the enum',
    data: bytes({ ...done, status: 'finished' }),
    reason: SCHEMA_INVALID,
    jobId: JOB_ID,
    error: '/status enum',
  },
  {
    name: 'no status',
    data: bytes({ job_id: JOB_ID, service }),
    reason: SCHEMA_INVALID,
    jobId: JOB_ID,
    error: ' required',
  },
  {
    name: 'no job_id',
    data: bytes({ ...done, job_id: undefined }),
    reason: SCHEMA_INVALID,
    error: ' required',
  },
  {
    name: 'job_id not a uuid',
    data: bytes({ ...done, job_id: 'job-42' }),
    reason: SCHEMA_INVALID,
    jobId: 'job-42',
    error: '/job_id format',
  },
  {
    name: 'job_id of the wrong type',
    data: bytes({ ...done, job_id: 42 }),
    reason: SCHEMA_INVALID,
    error: '/job_id type',
  },
  {
    name: 'status=error without error',
    data: bytes({ ...error, error: undefined }),
    reason: SCHEMA_INVALID,
    jobId: JOB_ID,
    error: ' required',
  },
  {
    name: 'result_s3 on an error',
    data: bytes({ ...error, result_s3: done.result_s3 }),
    reason: SCHEMA_INVALID,
    jobId: JOB_ID,
    error: '/result_s3 false schema',
  },
  {
    name: 'result_s3 on an ack',
    data: bytes({ ...processing, result_s3: done.result_s3 }),
    reason: SCHEMA_INVALID,
    jobId: JOB_ID,
    error: '/result_s3 false schema',
  },
  {
    name: 'error on a done result',
    data: bytes({ ...done, error: error.error }),
    reason: SCHEMA_INVALID,
    jobId: JOB_ID,
    error: '/error false schema',
  },
  {
    name: 'wrong types in service',
    data: bytes({ ...done, service: { name: 7, version: true } }),
    reason: SCHEMA_INVALID,
    jobId: JOB_ID,
    error: '/service/name type',
  },
  {
    name: 'service is a string',
    data: bytes({ ...done, service: 'tabular-parser' }),
    reason: SCHEMA_INVALID,
    jobId: JOB_ID,
    error: '/service type',
  },
  {
    name: 'an empty service name',
    data: bytes({ ...done, service: { ...service, name: '' } }),
    reason: SCHEMA_INVALID,
    jobId: JOB_ID,
    error: '/service/name minLength',
  },
  {
    name: 'result_s3 without key',
    data: bytes({ ...done, result_s3: { bucket: 'arm-ka' } }),
    reason: SCHEMA_INVALID,
    jobId: JOB_ID,
    error: '/result_s3 required',
  },
  {
    name: 'metrics not an object',
    data: bytes({ ...done, metrics: [1, 2] }),
    reason: SCHEMA_INVALID,
    jobId: JOB_ID,
    error: '/metrics type',
  },
  {
    name: 'sent_at not a date-time',
    data: bytes({ ...done, sent_at: 'yesterday' }),
    reason: SCHEMA_INVALID,
    jobId: JOB_ID,
    error: '/sent_at format',
  },
  {
    name: 'a __proto__ key at the top level',
    data: bytes(
      `{"__proto__":{"polluted":true},"job_id":"${JOB_ID}","status":"processing","service":{"name":"a","version":"1"}}`,
    ),
    reason: INVALID_JSON,
  },
  {
    name: 'a __proto__ key nested in metrics',
    data: bytes(JSON.stringify(done).replace('"pages":3', '"__proto__":{"polluted":true}')),
    reason: INVALID_JSON,
  },
  {
    name: 'a constructor.prototype payload',
    data: bytes({ ...done, metrics: { constructor: { prototype: { polluted: true } } } }),
    reason: INVALID_JSON,
  },
  {
    name: 'a payload over the limit',
    data: bytes(done),
    maxBytes: 100,
    reason: PAYLOAD_TOO_LARGE,
  },
  {
    name: 'a done result without Nats-Msg-Id',
    data: bytes(done),
    msgId: '',
    reason: MISSING_MSG_ID,
    jobId: JOB_ID,
  },
  {
    name: 'a needs_check result without Nats-Msg-Id',
    data: bytes(needsCheck),
    msgId: '',
    reason: MISSING_MSG_ID,
    jobId: JOB_ID,
  },
  {
    name: 'an error result without Nats-Msg-Id',
    data: bytes(error),
    msgId: '',
    reason: MISSING_MSG_ID,
    jobId: JOB_ID,
  },
  {
    name: 'deeply nested JSON (100 000 levels)',
    data: bytes(
      `{"job_id":"${JOB_ID}","status":"done","service":{"name":"a","version":"1"},"metrics":{"x":${deepArray(100_000)}}}`,
    ),
    maxBytes: 10 * MAX_BYTES,
    reason: INVALID_JSON,
  },
  {
    name: `JSON nested ${MAX_JSON_DEPTH + 1} levels`,
    data: bytes(deepArray(MAX_JSON_DEPTH + 1)),
    reason: INVALID_JSON,
  },
  {
    name: 'a NUL character (PostgreSQL cannot store it)',
    data: bytes({ ...error, error: { code: 'E', message: 'a\u0000b' } }),
    reason: INVALID_JSON,
  },
  {
    name: 'an unpaired surrogate escape',
    data: bytes(JSON.stringify(done).replace('tabular-parser', 'tabular\\ud800parser')),
    reason: INVALID_JSON,
  },
];

describe('decodeEnvelope rejects bad input with the right reason', () => {
  it.each(badCases)('$name → $reason', ({ data, msgId, maxBytes, reason, jobId, error: expected }) => {
    const result = decode(data, msgId ?? MSG_ID, maxBytes);
    expect(result).toMatchObject({ ok: false, reason, msgId: msgId === '' ? null : MSG_ID });
    if (result.ok) return;
    expect(result.jobId).toBe(jobId);
    if (expected !== undefined) {
      const { errors, error_count } = result.details as {
        errors: { instancePath: string; keyword: string; message: string }[];
        error_count: number;
      };
      expect(error_count).toBeGreaterThanOrEqual(errors.length);
      expect(errors.map((e) => `${e.instancePath} ${e.keyword}`)).toContain(expected);
      for (const e of errors) expect(typeof e.message).toBe('string');
    }
    if (reason === INVALID_JSON || reason === MISSING_MSG_ID) {
      expect(result.details).toEqual({ message: expect.any(String) });
    }
  });

  it('reports the size and the limit of an oversized payload', () => {
    const data = bytes(done);
    expect(decode(data, MSG_ID, 100)).toEqual({
      ok: false,
      reason: PAYLOAD_TOO_LARGE,
      details: { bytes: data.byteLength, limit: 100 },
      msgId: MSG_ID,
    });
    expect(decode(data, MSG_ID, data.byteLength).ok).toBe(true);
  });

  it('treats an undefined header like an empty one', () => {
    expect(decodeWithoutHeader(bytes(done))).toMatchObject({
      ok: false,
      reason: MISSING_MSG_ID,
      msgId: null,
    });
  });

  it('does not pollute Object.prototype', () => {
    decode(bytes('{"__proto__":{"polluted":true}}'));
    decode(bytes({ constructor: { prototype: { polluted: true } } }));
    expect(({} as Record<string, unknown>)['polluted']).toBeUndefined();
  });
});

describe('decodeEnvelope accepts valid envelopes verbatim', () => {
  it.each(Object.entries(VALID))('a valid %s envelope', (status, envelope) => {
    expect(decode(bytes(envelope))).toEqual({ ok: true, envelope, msgId: MSG_ID });
    expect(status).toBe(envelope.status);
  });

  it('an ack without Nats-Msg-Id (msgId null)', () => {
    expect(decode(bytes(processing), '')).toEqual({ ok: true, envelope: processing, msgId: null });
    expect(decodeWithoutHeader(bytes(processing))).toEqual({ ok: true, envelope: processing, msgId: null });
  });

  it('unknown extra top-level fields pass and are kept', () => {
    const envelope = { ...done, trace_id: 'abc', pipeline: { stage: 2 }, tags: ['x'] };
    expect(decode(bytes(envelope))).toEqual({ ok: true, envelope, msgId: MSG_ID });
  });

  it('a UTF-8 byte order mark is tolerated', () => {
    const data = new Uint8Array([0xef, 0xbb, 0xbf, ...bytes(done)]);
    expect(decode(data)).toEqual({ ok: true, envelope: done, msgId: MSG_ID });
  });

  it.each<[string, string]>([
    ['a very long string', 'x'.repeat(10_000)],
    ['SQL metacharacters', `'; DROP TABLE recognition_job; -- " \\ %_ $1 \`\``],
    ['unicode', 'Ошибка разбора: 表格 🧾 e\u0301 \u202Eevil\u202C'],
  ])('%s is kept verbatim', (_name, text) => {
    const envelope = {
      ...error,
      error: { code: 'PARSE_FAILED', message: text },
      note: text.repeat(20),
      service: { name: text.slice(0, 200), version: '1' },
    };
    const result = decode(bytes(envelope));
    expect(result).toEqual({ ok: true, envelope, msgId: MSG_ID });
  });
});

describe('decodeEnvelope never throws (property tests)', () => {
  const settings = { seed: 20250301, numRuns: 1000 };
  const reasons: readonly string[] = QUARANTINE_REASONS;
  const msgIds = fc.option(fc.oneof(fc.constant(''), fc.constant(MSG_ID), fc.string()), { nil: undefined });

  const expectWellFormed = (result: DecodeResult): void => {
    if (result.ok) {
      expect(checkResultEnvelope(result.envelope).valid).toBe(true);
      if (result.envelope.status !== 'processing') expect(result.msgId).not.toBeNull();
    } else {
      expect(reasons).toContain(result.reason);
    }
  };

  it('random bytes', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 512 }),
        msgIds,
        fc.integer({ min: 0, max: 600 }),
        (data, msgId, max) => {
          expectWellFormed(decodeEnvelope({ data, msgId, maxBytes: max }));
        },
      ),
      settings,
    );
  });

  it('random JSON values', () => {
    fc.assert(
      fc.property(fc.jsonValue(), msgIds, (value, msgId) => {
        expectWellFormed(
          decodeEnvelope({ data: bytes(JSON.stringify(value) ?? 'null'), msgId, maxBytes: MAX_BYTES }),
        );
      }),
      settings,
    );
  });

  it('mutated valid envelopes', () => {
    const keys = [
      'job_id',
      'status',
      'service',
      'result_s3',
      'result_schema_version',
      'metrics',
      'error',
      'sent_at',
    ];
    const mutation = fc.oneof(
      fc.record({
        op: fc.constant('set' as const),
        key: fc.oneof(fc.constantFrom(...keys), fc.string()),
        value: fc.jsonValue(),
      }),
      fc.record({ op: fc.constant('delete' as const), key: fc.constantFrom(...keys) }),
      fc.record({
        op: fc.constant('nested' as const),
        key: fc.constantFrom('service', 'result_s3', 'error', 'metrics'),
        inner: fc.oneof(fc.constantFrom('name', 'version', 'bucket', 'key', 'code', 'message'), fc.string()),
        value: fc.jsonValue(),
      }),
      fc.record({ op: fc.constant('truncate' as const), at: fc.nat() }),
    );
    fc.assert(
      fc.property(
        fc.constantFrom(...Object.values(VALID)),
        fc.array(mutation, { minLength: 1, maxLength: 4 }),
        msgIds,
        (base, mutations, msgId) => {
          const envelope: Record<string, unknown> = structuredClone(base);
          let cut: number | undefined;
          for (const m of mutations) {
            if (m.op === 'set') envelope[m.key] = m.value;
            else if (m.op === 'delete') delete envelope[m.key];
            else if (m.op === 'nested')
              envelope[m.key] = { ...(envelope[m.key] as object), [m.inner]: m.value };
            else cut = m.at;
          }
          const text = JSON.stringify(envelope);
          const data = bytes(cut === undefined ? text : text.slice(0, cut % (text.length + 1)));
          const result = decodeEnvelope({ data, msgId, maxBytes: MAX_BYTES });
          expectWellFormed(result);
          if (result.ok) expect(result.envelope).toEqual(JSON.parse(new TextDecoder().decode(data)));
        },
      ),
      settings,
    );
  });
});

describe('S3 key length in bytes', () => {
  const enc = new TextEncoder();
  const envelope = (key: string) =>
    enc.encode(
      JSON.stringify({
        job_id: '3f1b6c1e-8a3c-4c1e-9d5e-2b7a4f0c9e11',
        status: 'done',
        service: { name: 'tabular-parser', version: '1' },
        result_s3: { bucket: 'arm-ka', key },
      }),
    );
  it('accepts a key of exactly 1 024 bytes and refuses 1 024 characters of four-byte emoji', () => {
    expect(decodeEnvelope({ data: envelope('k'.repeat(1024)), msgId: 'm', maxBytes: 1 << 20 }).ok).toBe(true);
    const r = decodeEnvelope({ data: envelope('😀'.repeat(1024)), msgId: 'm', maxBytes: 1 << 20 });
    expect(r).toMatchObject({ ok: false, reason: 'SCHEMA_INVALID' });
    expect(JSON.stringify(r)).toContain('maxBytes');
  });
});
