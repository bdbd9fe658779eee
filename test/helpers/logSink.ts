/** A pino destination that keeps every line as a parsed object, so tests assert logs as data. */
import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../src/logger.js';

export interface LogSink {
  logger: Logger;
  lines: Array<Record<string, unknown>>;
  /** Everything written, verbatim (for "this text never appears" checks). */
  text(): string;
}

export function createLogSink(opts: { level?: string; secrets?: string[] } = {}): LogSink {
  const lines: Array<Record<string, unknown>> = [];
  let raw = '';
  const destination = new Writable({
    write(chunk: Buffer, _enc, cb) {
      const s = chunk.toString();
      raw += s;
      for (const l of s.split('\n')) if (l.trim()) lines.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  const logger = createLogger({ level: opts.level ?? 'debug', destination, secrets: opts.secrets ?? [] });
  return { logger, lines, text: () => raw };
}
