/**
 * The chaos harness's seeded randomness: every choice of a run (which daemon dies when, what each
 * scripted job sends, which envelopes are repeated, which invalid messages go out) is drawn from
 * one generator, so a seed names a run. Timing still varies between runs (processes, the kernel),
 * so a replay repeats the choices, not the interleaving.
 */

/** A seeded pseudo-random generator with the helpers the harness uses. Pure apart from its state. */
export interface Rng {
  /** Uniform in [0, 1). */
  next(): number;
  /** Uniform integer in [min, max]. */
  int(min: number, max: number): number;
  /** Uniform real in [min, max). */
  between(min: number, max: number): number;
  /** True with probability p. */
  chance(p: number): boolean;
  /** One element, uniformly. */
  pick<T>(items: readonly T[]): T;
  /** One key, with probability proportional to its weight. */
  weighted<K extends string>(weights: Readonly<Record<K, number>>): K;
  /** A new generator seeded from this one (an independent stream for a subsystem). */
  fork(): Rng;
}

/** mulberry32: 32 bits of state, fast, good enough for choosing faults. */
export function createRng(seed: number): Rng {
  let a = seed >>> 0;
  const next = (): number => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const rng: Rng = {
    next,
    int: (min, max) => min + Math.floor(next() * (max - min + 1)),
    between: (min, max) => min + next() * (max - min),
    chance: (p) => next() < p,
    pick: (items) => {
      if (items.length === 0) throw new Error('pick from an empty list');
      return items[Math.floor(next() * items.length)]!;
    },
    weighted: (weights) => {
      const entries = Object.entries(weights) as Array<[never, number]>;
      const total = entries.reduce((s, [, w]) => s + w, 0);
      let x = next() * total;
      for (const [k, w] of entries) {
        x -= w;
        if (x < 0) return k;
      }
      return entries[entries.length - 1]![0];
    },
    fork: () => createRng(Math.floor(next() * 2 ** 32)),
  };
  return rng;
}
