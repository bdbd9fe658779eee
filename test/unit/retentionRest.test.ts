import { describe, expect, it } from 'vitest';
import { restAfterBatch } from '../../src/daemon/retention.js';

describe('the rest after a retention batch', () => {
  it.each([
    [100, 80, 0],
    [50, 80, 80],
    [25, 80, 240],
    [10, 10, 90],
  ])('at %i %% busy, after a batch of %i ms, is %i ms', (percent, batchMs, restMs) => {
    expect(restAfterBatch(batchMs, percent)).toBe(restMs);
  });

  it('is capped, so that a stopping daemon never waits long for it', () => {
    expect(restAfterBatch(60_000, 1)).toBe(1_000);
  });
});
