/**
 * The one table of database failures (src/errors.ts): per SQLSTATE class, whose fault a failure
 * is (the message's values, or the infrastructure's) and whether a retry soon can succeed.
 */
import { describe, expect, it } from 'vitest';
import {
  DATABASE_FAILURES,
  classifyDatabaseFailure,
  isMessageFault,
  isRetryable,
  InconsistencyError,
} from '../../src/errors.js';

/** An error as pg raises it: a SQLSTATE, and the table/column/constraint it names, if any. */
function pgError(code: string, fields: Record<string, string> = {}): Error {
  return Object.assign(new Error(`error ${code}`), { code, ...fields });
}

describe('classifyDatabaseFailure', () => {
  it.each([
    // [sqlstate, fault, transient, what]
    ['08006', 'infrastructure', true, 'connection failure'],
    ['08P01', 'infrastructure', true, 'protocol violation (a pooler dropped the server connection)'],
    ['0A000', 'infrastructure', false, 'feature not supported'],
    ['22001', 'message', false, 'a string too long for its column'],
    ['22P02', 'message', false, 'invalid text representation'],
    ['22P05', 'message', false, 'an untranslatable character (U+0000 in jsonb)'],
    ['23505', 'message', false, 'a unique constraint'],
    ['23514', 'message', false, 'a check constraint'],
    ['25P02', 'infrastructure', false, 'in a failed transaction'],
    ['25006', 'infrastructure', true, 'read-only: a standby now'],
    ['26000', 'infrastructure', false, 'prepared statement does not exist (a pooler)'],
    ['28000', 'infrastructure', false, 'invalid authorization'],
    ['28P01', 'infrastructure', false, 'password authentication failed'],
    ['3D000', 'infrastructure', false, 'no such database'],
    ['40001', 'infrastructure', true, 'serialization failure'],
    ['40P01', 'infrastructure', true, 'deadlock'],
    ['40002', 'infrastructure', false, 'other transaction rollback'],
    ['42501', 'infrastructure', false, 'insufficient privilege (a revoked grant)'],
    ['42P01', 'infrastructure', false, 'undefined table'],
    ['42P05', 'infrastructure', false, 'prepared statement already exists (a pooler)'],
    ['42601', 'infrastructure', false, 'syntax error'],
    ['53300', 'infrastructure', true, 'too many connections'],
    ['53100', 'infrastructure', true, 'disk full'],
    ['54000', 'message', false, 'a value too large for an index row'],
    ['54001', 'infrastructure', false, 'statement too complex'],
    ['55000', 'infrastructure', false, 'object not in prerequisite state'],
    ['55P03', 'infrastructure', true, 'lock not available'],
    ['57014', 'infrastructure', false, 'query canceled'],
    ['57P01', 'infrastructure', true, 'admin shutdown'],
    ['57P03', 'infrastructure', true, 'cannot connect now'],
    ['58030', 'infrastructure', true, 'I/O error'],
    ['P0001', 'infrastructure', false, 'raised by a function'],
    ['XX000', 'infrastructure', false, 'internal error'],
    ['XX001', 'infrastructure', false, 'data corrupted'],
    ['HV000', 'infrastructure', false, 'an unknown class (foreign data wrapper)'],
    ['99999', 'infrastructure', false, 'a code no class knows'],
  ] as Array<[string, 'message' | 'infrastructure', boolean, string]>)(
    '%s: %s, transient %s (%s)',
    (code, fault, transient) => {
      const fields: Record<string, string> = code.startsWith('23')
        ? { table: 'recognition_job', constraint: 'c' }
        : {};
      const f = classifyDatabaseFailure(pgError(code, fields));
      expect(f).toMatchObject({ code, fault, transient });
      expect(isMessageFault(pgError(code, fields))).toBe(fault === 'message');
      expect(isRetryable(pgError(code, fields))).toBe(transient);
    },
  );

  it('lists each class or code once', () => {
    const keys = DATABASE_FAILURES.map((r) => r.sqlstate);
    expect(new Set(keys).size).toBe(keys.length);
  });

  it('a constraint violation raised by a trigger, naming no table or constraint, is not the message’s', () => {
    // The legal-edges trigger refuses a status change the machine did not make: an inconsistency.
    expect(classifyDatabaseFailure(pgError('23514'))).toMatchObject({
      fault: 'infrastructure',
      transient: false,
    });
    expect(isMessageFault(pgError('23502', { column: 'status', table: 'recognition_job' }))).toBe(true);
  });

  it('errors without a SQLSTATE: connection failures are transient, anything else an unknown infrastructure fault', () => {
    expect(
      classifyDatabaseFailure(Object.assign(new Error('connect'), { code: 'ECONNREFUSED' })),
    ).toMatchObject({
      fault: 'infrastructure',
      transient: true,
    });
    expect(classifyDatabaseFailure(new Error('Connection terminated unexpectedly'))).toMatchObject({
      transient: true,
    });
    expect(classifyDatabaseFailure(new Error('timeout exceeded when trying to connect'))).toMatchObject({
      transient: true,
    });
    expect(classifyDatabaseFailure(new TypeError('x is undefined'))).toEqual({
      code: null,
      meaning: 'unknown',
      fault: 'infrastructure',
      transient: false,
    });
    expect(classifyDatabaseFailure(new InconsistencyError('the write returned no row'))).toMatchObject({
      fault: 'infrastructure',
    });
    expect(classifyDatabaseFailure('a string')).toMatchObject({ fault: 'infrastructure', transient: false });
  });

  it('looks through the cause chain', () => {
    const wrapped = new Error('batch failed', { cause: pgError('22P02') });
    expect(classifyDatabaseFailure(wrapped)).toMatchObject({ code: '22P02', fault: 'message' });
    expect(isRetryable(new Error('outer', { cause: pgError('40P01') }))).toBe(true);
  });
});
