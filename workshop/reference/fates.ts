/**
 * The reference service's name and its mix of fates, apart from the service itself, so that the
 * CLI can parse `service tabular-parser --weights` and show its defaults without loading NATS.
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
