/**
 * The logger of a long-running command (`start`, `service …`). Imported by those actions when
 * they run: it loads pino.
 */
import { secretsOf, type Config } from '../config.js';
import { createLogger, routeProcessWarnings, type Logger } from '../logger.js';
import { nameEnvTypos } from './commandConfig.js';

/**
 * The root logger of a long-running command: LOG_LEVEL, pretty when LOG_PRETTY says so (`auto`:
 * when stdout is a terminal), the configured secrets scrubbed from every line. Its first line
 * names the misspelt environment variables, if any (`event: env_typos`); the process's warnings
 * go to it too, as JSON lines.
 */
export function commandLogger(cfg: Config, opts: { base?: Record<string, unknown> } = {}): Logger {
  const pretty = cfg.LOG_PRETTY === 'true' || (cfg.LOG_PRETTY === 'auto' && process.stdout.isTTY === true);
  const logger = createLogger({ level: cfg.LOG_LEVEL, pretty, secrets: secretsOf(cfg), ...opts });
  routeProcessWarnings(logger);
  nameEnvTypos((typos, message) =>
    logger.warn({ event: 'env_typos', variables: typos.map((t) => t.name) }, message),
  );
  return logger;
}
