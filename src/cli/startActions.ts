/**
 * What `start` does when it runs (registered in `./start.ts`): the daemon in the foreground until
 * SIGTERM or SIGINT. Imported by the action only: it loads the daemon and everything it runs.
 */
/**
 *   1. configuration and logger; 2. the daemon; 3. wait for a stop signal;
 *   4. stop gracefully within SHUTDOWN_TIMEOUT_MS (exit 1 when it fails or a second signal comes).
 */
export async function startAction(): Promise<void> {
  const { longRunningConfig } = await import('./commandConfig.js');
  const { commandLogger } = await import('./commandLogger.js');
  const { startDaemon } = await import('../daemon/daemon.js');
  const { withStopSignals } = await import('../process/stopSignals.js');
  const cfg = longRunningConfig();
  const logger = commandLogger(cfg);
  const daemon = await startDaemon({ config: cfg, logger });
  const signals = {
    forceAfterMs: cfg.SHUTDOWN_TIMEOUT_MS,
    onSignal: (signal: NodeJS.Signals) =>
      logger.info({ event: 'signal', signal }, `${signal}: shutting down gracefully`),
    onForcedExit: (why: { signal: NodeJS.Signals } | { timeoutMs: number }) =>
      'signal' in why
        ? logger.warn({ event: 'forced_exit', signal: why.signal }, 'second signal: exiting now')
        : logger.error({ event: 'shutdown_timeout' }, 'graceful shutdown took too long: exiting'),
  };
  await withStopSignals(signals, async (stop) => {
    await stop.received;
    await daemon.stop().catch((err: unknown) => {
      logger.error({ err }, 'shutdown failed');
      process.exit(1);
    });
  });
  logger.flush?.();
}
