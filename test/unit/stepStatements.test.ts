/** Statement names are derived from their texts: nobody bumps a version, a changed text is prepared anew. */
import { describe, expect, it } from 'vitest';
import { defineStatement } from '../../src/step/statement.js';
import { DUE_LOCK, LOCK } from '../../src/step/statements.js';
import { WRITE } from '../../src/step/write.js';

describe('defineStatement', () => {
  it('gives the same text the same name, every time', () => {
    const text = 'SELECT 1 AS one WHERE $1::int > 0';
    expect(defineStatement('probe', text).name).toBe(defineStatement('probe', text).name);
    expect(defineStatement('probe', text).name).toMatch(/^rc_probe_[0-9a-f]{12}$/);
  });

  it('gives distinct texts distinct names, however small the change', () => {
    const a = defineStatement('probe', 'SELECT 1');
    const b = defineStatement('probe', 'SELECT 1 ');
    const c = defineStatement('probe', 'SELECT 2');
    expect(new Set([a.name, b.name, c.name]).size).toBe(3);
  });

  it('refuses a label that is not snake_case and a name PostgreSQL would cut short', () => {
    expect(() => defineStatement('Step Lock', 'SELECT 1')).toThrow(/snake_case/);
    expect(() => defineStatement('x'.repeat(60), 'SELECT 1')).toThrow(/too long/);
  });

  it("gives every one of the step's statements its own name, carrying its text", () => {
    const all = [LOCK, ...Object.values(DUE_LOCK), WRITE];
    expect(new Set(all.map((s) => s.name)).size).toBe(all.length);
    expect(new Set(all.map((s) => s.text)).size).toBe(all.length);
    for (const s of all)
      expect(s).toEqual(defineStatement(s.name.replace(/^rc_|_[0-9a-f]{12}$/g, ''), s.text));
  });
});
