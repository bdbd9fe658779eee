/**
 * The configuration of one command, and the misspelt variables named beside it (`../envTypos.ts`):
 * a one-shot command names them in one line on stderr, a long-running one (whose stdout carries
 * JSON log lines) in one warn line of its logger. Imported by actions when they run: it loads the
 * configuration's validation (zod).
 */
import { configVariableNames, loadConfig, type Config } from '../config.js';
import { envTypoMessage, findEnvTypos, knownVariables, type EnvTypo } from '../envTypos.js';

/** The misspelt variables of `env` (see `../envTypos.ts`). */
export function envTypos(env: NodeJS.ProcessEnv = process.env): EnvTypo[] {
  return findEnvTypos(env, knownVariables(configVariableNames()));
}

let named = false;

/**
 * Name the misspelt variables of the process environment once per process: the first call
 * writes them (through `write`, default one line on stderr); later calls do nothing.
 */
export function nameEnvTypos(
  write: (typos: EnvTypo[], message: string) => void = (_typos, message) =>
    process.stderr.write(`recognition-core: ${message}\n`),
): void {
  if (named) return;
  named = true;
  const typos = envTypos();
  if (typos.length > 0) write(typos, envTypoMessage(typos));
}

/**
 * The configuration of a one-shot command (`loadConfig()`), after naming the misspelt variables
 * on stderr, so that they are named even when the configuration is refused.
 */
export function commandConfig(): Config {
  nameEnvTypos();
  return loadConfig();
}

/**
 * The configuration of a long-running command, whose logger names the misspelt variables
 * (`./commandLogger.ts`); when the configuration is refused there is no logger, so they are
 * named on stderr before the refusal.
 */
export function longRunningConfig(): Config {
  try {
    return loadConfig();
  } catch (err) {
    nameEnvTypos();
    throw err;
  }
}
