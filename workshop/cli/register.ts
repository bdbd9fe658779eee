/**
 * The workshop's commands, which a development checkout adds to the product's program:
 * `statecharts` and `simulate` (`./statecharts.ts`), `demo` (`./demo.ts`) and `service
 * tabular-parser` (`./service.ts`), `conformance` (`./conformance.ts`). The launcher (`bin/recognition-core.js`) imports this module
 * when the checkout's `dist/workshop/` is there; the container image has none, so there these
 * commands do not exist.
 *
 * Loaded for every command line of a checkout, `--help` included, and before tracing starts: like
 * the product's registration modules it imports commander and light modules only, and each action
 * imports what it needs when it runs (`test/unit/cliImports.test.ts`).
 */
import type { Command } from 'commander';
import { registerConformanceCommand } from './conformance.js';
import { registerDemoCommand } from './demo.js';
import { registerServiceCommands } from './service.js';
import { registerStatechartsCommands } from './statecharts.js';

export { prepareTracing } from '../tracing/demoTrace.js';

/** Add the workshop's commands to `program`. */
export function registerWorkshopCommands(program: Command): void {
  registerStatechartsCommands(program);
  registerDemoCommand(program);
  registerServiceCommands(program);
  registerConformanceCommand(program);
}
