/**
 * The log lines' clock, the stream the daemon logs to, and errors on a line: each line carries
 * the time it was logged; the stream, which writes many lines at once, writes every line whole and
 * in order; every error, under any key, keeps its type, message, code and causes, secrets scrubbed.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { errors as natsErrors } from '@nats-io/nats-core';
import { JetStreamApiError } from '@nats-io/jetstream';
import pg from 'pg';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createLogger, logDestination } from '../../src/logger.js';
import { createLogSink } from '../helpers/logSink.js';

afterEach(() => {
  vi.useRealTimers();
});

describe('the time of a line', () => {
  it('is the clock when the line is logged, ISO 8601 in UTC to the millisecond', () => {
    vi.useFakeTimers({ now: new Date('2026-03-04T05:06:07.008Z') });
    const sink = createLogSink();
    sink.logger.info('first');
    sink.logger.info('second, the same millisecond');
    vi.setSystemTime(new Date('2026-03-04T05:06:07.009Z'));
    sink.logger.info('third, a millisecond later');
    vi.setSystemTime(new Date('2027-01-01T00:00:00.000Z'));
    sink.logger.info('fourth');
    expect(sink.lines.map((l) => l.time)).toEqual([
      '2026-03-04T05:06:07.008Z',
      '2026-03-04T05:06:07.008Z',
      '2026-03-04T05:06:07.009Z',
      '2027-01-01T00:00:00.000Z',
    ]);
  });
});

describe('logDestination', () => {
  it('writes every line whole and in order, however many are logged at once', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rc-log-'));
    try {
      const file = join(dir, 'daemon.log');
      const dest = logDestination(file);
      const logger = createLogger({ level: 'info', destination: dest });
      // Bursts much larger than one write, and lines of several sizes, some beyond Latin-1.
      for (let burst = 0; burst < 5; burst++) {
        for (let i = 0; i < 400; i++) {
          const n = burst * 400 + i;
          logger.info(
            { n, pad: 'x'.repeat(n % 97), text: n % 7 === 0 ? 'état → done' : 'plain' },
            `line ${n}`,
          );
        }
        await new Promise((resolve) => setImmediate(resolve));
      }
      await new Promise<void>((resolve, reject) => {
        dest.once('close', resolve);
        dest.once('error', reject);
        dest.end();
      });
      const lines = readFileSync(file, 'utf8').trimEnd().split('\n');
      const parsed = lines.map((l) => JSON.parse(l) as { n: number; msg: string; text: string });
      expect(parsed.map((l) => l.n)).toEqual(Array.from({ length: 2000 }, (_, n) => n));
      expect(parsed.every((l) => l.msg === `line ${l.n}`)).toBe(true);
      expect(parsed.filter((l) => l.text === 'état → done')).toHaveLength(Math.ceil(2000 / 7));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('an error on a line', () => {
  /** The one line `log` writes, logged at error on a sink of `level`. */
  function logged(fields: object, opts: { level?: string; secrets?: string[]; msg?: string } = {}) {
    const sink = createLogSink({ level: opts.level ?? 'info', secrets: opts.secrets ?? [] });
    if (opts.msg === undefined) sink.logger.error(fields);
    else sink.logger.error(fields, opts.msg);
    expect(sink.lines).toHaveLength(1);
    return { line: sink.lines[0]!, text: sink.text() };
  }

  it('keeps the type and the message of an Error, and its stack only at debug', () => {
    const err = new TypeError('cannot read the row');
    expect(logged({ err }, { msg: 'failed' }).line.err).toEqual({
      type: 'TypeError',
      message: 'cannot read the row',
    });
    const debug = logged({ err }, { level: 'debug', msg: 'failed' }).line.err as Record<string, unknown>;
    expect(debug).toMatchObject({ type: 'TypeError', message: 'cannot read the row' });
    expect(debug.stack).toMatch(/^TypeError: cannot read the row\n\s+at /);
  });

  it('keeps the code and the fields of a pg DatabaseError', () => {
    // As pg's protocol parser builds it from the server's ErrorResponse.
    const err = Object.assign(
      new pg.DatabaseError('terminating connection due to administrator command', 116, 'error'),
      {
        severity: 'FATAL',
        code: '57P01',
        detail: undefined,
        routine: 'ProcessInterrupts',
      },
    );
    expect(logged({ err, event: 'batch_retry' }, { msg: 'batch failed' }).line).toMatchObject({
      event: 'batch_retry',
      err: {
        type: 'DatabaseError',
        message: 'terminating connection due to administrator command',
        code: '57P01',
        severity: 'FATAL',
        routine: 'ProcessInterrupts',
      },
    });
  });

  it('keeps NATS errors: their type, the JetStream code, and the cause of a failed request', () => {
    const request = new natsErrors.RequestError('no responders: jobs.tabular-parser', {
      cause: new natsErrors.NoRespondersError('jobs.tabular-parser'),
    });
    expect(logged({ err: request }, { msg: 'publish failed' }).line.err).toEqual({
      type: 'RequestError',
      message: 'no responders: jobs.tabular-parser',
      cause: {
        type: 'NoRespondersError',
        message: "no responders: 'jobs.tabular-parser'",
        name: 'NoResponders',
        subject: 'jobs.tabular-parser',
      },
    });
    const api = new JetStreamApiError({ err_code: 10059, code: 404, description: 'stream not found' });
    expect(logged({ err: api }, { msg: 'x' }).line.err).toEqual({
      type: 'JetStreamApiError',
      message: 'stream not found',
      code: 10059,
    });
    const closed = new natsErrors.ClosedConnectionError();
    expect(logged({ err: closed }, { msg: 'x' }).line.err).toEqual({
      type: 'ClosedConnectionError',
      message: 'closed connection',
    });
  });

  it('names an AggregateError without a message of its own by its errors', () => {
    // What net throws when every address of "localhost" refuses the connection.
    const refused = (address: string) =>
      Object.assign(new Error(`connect ECONNREFUSED ${address}:5432`), {
        errno: -111,
        code: 'ECONNREFUSED',
        syscall: 'connect',
        address,
        port: 5432,
      });
    const err = Object.assign(new AggregateError([refused('::1'), refused('127.0.0.1')], ''), {
      code: 'ECONNREFUSED',
    });
    const line = logged({ err }, { msg: 'x' }).line;
    expect(line.err).toEqual({
      type: 'AggregateError',
      message: 'connect ECONNREFUSED ::1:5432; connect ECONNREFUSED 127.0.0.1:5432',
      code: 'ECONNREFUSED',
      errors: [
        {
          type: 'Error',
          message: 'connect ECONNREFUSED ::1:5432',
          code: 'ECONNREFUSED',
          errno: -111,
          syscall: 'connect',
          address: '::1',
          port: 5432,
        },
        {
          type: 'Error',
          message: 'connect ECONNREFUSED 127.0.0.1:5432',
          code: 'ECONNREFUSED',
          errno: -111,
          syscall: 'connect',
          address: '127.0.0.1',
          port: 5432,
        },
      ],
    });
    // Nothing to name it by but its type.
    expect(logged({ err: new AggregateError([]) }, { msg: 'x' }).line.err).toEqual({
      type: 'AggregateError',
      message: 'AggregateError',
    });
  });

  it('follows the cause chain, whatever the causes are, and stops where it loops', () => {
    const root = Object.assign(new Error('Connection terminated unexpectedly'), { code: 'ECONNRESET' });
    const middle = new Error('the commit failed', { cause: root });
    const top = new Error('the batch failed', { cause: middle });
    expect(logged({ err: top }, { msg: 'x' }).line.err).toEqual({
      type: 'Error',
      message: 'the batch failed',
      cause: {
        type: 'Error',
        message: 'the commit failed',
        cause: { type: 'Error', message: 'Connection terminated unexpectedly', code: 'ECONNRESET' },
      },
    });
    expect(logged({ err: new Error('outer', { cause: 'a string' }) }, { msg: 'x' }).line.err).toEqual({
      type: 'Error',
      message: 'outer',
      cause: 'a string',
    });
    const a = new Error('a');
    const b = new Error('b', { cause: a });
    (a as { cause?: unknown }).cause = b;
    expect(logged({ err: a }, { msg: 'x' }).line.err).toEqual({
      type: 'Error',
      message: 'a',
      cause: { type: 'Error', message: 'b', cause: '[Circular]' },
    });
    // A long chain is cut, each error down to the cut keeping its message.
    let deep = new Error('cause 0');
    for (let i = 1; i < 30; i++) deep = new Error(`cause ${i}`, { cause: deep });
    const text = logged({ err: deep }, { msg: 'x' }).text;
    expect(text).toContain('"message":"cause 29"');
    expect(text).toContain('"message":"cause 21"');
    expect(text).not.toContain('{}');
  });

  it('gives every key that holds an Error the same record, however deep', () => {
    const { line } = logged(
      {
        error: new RangeError('out of range'),
        cause: new Error('the cause'),
        details: { stage: 'apply', failures: [new Error('first'), 'not an error'] },
      },
      { msg: 'x' },
    );
    expect(line).toMatchObject({
      error: { type: 'RangeError', message: 'out of range' },
      cause: { type: 'Error', message: 'the cause' },
      details: { stage: 'apply', failures: [{ type: 'Error', message: 'first' }, 'not an error'] },
    });
  });

  it('takes the error’s message for a line logged with an error alone', () => {
    expect(logged(new Error('lone error')).line).toMatchObject({
      msg: 'lone error',
      err: { type: 'Error', message: 'lone error' },
    });
    expect(logged({ err: new AggregateError([new Error('inner')]) }).line.msg).toBe('inner');
  });

  it('scrubs secrets from messages, causes, fields and stacks', () => {
    const err = Object.assign(
      new Error('connect postgres://app:p/a@ss@db:5432/x failed (token s3cr3t-value)', {
        cause: new Error('nats://T0KEN@nats:4222 refused'),
      }),
      { url: 'postgres://app:p/a@ss@db:5432/x', password: 'hunter2', code: 'E_CONNECT' },
    );
    const { line, text } = logged({ err }, { level: 'debug', secrets: ['s3cr3t-value'] });
    for (const secret of ['p/a@ss', 's3cr3t-value', 'T0KEN', 'hunter2']) expect(text).not.toContain(secret);
    expect(line.msg).toBe('connect postgres://app:[REDACTED]@db:5432/x failed (token [REDACTED])');
    expect(line.err).toMatchObject({
      type: 'Error',
      message: 'connect postgres://app:[REDACTED]@db:5432/x failed (token [REDACTED])',
      code: 'E_CONNECT',
      url: 'postgres://app:[REDACTED]@db:5432/x',
      password: '[REDACTED]',
      cause: { type: 'Error', message: 'nats://[REDACTED]@nats:4222 refused' },
    });
    const stack = (line.err as { stack: string }).stack;
    expect(stack).toMatch(/^Error: connect postgres:\/\/app:\[REDACTED\]@db:5432\/x failed/);
    expect((line.err as { cause: { stack: string } }).cause.stack).toMatch(/^Error: nats:\/\/\[REDACTED\]@/);
  });

  it('leaves a line without errors or secrets as it is', () => {
    const fields = { event: 'applied', job_id: 'j', counts: { done: 2 }, list: [1, 'two'] };
    expect(logged(fields, { msg: 'ok' }).line).toMatchObject(fields);
  });
});
