/**
 * What this build is: its package root and its version, read from `package.json` at run time so
 * that `--version`, `recognition_build_info` and the files found beside the code agree with the
 * checkout or the installed package, from the sources (tests) as from `dist/`. Imports only Node's
 * own modules: the CLI reads it before any command is chosen.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The package root: the nearest folder above this module that holds recognition-core's
 * `package.json` beside `machines/`; the working directory when none does.
 */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'machines'))) return dir;
    const up = dirname(dir);
    if (up === dir) return process.cwd();
    dir = up;
  }
}

let version: string | undefined;

/** The `version` of recognition-core's `package.json` (`0.0.0` when it names none). Read once. */
export function packageVersion(): string {
  if (version === undefined) {
    const pkg = JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as {
      version?: unknown;
    };
    version = typeof pkg.version === 'string' ? pkg.version : '0.0.0';
  }
  return version;
}
