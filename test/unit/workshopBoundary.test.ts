/**
 * The product and the workshop (docs/development.md, "Product and workshop"). The launcher
 * (`bin/recognition-core.js`) composes the product's program with the workshop's commands when a
 * development checkout has them, and names those commands when an installation has not. The
 * product (src/, machines/) is what the launcher's entry points reach, all of src/, and nothing of
 * the workshop, the tests or the bench: the graph follows every relative import, `import()` and
 * type-only ones included.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../../src/cli/program.js';
import { registerWorkshopCommands } from '../../workshop/cli/register.js';
import { moduleImports, reachableFiles, resolveSource, sourceFiles } from '../helpers/importGraph.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const launcher = readFileSync(`${ROOT}/bin/recognition-core.js`, 'utf8');

describe('the composition of the command', () => {
  it("the launcher names exactly the workshop's commands, none of them the product's", () => {
    const named = /const WORKSHOP_COMMANDS = \[([^\]]*)\]/.exec(launcher)?.[1];
    expect(named).toBeDefined();
    const listed = [...named!.matchAll(/'([^']+)'/g)].map((m) => m[1]!);
    const workshop = new Command('recognition-core');
    registerWorkshopCommands(workshop);
    expect(listed.sort()).toEqual(workshop.commands.map((c) => c.name()).sort());
    const product = buildProgram().commands.map((c) => c.name());
    expect(listed.filter((c) => product.includes(c))).toEqual([]);
  });
});

describe('the product', () => {
  // The modules the launcher loads from the product's compiled tree (`dist/src/…`).
  const entries = [...launcher.matchAll(/built\('src\/([^']+)\.js'\)/g)].map((m) => `src/${m[1]}.ts`);
  const reached = reachableFiles(ROOT, entries);

  it('is entered where the launcher enters it: the V8 settings, the CLI and the tracing bootstrap', () => {
    expect(entries.sort()).toEqual(['src/cli.ts', 'src/process/v8Flags.ts', 'src/tracing/bootstrap.ts']);
  });

  it('uses every file of src/: none is there for tests, bench or the demo only', () => {
    expect(sourceFiles(ROOT, 'src').filter((f) => !reached.has(f))).toEqual([]);
  });

  it('never imports the workshop, the tests or the bench, in any way (import(), types included)', () => {
    const wrong: string[] = [];
    for (const file of [...sourceFiles(ROOT, 'src'), ...sourceFiles(ROOT, 'machines')]) {
      for (const { specifier } of moduleImports(join(ROOT, file))) {
        if (!specifier.startsWith('.')) continue;
        const target = resolveSource(ROOT, file, specifier);
        if (!/^(src|machines|schemas)\//.test(target)) wrong.push(`${file}: ${specifier}`);
      }
    }
    expect(wrong).toEqual([]);
    expect([...reached.keys()].filter((f) => !/^(src|machines|schemas)\//.test(f))).toEqual([]);
  });
});
