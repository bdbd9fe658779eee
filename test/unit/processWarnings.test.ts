/**
 * Process warnings become JSON log lines: Node's own printing (several plain-text lines on stderr)
 * would break a stream of JSON lines, and a secret in a warning is scrubbed like anywhere else.
 */
import { afterAll, describe, expect, it, vi } from 'vitest';
import { routeProcessWarnings } from '../../src/logger.js';
import { createLogSink } from '../helpers/logSink.js';

const listeners = process.listeners('warning');
afterAll(() => {
  process.removeAllListeners('warning');
  for (const l of listeners) process.on('warning', l);
});

/** Resolves after the warning event of `process.emitWarning` (emitted on the next tick). */
const nextWarning = () =>
  new Promise<void>((resolve) => process.once('warning', () => setImmediate(resolve)));

describe('routeProcessWarnings', () => {
  it('logs each warning as one JSON line at warn, and nothing reaches stderr', async () => {
    const sink = createLogSink({ secrets: ['warned-secret'] });
    const stderr = vi.spyOn(process.stderr, 'write');
    try {
      routeProcessWarnings(sink.logger);
      const seen = nextWarning();
      process.emitWarning('SECURITY WARNING: first line\nsecond line with warned-secret', { code: 'X_TEST' });
      await seen;
      expect(stderr).not.toHaveBeenCalled();
    } finally {
      stderr.mockRestore();
    }
    expect(sink.lines).toHaveLength(1);
    expect(sink.lines[0]).toMatchObject({
      level: 'warn',
      event: 'process_warning',
      msg: 'Warning: SECURITY WARNING: first line',
      warning: {
        name: 'Warning',
        code: 'X_TEST',
        message: 'SECURITY WARNING: first line\nsecond line with [REDACTED]',
      },
    });
    expect(sink.text().trim().split('\n')).toHaveLength(1);
  });

  it('sends later warnings to the logger of the last call', async () => {
    const first = createLogSink();
    const second = createLogSink();
    routeProcessWarnings(first.logger);
    routeProcessWarnings(second.logger);
    const seen = nextWarning();
    process.emitWarning('to the second');
    await seen;
    expect(first.lines).toEqual([]);
    expect(second.lines).toMatchObject([{ event: 'process_warning', msg: 'Warning: to the second' }]);
  });
});
