/**
 * `machines/` is pure (docs/development.md, "Layers"): it imports only xstate (and `xstate/guards`,
 * its guard evaluation) and its own files, and time enters as data on the event. The lint rule
 * that keeps it so is itself under test here: probe code, linted as if it lived in `machines/`,
 * must be rejected for each kind of impurity, and the real folder must lint clean.
 */
import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';
import { beforeAll, describe, expect, it } from 'vitest';

const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PURITY_RULES = ['no-restricted-imports', 'no-restricted-properties', 'no-restricted-globals'];

let eslint: ESLint;
beforeAll(() => {
  eslint = new ESLint({ cwd: REPO_ROOT });
});

/** The purity errors ESLint reports for `code` placed at `machines/__probe.ts`. */
async function purityErrors(code: string): Promise<Array<{ rule: string; message: string }>> {
  const [result] = await eslint.lintText(code, { filePath: 'machines/__probe.ts' });
  return (result?.messages ?? [])
    .filter((m) => m.severity === 2 && m.ruleId !== null && PURITY_RULES.includes(m.ruleId))
    .map((m) => ({ rule: m.ruleId!, message: m.message }));
}

describe('machines/ stays pure', { timeout: 60_000 }, () => {
  it.each([
    ['the database driver', `import pg from 'pg';\nexport const p = pg;\n`, 'no-restricted-imports'],
    [
      'a node built-in',
      `import { readFileSync } from 'node:fs';\nexport const r = readFileSync;\n`,
      'no-restricted-imports',
    ],
    [
      'the project outside machines/',
      `import type { Database } from '../src/db/schema.js';\nexport type D = Database;\n`,
      'no-restricted-imports',
    ],
    [
      'an xstate subpath',
      `import { getSimplePaths } from 'xstate/graph';\nexport const g = getSimplePaths;\n`,
      'no-restricted-imports',
    ],
    ['the clock', `export const now = () => Date.now();\n`, 'no-restricted-properties'],
    ['a timer', `export const later = (f: () => void) => setTimeout(f, 10);\n`, 'no-restricted-globals'],
    ['the process', `export const env = () => process.env;\n`, 'no-restricted-globals'],
  ])('rejects %s', async (_what, code, rule) => {
    const errors = await purityErrors(code);
    expect(errors.map((e) => e.rule)).toEqual([rule]);
  });

  it('accepts xstate, its guard evaluation and its own files', async () => {
    const code = [
      `import { setup } from 'xstate';`,
      `import { evaluateGuard } from 'xstate/guards';`,
      `import { JOB_STATUS } from './statuses.js';`,
      `import type { JobEvent } from './recognitionJob.types.js';`,
      `export const m = setup({ types: { events: {} as JobEvent } });`,
      `export const s = JOB_STATUS.pending;`,
      `export const g = evaluateGuard;`,
      `export const later = (now: Date) => new Date(now.getTime() + 1000);`,
      '',
    ].join('\n');
    expect(await purityErrors(code)).toEqual([]);
  });

  it('the real machines/ folder lints without an error', async () => {
    const results = await eslint.lintFiles(['machines/']);
    expect(results.map((r) => r.filePath).length).toBeGreaterThanOrEqual(4);
    const errors = results.flatMap((r) =>
      r.messages
        .filter((m) => m.severity === 2)
        .map((m) => `${r.filePath}:${m.line} ${m.ruleId}: ${m.message}`),
    );
    expect(errors).toEqual([]);
  });
});
