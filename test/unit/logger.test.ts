/**
 * The log lines' clock and the stream the daemon logs to: each line carries the time it was
 * logged, and the stream, which writes many lines at once, writes every line whole and in order.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createLogger, logDestination } from '../../src/logger.js';
import { createLogSink } from '../helpers/logSink.js';

afterEach(() => {
  vi.useRealTimers();
});

describe('the time of a line', () => {
  it('is the clock when the line is logged, ISO 8601 in UTC to the millisecond', () => {
    vi.useFakeTimers({ now: new Date('2026-03-04T05:06:07.008Z') });
    const sink = createLogSink();
    sink.logger.info('first');
    sink.logger.info('second, the same millisecond');
    vi.setSystemTime(new Date('2026-03-04T05:06:07.009Z'));
    sink.logger.info('third, a millisecond later');
    vi.setSystemTime(new Date('2027-01-01T00:00:00.000Z'));
    sink.logger.info('fourth');
    expect(sink.lines.map((l) => l.time)).toEqual([
      '2026-03-04T05:06:07.008Z',
      '2026-03-04T05:06:07.008Z',
      '2026-03-04T05:06:07.009Z',
      '2027-01-01T00:00:00.000Z',
    ]);
  });
});

describe('logDestination', () => {
  it('writes every line whole and in order, however many are logged at once', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rc-log-'));
    try {
      const file = join(dir, 'daemon.log');
      const dest = logDestination(file);
      const logger = createLogger({ level: 'info', destination: dest });
      // Bursts much larger than one write, and lines of several sizes, some beyond Latin-1.
      for (let burst = 0; burst < 5; burst++) {
        for (let i = 0; i < 400; i++) {
          const n = burst * 400 + i;
          logger.info(
            { n, pad: 'x'.repeat(n % 97), text: n % 7 === 0 ? 'état → done' : 'plain' },
            `line ${n}`,
          );
        }
        await new Promise((resolve) => setImmediate(resolve));
      }
      await new Promise<void>((resolve, reject) => {
        dest.once('close', resolve);
        dest.once('error', reject);
        dest.end();
      });
      const lines = readFileSync(file, 'utf8').trimEnd().split('\n');
      const parsed = lines.map((l) => JSON.parse(l) as { n: number; msg: string; text: string });
      expect(parsed.map((l) => l.n)).toEqual(Array.from({ length: 2000 }, (_, n) => n));
      expect(parsed.every((l) => l.msg === `line ${l.n}`)).toBe(true);
      expect(parsed.filter((l) => l.text === 'état → done')).toHaveLength(Math.ceil(2000 / 7));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
