/**
 * commander, the command line's parser, as every module of the command takes it.
 *
 * commander is a CommonJS package. Imported as ESM, it makes node parse its source for the names
 * it exports (cjs-module-lexer) and resolve its package exports on every start, `--help` and
 * `--version` included; loaded with `require`, it is compiled and run once and nothing more. The
 * modules of the command therefore import commander's values from here; its types come from here
 * or from `commander` itself (`import type` is gone once compiled).
 */
import { createRequire } from 'node:module';
import type * as Commander from 'commander';

// Named `require`: the start-up check (.dependency-cruiser-startup.mjs) reads `require('…')` calls.
const require = createRequire(import.meta.url);
const commander = require('commander') as typeof Commander;

export const { Command, CommanderError, InvalidArgumentError, Option } = commander;
/** The program and its commands' type, beside the class of the same name. */
export type Command = Commander.Command;
