/**
 * The workshop's commands, which a development checkout adds to the product's program (`statecharts`,
 * `simulate`, `demo`, `service tabular-parser`, `conformance`); the container image has none. Loaded
 * for every command line of a checkout, so it imports commander and light modules only, and each
 * action imports what it needs when it runs.
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
