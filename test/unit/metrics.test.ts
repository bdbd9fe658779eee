/**
 * The metrics of a daemon belong to it: several daemons in one process (the tests, the bench)
 * each have a registry with the process metrics in it, and a daemon that is gone leaves nothing
 * global that refers to its registry (and through the gauges read on scrape, to the daemon).
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Collect garbage until `ref` is cleared, a few times at most; true once it is. */
async function collected(ref: WeakRef<object>): Promise<boolean> {
  for (let i = 0; i < 5; i++) {
    // A WeakRef's target is kept until the end of the job that created or read it.
    await new Promise((resolve) => setImmediate(resolve));
    gc();
    if (ref.deref() === undefined) return true;
  }
  return false;
}

describe('createMetrics', () => {
  it("includes the process metrics in every daemon's registry", async () => {
    const names = async () =>
      (await createMetrics().registry.getMetricsAsJSON())
        .map((m) => m.name)
        .filter((n) => n.startsWith('recognition_core_'));
    const first = await names();
    expect(first).toContain('recognition_core_process_cpu_user_seconds_total');
    expect(first).toContain('recognition_core_nodejs_gc_duration_seconds');
    expect(await names()).toEqual(first);
  });

  it('leaves no reference to a registry behind once its daemon drops it', async () => {
    const source = { readiness: async () => ({ database: true }) };
    const ref = new WeakRef(createMetrics(source).registry);
    expect(await collected(ref)).toBe(true);
  });

  it('without the process metrics, leaves them out', async () => {
    const names = (await createMetrics({}, { defaultMetrics: false }).registry.getMetricsAsJSON()).map(
      (m) => m.name,
    );
    expect(names.filter((n) => n.startsWith('recognition_core_'))).toEqual([]);
    expect(names).toContain('recognition_inbox_envelopes_total');
  });
});
