/**
 * The service kit's pure parts: what it answers to an invalid job message, where a result file
 * belongs, which exchange the environment names, and how `traceparent` passes without an SDK.
 */
import { ROOT_CONTEXT, trace } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { checkResultEnvelope } from '../../src/messages/schemas.js';
import {
  CONTRACT_EXCHANGE,
  INVALID_JOB_MESSAGE,
  checkJobMessage,
  contextOfHeaders,
  describeInvalidJob,
  exchangeFromEnv,
  expectedResultPrefix,
  headersOfContext,
  invalidJobAnswer,
  resultKey,
} from '../../service-kit/src/index.js';
import { CONTRACT_NAMES } from '../../src/nats/subjects.js';

const JOB_ID = '3f1b6c1e-8a3c-4c1e-9d5e-2b7a4f0c9e11';
const FILE_ID = '0b5e7c1a-2d3f-4e5a-8b9c-1d2e3f4a5b6c';

describe('an invalid job message', () => {
  it('names its job when job_id is a uuid: the error result goes to result:<job_id>:<attempt>', () => {
    expect(invalidJobAnswer({ job_id: JOB_ID, attempt: 2, source_s3: 'nope' })).toEqual({
      jobId: JOB_ID,
      resultMsgId: `result:${JOB_ID}:2`,
    });
  });

  it.each([[0], [-1], [1.5], ['2'], [null], [undefined]])(
    'takes attempt 0 when the attempt (%j) cannot be read, the same on every delivery',
    (attempt) => {
      expect(invalidJobAnswer({ job_id: JOB_ID, attempt })).toEqual({
        jobId: JOB_ID,
        resultMsgId: `result:${JOB_ID}:0`,
      });
    },
  );

  it.each([[null], [[JOB_ID]], ['text'], [{}], [{ job_id: 42 }], [{ job_id: `urn:uuid:${JOB_ID}` }]])(
    'names no job for %j: the message is only terminated',
    (value) => {
      expect(invalidJobAnswer(value)).toBeNull();
    },
  );

  it('describes the validator errors in one bounded line, which the envelope schema accepts', () => {
    const check = checkJobMessage({ job_id: JOB_ID, attempt: 'x'.repeat(50_000) });
    expect(check.valid).toBe(false);
    const text = describeInvalidJob(check.valid ? [] : check.errors);
    expect(text).toMatch(/^the job message does not match recognition-job-message\.schema\.json: /);
    expect(text).toContain('/attempt');
    expect(text).not.toContain('\n');
    const many = describeInvalidJob(
      Array.from({ length: 500 }, (_, i) => ({
        instancePath: `/field_${i}`,
        schemaPath: '#/required',
        keyword: 'required',
        params: {},
        message: 'must be here',
      })),
    );
    expect(many.length).toBeLessThanOrEqual(2_000);
    const envelope = {
      job_id: JOB_ID,
      status: 'error',
      service: { name: 'tabular-parser', version: '1' },
      error: { code: INVALID_JOB_MESSAGE, message: many },
    };
    expect(checkResultEnvelope(envelope).valid).toBe(true);
  });
});

describe('resultKey', () => {
  const job = { result_s3_prefix: { bucket: 'results', key_prefix: `results/${FILE_ID}/${JOB_ID}/` } };

  it('puts a file under the job result prefix, in its bucket', () => {
    expect(resultKey(job, 'table.json')).toEqual({
      bucket: 'results',
      key: `results/${FILE_ID}/${JOB_ID}/table.json`,
    });
    expect(resultKey(job, 'pages/1.json').key).toBe(
      `${expectedResultPrefix({ file_id: FILE_ID, job_id: JOB_ID })}pages/1.json`,
    );
  });

  it.each(['', '/abs.json', '../other/x.json', 'a/./b', 'a//b'])('refuses %j', (name) => {
    expect(() => resultKey(job, name)).toThrow(/relative key/);
  });
});

describe('exchangeFromEnv', () => {
  it('is the contract exchange without variables, the core names the same', () => {
    expect(exchangeFromEnv({})).toEqual(CONTRACT_EXCHANGE);
    expect(CONTRACT_EXCHANGE).toEqual({
      jobsStream: CONTRACT_NAMES.jobsStream,
      jobSubjectPrefix: CONTRACT_NAMES.jobSubjectPrefix,
      resultSubject: CONTRACT_NAMES.resultSubject,
    });
  });

  it('takes each name the environment gives', () => {
    expect(
      exchangeFromEnv({ RECOGNITION_JOBS_STREAM: 'X_JOBS', RECOGNITION_RESULT_SUBJECT: 'x.result' }),
    ).toEqual({ jobsStream: 'X_JOBS', jobSubjectPrefix: 'recognition.job.', resultSubject: 'x.result' });
  });
});

describe('trace headers without an SDK', () => {
  const headers = (h: Record<string, string>) => ({
    get: (k: string) => h[k] ?? '',
    keys: () => Object.keys(h),
  });
  const tp = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

  it('passes the job message traceparent and tracestate on as they came', () => {
    const ctx = contextOfHeaders(headers({ traceparent: tp, tracestate: 'vendor=x' }));
    // With no tracer provider, a span started in the context is the job message's own.
    const span = trace.getTracer('t').startSpan('s', {}, ctx);
    expect(headersOfContext(trace.setSpan(ctx, span))).toEqual({ traceparent: tp, tracestate: 'vendor=x' });
  });

  it.each(['', 'garbage', '00-00000000000000000000000000000000-00f067aa0ba902b7-01'])(
    'gives no context for %j',
    (value) => {
      expect(headersOfContext(contextOfHeaders(headers({ traceparent: value })))).toEqual({});
      expect(contextOfHeaders(headers({ traceparent: value }))).toBe(ROOT_CONTEXT);
    },
  );
});

describe('the kit validators are the schema', () => {
  it('accept a job message with fields the schema does not list, refuse one without its fields', () => {
    const job = {
      job_id: JOB_ID,
      file_id: FILE_ID,
      attempt: 1,
      source_s3: { bucket: 'b', key: 'k' },
      result_s3_prefix: { bucket: 'r', key_prefix: 'results/' },
      reply_subject: 'recognition.result',
      reply_deadline: '2026-01-01T00:00:00Z',
      published_at: '2026-01-01T00:00:00Z',
      priority: 3,
    };
    expect(checkJobMessage(job).valid).toBe(true);
    expect(checkJobMessage({ ...job, attempt: 0 }).valid).toBe(false);
    expect(checkJobMessage({ ...job, job_id: `urn:uuid:${JOB_ID}` }).valid).toBe(false);
  });
});
