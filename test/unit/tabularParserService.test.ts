/**
 * The reference service's pure parts: the seeded generator and the weighted choice of fates, which
 * make a demo run repeatable and guarantee its mix.
 */
import { describe, expect, it } from 'vitest';
import {
  DEFAULT_WEIGHTS,
  FATES,
  mulberry32,
  parseWeights,
  pickFate,
  type Fate,
} from '../../workshop/reference/fates.js';

describe('mulberry32', () => {
  it('gives the same sequence for the same seed, another for another seed, all in [0, 1)', () => {
    const a = mulberry32(42);
    const b = mulberry32(42);
    const c = mulberry32(43);
    const xs = Array.from({ length: 1000 }, () => a());
    expect(Array.from({ length: 1000 }, () => b())).toEqual(xs);
    expect(Array.from({ length: 1000 }, () => c())).not.toEqual(xs);
    expect(xs.every((x) => x >= 0 && x < 1)).toBe(true);
    expect(new Set(xs).size).toBe(1000);
  });
});

describe('pickFate', () => {
  it('follows the weights', () => {
    const random = mulberry32(7);
    const counts: Record<Fate, number> = { done: 0, needs_check: 0, error: 0, silent: 0 };
    const n = 20_000;
    for (let i = 0; i < n; i++) counts[pickFate(DEFAULT_WEIGHTS, random())]++;
    const total = FATES.reduce((s, f) => s + DEFAULT_WEIGHTS[f], 0);
    for (const f of FATES) expect(Math.abs(counts[f] / n - DEFAULT_WEIGHTS[f] / total)).toBeLessThan(0.02);
  });

  it('never picks a fate of weight 0, even at the edges', () => {
    const w = { done: 0, needs_check: 1, error: 0, silent: 1 };
    for (const r of [0, 0.25, 0.4999, 0.5, 0.9999999])
      expect(['needs_check', 'silent']).toContain(pickFate(w, r));
    expect(pickFate(w, 0)).toBe('needs_check');
    expect(pickFate(w, 0.9999999)).toBe('silent');
  });

  it('with the demo seed, gives every fate within the first 40 jobs', () => {
    const random = mulberry32(42);
    const seen = new Set<Fate>();
    // The service draws three numbers per job: fate, delay, error pick.
    for (let i = 0; i < 40; i++) {
      seen.add(pickFate(DEFAULT_WEIGHTS, random()));
      random();
      random();
    }
    expect([...seen].sort()).toEqual([...FATES].sort());
  });
});

describe('parseWeights', () => {
  it('reads name=weight pairs; missing fates weigh 0', () => {
    expect(parseWeights('done=3, error=1')).toEqual({ done: 3, needs_check: 0, error: 1, silent: 0 });
  });

  it.each(['done=x', 'finished=1', 'done=-1', 'done=0,error=0'])('rejects %j', (text) => {
    expect(() => parseWeights(text)).toThrow();
  });
});
