import { readFileSync, writeFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import fc from 'fast-check';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { ENVELOPE_STATUS } from '../../machines/statuses.js';
import type { EnvelopeStatus } from '../../machines/statuses.js';
import {
  SCHEMA_FILES,
  checkJobMessage,
  checkResultEnvelope,
  jobMessageSchema,
  resultEnvelopeSchema,
  validateJobMessage,
} from '../../src/messages/schemas.js';
import type { JobMessage, ResultEnvelope } from '../../src/messages/schemas.js';

const JOB_ID = '3f1b6c1e-8a3c-4c1e-9d5e-2b7a4f0c9e11';
const FILE_ID = '0b8f7a52-51d4-4f5e-a0a7-6c3d2e1f9a10';

const validJob: JobMessage = {
  job_id: JOB_ID,
  file_id: FILE_ID,
  attempt: 1,
  source_s3: { bucket: 'arm-ka', key: `uploads/${FILE_ID}/statement.xlsx` },
  result_s3_prefix: { bucket: 'arm-ka', key_prefix: `results/${FILE_ID}/${JOB_ID}/` },
  reply_subject: 'recognition.result',
  reply_deadline: '2025-03-01T10:15:00.000Z',
  published_at: '2025-03-01T10:00:00.000Z',
};

describe('schemas/*.schema.json are the TypeScript schema objects (no drift)', () => {
  for (const [name, schema] of Object.entries(SCHEMA_FILES)) {
    it(name, () => {
      const url = new URL(`../../schemas/${name}`, import.meta.url);
      // UPDATE_SCHEMAS=1 regenerates the checked-in file from the object (then run prettier).
      if (process.env['UPDATE_SCHEMAS'] === '1') writeFileSync(url, `${JSON.stringify(schema, null, 2)}\n`);
      expect(JSON.parse(readFileSync(url, 'utf8'))).toEqual(schema);
      expect(schema.$id.endsWith(`/schemas/${name}`)).toBe(true);
    });
  }

  it('the envelope status enum is the ENVELOPE_STATUS vocabulary', () => {
    expect([...resultEnvelopeSchema.properties.status.enum].sort()).toEqual(
      Object.values(ENVELOPE_STATUS).sort(),
    );
  });

  it('the derived types follow the schemas', () => {
    // A job message is open: what a service reads may hold fields this version does not list.
    expectTypeOf<JobMessage>().toEqualTypeOf<{
      [x: string]: unknown;
      job_id: string;
      file_id: string;
      attempt: number;
      source_s3: { [x: string]: unknown; bucket: string; key: string };
      result_s3_prefix: { [x: string]: unknown; bucket: string; key_prefix: string };
      reply_subject: 'recognition.result';
      reply_deadline: string;
      published_at: string;
    }>();
    expectTypeOf<ResultEnvelope['status']>().toEqualTypeOf<EnvelopeStatus>();
    expectTypeOf<Extract<ResultEnvelope, { status: 'error' }>['error']>().toEqualTypeOf<{
      code: string;
      message: string;
    }>();
    expectTypeOf<Extract<ResultEnvelope, { status: 'error' }>['result_s3']>().toEqualTypeOf<undefined>();
    expectTypeOf<Extract<ResultEnvelope, { status: 'processing' }>['result_s3']>().toEqualTypeOf<undefined>();
    expectTypeOf<Extract<ResultEnvelope, { status: 'done' | 'needs_check' }>['result_s3']>().toEqualTypeOf<
      { bucket: string; key: string } | undefined
    >();
    expectTypeOf<
      Extract<ResultEnvelope, { status: 'done' | 'needs_check' }>['error']
    >().toEqualTypeOf<undefined>();
  });
});

describe('recognition-job-message schema', () => {
  it('accepts a valid job message', () => {
    expect(checkJobMessage(validJob)).toEqual({ valid: true, value: validJob });
    expect(validateJobMessage(validJob)).toBe(true);
  });

  it.each(jobMessageSchema.required)('rejects a job message without %s', (field) => {
    const message: Record<string, unknown> = { ...validJob };
    delete message[field];
    const check = checkJobMessage(message);
    expect(check.valid).toBe(false);
    expect(check.valid ? [] : check.errors).toContainEqual(
      expect.objectContaining({ keyword: 'required', params: { missingProperty: field } }),
    );
    expect(validateJobMessage(message)).toBe(false);
  });

  it.each<[string, Record<string, unknown>]>([
    ['a field the service does not know', { priority: 'high' }],
    ['an object-valued unknown field', { trace: { tenant: 'acme', tags: ['a', 'b'] }, extra: null }],
    ['an unknown field in source_s3', { source_s3: { bucket: 'b', key: 'k', version_id: 'v7' } }],
    [
      'an unknown field in result_s3_prefix',
      { result_s3_prefix: { bucket: 'b', key_prefix: 'p/', storage_class: 'STANDARD' } },
    ],
  ])('accepts %s (a tolerant reader: the core may add fields)', (_name, patch) => {
    const message = { ...validJob, ...patch };
    expect(checkJobMessage(message)).toEqual({ valid: true, value: message });
  });

  it('the published schema file accepts a job message with unknown fields, as any 2020-12 validator reads it', () => {
    const file = JSON.parse(
      readFileSync(new URL('../../schemas/recognition-job-message.schema.json', import.meta.url), 'utf8'),
    ) as object;
    const ajv = new Ajv2020({ strict: true, allErrors: true });
    addFormatsModule.default(ajv, ['uuid', 'date-time']);
    const validate = ajv.compile(file);
    const extended = {
      ...validJob,
      priority: 'high',
      source_s3: { ...validJob.source_s3, version_id: 'v7' },
      result_s3_prefix: { ...validJob.result_s3_prefix, region: 'eu-west-1' },
    };
    expect(validate(extended), JSON.stringify(validate.errors)).toBe(true);
    // Known fields stay strictly typed, whatever sits beside them.
    expect(validate({ ...extended, attempt: '1' })).toBe(false);
    expect(validate({ ...extended, source_s3: { version_id: 'v7', key: 'k' } })).toBe(false);
  });

  it.each<[string, Record<string, unknown>]>([
    ['attempt as a string', { attempt: '1' }],
    ['a source_s3 key that is not a string', { source_s3: { bucket: 'b', key: 7, extra: 1 } }],
    ['a result_s3_prefix without key_prefix', { result_s3_prefix: { bucket: 'b', prefix: 'p/' } }],
    ['attempt 0', { attempt: 0 }],
    ['a fractional attempt', { attempt: 1.5 }],
    ['another reply subject', { reply_subject: 'recognition.results' }],
    ['a urn:uuid job_id (PostgreSQL rejects it)', { job_id: `urn:uuid:${JOB_ID}` }],
    ['a file_id that is not a uuid', { file_id: 'file-1' }],
    ['a reply_deadline that is not a date-time', { reply_deadline: '2025-03-01' }],
    ['an empty key_prefix', { result_s3_prefix: { bucket: 'b', key_prefix: '' } }],
  ])('rejects %s', (_name, patch) => {
    expect(validateJobMessage({ ...validJob, ...patch })).toBe(false);
  });
});

describe('recognition-result-message schema', () => {
  it('reports every error with its path (allErrors)', () => {
    const check = checkResultEnvelope({ job_id: 'x', status: 'error', service: { name: '' }, result_s3: {} });
    expect(check.valid).toBe(false);
    const paths = check.valid ? [] : check.errors.map((e) => `${e.instancePath} ${e.keyword}`);
    expect(paths).toEqual(
      expect.arrayContaining([
        '/job_id format',
        '/service/name minLength',
        '/service required',
        '/result_s3 false schema',
        ' required',
      ]),
    );
  });
});

describe('the deciding validators leave format: uuid to UUID_PATTERN', () => {
  // Reference validators with every format checked by ajv-formats: the daemon's decide the same.
  const full = new Ajv2020({ strict: true, strictRequired: false });
  addFormatsModule.default(full, ['uuid', 'date-time']);
  const fullJob = full.compile(jobMessageSchema);
  const fullResult = full.compile(resultEnvelopeSchema);
  const validEnvelope = {
    job_id: JOB_ID,
    status: 'error',
    service: { name: 'tabular-parser', version: '1.0.0' },
    error: { code: 'E1', message: 'broken' },
  };

  // Ids near and far from a UUID: canonical ones in either case, urn-prefixed, cut, padded, other.
  const candidate = fc.oneof(
    fc.uuid(),
    fc.uuid().map((u) => u.toUpperCase()),
    fc.uuid().map((u) => `urn:uuid:${u}`),
    fc.uuid().map((u) => `${u} `),
    fc.uuid().map((u) => u.slice(1)),
    fc.uuid().map((u) => u.replaceAll('-', '')),
    fc.string(),
  );

  it('accepts and refuses the same job ids as the full format check', () => {
    expect(fullJob(validJob)).toBe(true);
    expect(fullResult(validEnvelope), JSON.stringify(fullResult.errors)).toBe(true);
    fc.assert(
      fc.property(candidate, candidate, (jobId, fileId) => {
        const job = { ...validJob, job_id: jobId, file_id: fileId };
        expect(validateJobMessage(job)).toBe(fullJob(job));
        const envelope = { ...validEnvelope, job_id: jobId };
        expect(checkResultEnvelope(envelope).valid).toBe(fullResult(envelope));
      }),
    );
  });

  it('still names the format among the errors it explains', () => {
    const check = checkJobMessage({ ...validJob, job_id: `urn:uuid:${JOB_ID}` });
    expect(check.valid).toBe(false);
    expect(check.valid ? [] : check.errors.map((e) => `${e.instancePath} ${e.keyword}`)).toEqual([
      '/job_id pattern',
    ]);
    const notUuid = checkJobMessage({ ...validJob, job_id: 'x' });
    expect(notUuid.valid ? [] : notUuid.errors.map((e) => `${e.instancePath} ${e.keyword}`)).toEqual(
      expect.arrayContaining(['/job_id format', '/job_id pattern']),
    );
  });
});
