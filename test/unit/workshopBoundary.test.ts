/**
 * The product and the workshop (docs/development.md, "Product and workshop"): the launcher
 * (`bin/recognition-core.js`) composes the product's program with the workshop's commands when a
 * development checkout has them, and names those commands when an installation has not.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../../src/cli/program.js';
import { registerWorkshopCommands } from '../../workshop/cli/register.js';

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
