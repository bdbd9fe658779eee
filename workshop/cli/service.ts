/**
 * `service tabular-parser`: run the reference recognition service on its own, against the NATS of
 * the configuration (NATS_URL and credentials), until SIGTERM or SIGINT.
 */
import type { Command } from 'commander';
import { InvalidArgumentError } from '../../src/cli/commander.js';
import { DEFAULT_WEIGHTS, parseWeights, TABULAR_PARSER } from '../reference/fates.js';
import { wholeNumber } from '../../src/cli/plumbing.js';

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
      const { longRunningConfig } = await import('../../src/cli/commandConfig.js');
      const { commandLogger } = await import('../../src/cli/commandLogger.js');
      const { connectNats } = await import('../../src/nats/connection.js');
      const { serviceInboxPrefix } = await import('../../src/nats/subjects.js');
      const { withStopSignals } = await import('../../src/process/stopSignals.js');
      const { startTabularParser } = await import('../reference/tabularParserService.js');
      const cfg = longRunningConfig();
      const logger = commandLogger(cfg, { base: { service: TABULAR_PARSER } });
      const nats = await connectNats(cfg, logger, {
        name: TABULAR_PARSER,
        inboxPrefix: serviceInboxPrefix(TABULAR_PARSER),
      });
      try {
        await withStopSignals({}, async (stop) => {
          const svc = await startTabularParser({
            nc: nats.nc,
            seed: o.seed,
            weights: o.weights,
            replyDelayMs: o.delay,
            logger,
          });
          logger.info({ event: 'ready', weights: formatWeights(o.weights) }, 'press Ctrl-C to stop');
          await stop.received;
          await svc.stop();
          process.stdout.write(`${JSON.stringify(svc.stats())}\n`);
        });
      } finally {
        await nats.nc.drain().catch(() => undefined);
      }
    });
}
