/**
 * `service tabular-parser`: run the reference recognition service on its own, against the NATS of
 * the configuration (NATS_URL and credentials), until SIGTERM or SIGINT.
 */
import { InvalidArgumentError, type Command } from 'commander';
import { loadConfig, secretsOf } from '../config.js';
import { createLogger } from '../logger.js';
import { connectNats } from '../nats/connection.js';
import {
  DEFAULT_WEIGHTS,
  parseWeights,
  startTabularParser,
  TABULAR_PARSER,
} from '../reference/tabularParserService.js';

/** A commander parser for a whole number at least `min`. */
export function wholeNumber(min: number) {
  return (value: string): number => {
    if (!/^-?\d+$/.test(value.trim()) || Number(value) < min)
      throw new InvalidArgumentError(`must be a whole number of at least ${min}`);
    return Number(value);
  };
}

function weights(value: string) {
  try {
    return parseWeights(value);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
}

const formatWeights = (w: Record<string, number>) =>
  Object.entries(w)
    .map(([k, v]) => `${k}=${v}`)
    .join(',');

export function registerServiceCommands(program: Command): void {
  const service = program
    .command('service')
    .description('reference recognition services (examples of the protocol)');
  service
    .command(TABULAR_PARSER)
    .description(
      'the reference tabular-parser: consumes recognition.job.tabular-parser, acks with processing, then answers done, needs_check or error, or never (a seeded mix)',
    )
    .option('--seed <n>', 'seed of the random mix', wholeNumber(0), 1)
    .option('--weights <list>', 'relative weights of the fates', weights, DEFAULT_WEIGHTS)
    .option('--delay <ms>', 'mean delay between the ack and the result', wholeNumber(0), 400)
    .action(async (o: { seed: number; weights: ReturnType<typeof parseWeights>; delay: number }) => {
      const cfg = loadConfig();
      const pretty =
        cfg.LOG_PRETTY === 'true' || (cfg.LOG_PRETTY === 'auto' && process.stdout.isTTY === true);
      const logger = createLogger({
        level: cfg.LOG_LEVEL,
        pretty,
        secrets: secretsOf(cfg),
        base: { service: TABULAR_PARSER },
      });
      const nats = await connectNats(cfg, logger, { name: TABULAR_PARSER });
      try {
        const svc = await startTabularParser({
          nc: nats.nc,
          seed: o.seed,
          weights: o.weights,
          replyDelayMs: o.delay,
          logger,
        });
        logger.info({ event: 'ready', weights: formatWeights(o.weights) }, 'press Ctrl-C to stop');
        await new Promise<void>((resolve) => {
          const onSignal = () => {
            process.off('SIGTERM', onSignal);
            process.off('SIGINT', onSignal);
            process.once('SIGINT', () => process.exit(1));
            process.once('SIGTERM', () => process.exit(1));
            resolve();
          };
          process.on('SIGTERM', onSignal);
          process.on('SIGINT', onSignal);
        });
        await svc.stop();
        process.stdout.write(`${JSON.stringify(svc.stats())}\n`);
      } finally {
        await nats.nc.drain().catch(() => undefined);
      }
    });
}
