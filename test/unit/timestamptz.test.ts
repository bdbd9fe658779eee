/**
 * The pool's fast `timestamptz` parser against pg's own, on PostgreSQL's ISO output: the same
 * instant for every input, including the ones the fast path hands back to pg.
 */
import fc from 'fast-check';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { parseTimestamptz } from '../../src/db/database.js';

const pgParse = pg.types.getTypeParser(pg.types.builtins.TIMESTAMPTZ, 'text') as (text: string) => unknown;
const pad = (n: number, w = 2) => String(n).padStart(w, '0');

/** What PostgreSQL prints for a timestamptz with DateStyle ISO. */
const pgText = fc
  .record({
    year: fc.integer({ min: 1, max: 9999 }),
    month: fc.integer({ min: 1, max: 12 }),
    day: fc.integer({ min: 1, max: 28 }),
    hour: fc.integer({ min: 0, max: 23 }),
    minute: fc.integer({ min: 0, max: 59 }),
    second: fc.integer({ min: 0, max: 59 }),
    micros: fc.option(fc.integer({ min: 1, max: 999_999 })),
    offsetHours: fc.integer({ min: -15, max: 15 }),
    offsetMinutes: fc.constantFrom(0, 0, 30, 45),
  })
  .map((t) => {
    const fraction = t.micros === null ? '' : `.${pad(t.micros, 6).replace(/0+$/, '')}`;
    const sign = t.offsetHours < 0 ? '-' : '+';
    const offset = `${sign}${pad(Math.abs(t.offsetHours))}${t.offsetMinutes ? `:${pad(t.offsetMinutes)}` : ''}`;
    return `${pad(t.year, 4)}-${pad(t.month)}-${pad(t.day)} ${pad(t.hour)}:${pad(t.minute)}:${pad(t.second)}${fraction}${offset}`;
  });

const instant = (v: unknown) => (v instanceof Date ? v.getTime() : v);

describe('parseTimestamptz', () => {
  it('gives the instant pg gives, for any ISO output', () => {
    fc.assert(
      fc.property(pgText, (text) => {
        expect(instant(parseTimestamptz(text))).toEqual(instant(pgParse(text)));
      }),
      { numRuns: 5_000 },
    );
  });

  it.each([
    '2026-11-30 01:43:13.123456+00',
    '2026-11-30 01:43:13+05:30',
    '1999-12-31 23:59:59.999999-08',
    '0044-03-15 12:00:00+00 BC',
    '1880-01-01 00:00:00+00:53:28',
    '12026-01-01 00:00:00+00',
    'infinity',
    '-infinity',
  ])('%s as pg parses it', (text) => {
    expect(instant(parseTimestamptz(text))).toEqual(instant(pgParse(text)));
  });
});
