/**
 * Imports point one way (ARCHITECTURE.md): the step never imports the loops above it, and the
 * statecharts never import the daemon or the step. The lint rules that keep it so are under test:
 * probe code linted as if it lived in each folder must be rejected, and its allowed imports pass.
 */
import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';
import { beforeAll, describe, expect, it } from 'vitest';

const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));

let eslint: ESLint;
beforeAll(() => {
  eslint = new ESLint({ cwd: REPO_ROOT });
});

/** The `no-restricted-imports` errors for `import type { X } from '<specifier>'` placed at `filePath`. */
async function restricted(filePath: string, specifier: string): Promise<number> {
  const code = `import type { X } from '${specifier}';\nexport type Y = X;\n`;
  const [result] = await eslint.lintText(code, { filePath });
  return (result?.messages ?? []).filter((m) => m.ruleId === 'no-restricted-imports').length;
}

describe('import direction', { timeout: 60_000 }, () => {
  it.each([
    ['src/step/__probe.ts', '../daemon/inboxBatch.js'],
    ['src/step/__probe.ts', '../cli/start.js'],
    ['src/step/__probe.ts', '../cli.js'],
    ['src/step/__probe.ts', '../statecharts/scenario.js'],
    ['src/statecharts/__probe.ts', '../daemon/inboxBatch.js'],
    ['src/statecharts/__probe.ts', '../step/index.js'],
  ])('%s may not import %s', async (filePath, specifier) => {
    expect(await restricted(filePath, specifier)).toBe(1);
  });

  it.each([
    ['src/step/__probe.ts', '../db/jobRow.js'],
    ['src/step/__probe.ts', '../../machines/index.js'],
    ['src/step/__probe.ts', './plan.js'],
    ['src/statecharts/__probe.ts', '../messages/envelopeToJobEvent.js'],
    ['src/statecharts/__probe.ts', '../../machines/index.js'],
    ['src/daemon/__probe.ts', '../step/index.js'],
  ])('%s may import %s', async (filePath, specifier) => {
    expect(await restricted(filePath, specifier)).toBe(0);
  });
});
