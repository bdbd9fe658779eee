/**
 * The reference `tabular-parser` recognition service, on the service kit: the kit does the exchange,
 * and what is its own is the seeded mix of fates it answers with (`done` and `needs_check` with a
 * result object, `error` with a parser's codes, `silent`: acked, never answered).
 */
import type { NatsConnection } from '@nats-io/nats-core';
import type { Exchange } from '../../service-kit/src/exchange.js';
import { serve, type RunningService } from '../../service-kit/src/serve.js';
import type { Logger } from '../../src/logger.js';
import { DEFAULT_WEIGHTS, TABULAR_PARSER, mulberry32, pickFate, type FateWeights } from './fates.js';

export { DEFAULT_WEIGHTS, FATES, TABULAR_PARSER, parseWeights } from './fates.js';
export type { Fate, FateWeights } from './fates.js';

/** Error codes a real parser reports; the generator picks one for each `error`. */
const ERROR_CODES = [
  { code: 'UNSUPPORTED_FORMAT', message: 'the file is not a spreadsheet this parser reads (xls 95, ods)' },
  { code: 'CORRUPTED_FILE', message: 'the workbook could not be opened: truncated zip archive' },
] as const;

export interface TabularParserOptions {
  nc: NatsConnection;
  /** Seed of the fate generator. */
  seed: number;
  weights?: FateWeights;
  /** Mean delay between the ack and the result; each job varies it by ±50 %. */
  replyDelayMs?: number;
  /** `service.name` in envelopes (default `tabular-parser`; also the subject suffix and durable). */
  name?: string;
  /** `service.version` in envelopes. */
  version?: string;
  logger: Logger;
  /** Jobs handled at once; more stay in the consumer. */
  maxInFlight?: number;
  /**
   * The exchange to serve: its jobs stream and subject, and the subject envelopes go to (by
   * default the environment's, else the contract's; the demo on shared servers passes its own).
   */
  names?: Exchange;
}

/** What the service did so far. */
export interface TabularParserStats {
  received: number;
  acked: number;
  done: number;
  needs_check: number;
  error: number;
  silent: number;
  invalid: number;
  /** Jobs given back to JetStream (nak) because publishing an envelope failed. */
  retried: number;
  inFlight: number;
}

export interface TabularParserService {
  /** Stop pulling, finish the jobs in hand (their results are published), then resolve. */
  stop(): Promise<void>;
  stats(): TabularParserStats;
}

/**
 * Start the service: ensure its durable consumer, then handle job messages until `stop()`.
 * Resolves once the consumer is bound. Throws when the jobs stream does not exist.
 */
export async function startTabularParser(opts: TabularParserOptions): Promise<TabularParserService> {
  const weights = opts.weights ?? DEFAULT_WEIGHTS;
  const replyDelayMs = opts.replyDelayMs ?? 400;
  const random = mulberry32(opts.seed);
  const running: RunningService = await serve({
    service: opts.name ?? TABULAR_PARSER,
    version: opts.version ?? '1.0.0-reference',
    nats: opts.nc,
    concurrency: opts.maxInFlight ?? 256,
    ...(opts.names ? { exchange: opts.names } : {}),
    logger: opts.logger.child({ component: opts.name ?? TABULAR_PARSER }),
    signals: false,
    handle: async (job, ctx) => {
      const fate = pickFate(weights, random());
      const delayMs = replyDelayMs * (0.5 + random());
      const pick = Math.floor(random() * 1000);
      if (fate === 'silent') return ctx.noResult();
      await new Promise((r) => setTimeout(r, delayMs));
      const metrics = { pages: 1 + (pick % 12), duration_ms: Math.round(delayMs) };
      if (fate === 'error') {
        const e = ERROR_CODES[pick % ERROR_CODES.length]!;
        return ctx.fail(e.code, e.message, metrics);
      }
      const fields = { result_s3: ctx.resultKey('result.json'), result_schema_version: '1.0' };
      return fate === 'done'
        ? ctx.done({ ...fields, metrics })
        : ctx.needsCheck({ ...fields, metrics: { ...metrics, low_confidence_cells: 3 + (pick % 20) } });
    },
  });
  return {
    stop: () => running.stop(),
    stats() {
      const c = running.counters();
      return {
        received: c.received,
        acked: c.acked,
        done: c.done,
        needs_check: c.needs_check,
        error: c.error,
        silent: c.no_result,
        invalid: c.invalid,
        retried: c.naks,
        inFlight: c.in_flight,
      };
    },
  };
}
