// @ts-check
/**
 * What the `recognition-core` command loads before a command runs (docs/development.md,
 * "Layers"): `--help`, `--version` and a usage error pay for commander and light modules only;
 * every library a command needs is imported by its action, with `await import()`, when it runs.
 * The graph is the one node loads: from the modules the launcher imports, static imports and
 * `require` calls as compiled (type-only imports are gone), no `import()`; commander's rules read
 * every module of src/ and workshop/ so.
 * test/unit/shapeRules.test.ts shows each rule firing on a file that breaks it.
 */
import { readFileSync } from 'node:fs';
import { errors, exactly, options, packages, PRODUCT_ENTRIES } from './.dependency-cruiser.mjs';

/** The launcher of a checkout loads the workshop's registration module besides the product's entries. */
export const STARTUP_ENTRIES = [...PRODUCT_ENTRIES, 'workshop/cli/register.ts'];

/** Libraries no command pays for before it runs. */
const HEAVY = [
  '@opentelemetry/[^/]+',
  'xstate',
  'ajv',
  'ajv-formats',
  'zod',
  '@statelyai/[^/]+',
  '@viz-js/[^/]+',
  '@nats-io/[^/]+',
  'pino',
  'pino-pretty',
  'kysely',
  'pg',
  'cli-progress',
  'ws',
  'prom-client',
];

/** Modules that read configuration, open a database, start a daemon or run a workshop's work. */
const AT_RUN_TIME = [
  'src/config.ts',
  'src/logger.ts',
  'src/metrics.ts',
  'src/db/database.ts',
  'src/daemon/daemon.ts',
  'machines/index.ts',
  'src/tracing/sdk.ts',
  'src/tracing/tracing.ts',
  'workshop/tracing/otlpReceiver.ts',
  'workshop/demo/runDemo.ts',
  'workshop/reference/tabularParserService.ts',
  'workshop/statecharts/generate.ts',
  'workshop/statecharts/scenario.ts',
  'workshop/statecharts/scenarioFile.ts',
];

const { tsConfig: _tsConfig, ...sharedOptions } = options;

const pkg = /** @type {{ dependencies: Record<string, string>; devDependencies: Record<string, string> }} */ (
  JSON.parse(readFileSync(new URL('./package.json', import.meta.url), 'utf8'))
);

/** @type {import('dependency-cruiser').IConfiguration} */
export default {
  forbidden: errors([
    {
      name: 'startup-no-heavy-library',
      comment:
        'the command loads no heavy library before a command runs (OpenTelemetry, xstate, Ajv, zod, the Stately packages, Graphviz, NATS, pino, Kysely, pg, cli-progress, ws, prom-client): an action imports what it needs when it runs',
      from: { path: exactly(STARTUP_ENTRIES) },
      to: { path: packages(HEAVY), reachable: true },
    },
    {
      name: 'startup-no-run-time-module',
      comment:
        'the command reads no configuration, opens no database, starts no daemon and runs none of the workshop before a command runs',
      from: { path: exactly(STARTUP_ENTRIES) },
      to: { path: exactly(AT_RUN_TIME), reachable: true },
    },
    {
      name: 'startup-production-dependencies',
      comment:
        'what the command loads before a command runs is a production dependency: the image installs `dependencies` only',
      from: { path: exactly(STARTUP_ENTRIES) },
      to: {
        path: packages(Object.keys(pkg.devDependencies).filter((d) => !(d in pkg.dependencies))),
        reachable: true,
      },
    },
    {
      name: 'commander-from-one-module',
      comment:
        "src/ and workshop/ take commander's values from src/cli/commander.ts, which loads it as CommonJS: imported as ESM, node lexes its source and resolves its exports on every start (its types may come from commander itself: they are gone once compiled)",
      from: { path: '^(src|workshop)/', pathNot: '^src/cli/commander\\.ts$' },
      to: { path: packages(['commander']) },
    },
    {
      name: 'commander-required',
      comment: 'src/cli/commander.ts loads commander with require (createRequire), never as ESM',
      from: { path: '^src/cli/commander\\.ts$' },
      to: { path: packages(['commander']), dependencyTypesNot: ['require'] },
    },
  ]),
  required: errors([
    {
      name: 'startup-reaches-commander',
      comment:
        "the command's start-up graph reaches commander: the graph is the command line's, required modules included",
      module: { path: '^src/cli\\.ts$' },
      to: { path: packages(['commander']), reachable: true },
    },
  ]),
  // Without the project's tsconfig, whose `module: node16` makes a lone file compile to CommonJS,
  // the sources compile to ES modules as node loads them, `import` and `require` told apart.
  options: {
    ...sharedOptions,
    tsPreCompilationDeps: false,
    exclude: { ...options.exclude, dynamic: true },
  },
};
