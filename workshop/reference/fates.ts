/**
 * The reference service's name, its mix of fates and how one fate is drawn for a job: a seeded
 * generator and the weights, so that a seed repeats a demo's mix. Pure, and apart from the service
 * itself, so that the CLI can parse `service tabular-parser --weights` and show its defaults
 * without loading NATS.
 */

/** The service's name: its subject suffix, its durable consumer and `service.name` in envelopes. */
export const TABULAR_PARSER = 'tabular-parser';

/** What the service does with one job. `silent` acks the job but never sends a result. */
export type Fate = 'done' | 'needs_check' | 'error' | 'silent';
export const FATES: readonly Fate[] = ['done', 'needs_check', 'error', 'silent'];

/** Relative weights of the fates (any non-negative numbers; at least one positive). */
export type FateWeights = Record<Fate, number>;

/** The default mix: mostly `done`, with enough of every other fate that a demo of 50 jobs shows each. */
export const DEFAULT_WEIGHTS: FateWeights = { done: 55, needs_check: 15, error: 15, silent: 15 };

/** Parse `done=55,needs_check=15,error=15,silent=15` (missing fates weigh 0). */
export function parseWeights(text: string): FateWeights {
  const out: FateWeights = { done: 0, needs_check: 0, error: 0, silent: 0 };
  for (const part of text.split(',')) {
    const [name, value] = part.split('=').map((s) => s.trim());
    if (!name || !(FATES as readonly string[]).includes(name))
      throw new Error(`unknown fate ${JSON.stringify(name)} (use ${FATES.join(', ')})`);
    const n = Number(value);
    if (!Number.isFinite(n) || n < 0) throw new Error(`weight of ${name} must be a non-negative number`);
    out[name as Fate] = n;
  }
  if (!FATES.some((f) => out[f] > 0)) throw new Error('at least one weight must be positive');
  return out;
}

/**
 * mulberry32: a tiny seeded PRNG (32-bit state), uniform in [0, 1). Pure and deterministic: the
 * same seed gives the same sequence, so a demo run can be repeated.
 */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Pick a fate for `r` in [0, 1) by cumulative weight. Pure. */
export function pickFate(weights: FateWeights, r: number): Fate {
  const total = FATES.reduce((s, f) => s + Math.max(0, weights[f]), 0);
  if (!(total > 0)) throw new Error('tabular-parser: at least one fate weight must be positive');
  let x = r * total;
  for (const f of FATES) {
    x -= Math.max(0, weights[f]);
    if (x < 0) return f;
  }
  return FATES.filter((f) => weights[f] > 0).at(-1)!;
}
