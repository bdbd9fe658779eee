/**
 * `recognition-core start`: the daemon in the foreground, until SIGTERM or SIGINT.
 * The first signal stops gracefully (exit 0); a second one, or SHUTDOWN_TIMEOUT_MS, forces exit 1.
 */
import type { Command } from 'commander';
import { loadConfig, secretsOf } from '../config.js';
import { startDaemon } from '../daemon/daemon.js';
import { createLogger } from '../logger.js';

export function registerStartCommand(program: Command): void {
  program
    .command('start')
    .description('run the daemon: inbox, watchdog and publisher, with /healthz, /readyz and /metrics')
    .action(async () => {
      const cfg = loadConfig();
      const pretty =
        cfg.LOG_PRETTY === 'true' || (cfg.LOG_PRETTY === 'auto' && process.stdout.isTTY === true);
      const logger = createLogger({ level: cfg.LOG_LEVEL, pretty, secrets: secretsOf(cfg) });
      const daemon = await startDaemon({ config: cfg, logger });
      await new Promise<void>((resolve) => {
        let signals = 0;
        const onSignal = (signal: NodeJS.Signals) => {
          signals++;
          if (signals > 1) {
            logger.warn({ event: 'forced_exit', signal }, 'second signal: exiting now');
            process.exit(1);
          }
          logger.info({ event: 'signal', signal }, `${signal}: shutting down gracefully`);
          const force = setTimeout(() => {
            logger.error({ event: 'shutdown_timeout' }, 'graceful shutdown took too long: exiting');
            process.exit(1);
          }, cfg.SHUTDOWN_TIMEOUT_MS);
          force.unref();
          void daemon.stop().then(resolve, (err: unknown) => {
            logger.error({ err }, 'shutdown failed');
            process.exit(1);
          });
        };
        process.on('SIGTERM', onSignal);
        process.on('SIGINT', onSignal);
      });
      logger.flush?.();
    });
}
