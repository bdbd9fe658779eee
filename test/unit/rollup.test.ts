/**
 * The p95 of the console's latency counts: the upper edge of the place the rank falls in, never
 * more than the largest time counted.
 */
import { describe, expect, it } from 'vitest';
import { bucketQuantile, LATENCY_BUCKET_BOUNDS_MS } from '../../src/db/rollup.js';

const BOUNDS = [10, 100, 1000];

describe('bucketQuantile', () => {
  it('is null when nothing is counted', () => {
    expect(bucketQuantile([0, 0, 0, 0], BOUNDS, null, 0.95)).toBeNull();
    expect(bucketQuantile([], BOUNDS, null, 0.95)).toBeNull();
  });

  it('is the upper edge of the place the rank falls in', () => {
    // 19 of 20 below 100, one above 1000: the 19th is the p95.
    expect(bucketQuantile([0, 19, 0, 1], BOUNDS, 5000, 0.95)).toBe(100);
    // 18 of 20 below 100: the 19th is in [100, 1000).
    expect(bucketQuantile([0, 18, 1, 1], BOUNDS, 5000, 0.95)).toBe(1000);
    expect(bucketQuantile([3, 0, 0, 0], BOUNDS, 4, 0.5)).toBe(4);
  });

  it('is never more than the largest time counted', () => {
    expect(bucketQuantile([0, 20, 0, 0], BOUNDS, 42, 0.95)).toBe(42);
  });

  it('is the largest time when the rank falls past the last bound', () => {
    expect(bucketQuantile([0, 0, 0, 2], BOUNDS, 7000, 0.95)).toBe(7000);
    expect(bucketQuantile([0, 0, 0, 2], BOUNDS, null, 0.95)).toBeNull();
  });

  it('takes the first sample at the smallest quantile', () => {
    expect(bucketQuantile([1, 0, 0, 9], BOUNDS, 9000, 0.01)).toBe(10);
  });
});

describe('the ladder', () => {
  it('rises strictly, from more than 0', () => {
    expect(LATENCY_BUCKET_BOUNDS_MS[0]).toBeGreaterThan(0);
    for (let i = 1; i < LATENCY_BUCKET_BOUNDS_MS.length; i++)
      expect(LATENCY_BUCKET_BOUNDS_MS[i]).toBeGreaterThan(LATENCY_BUCKET_BOUNDS_MS[i - 1]!);
  });
});
