/**
 * The repository's shape is configuration of its tools (docs/development.md, "Product and
 * workshop", "Layers"): dependency-cruiser's rules in `.dependency-cruiser.mjs` (which folder
 * imports which, what the product is and loads) and `.dependency-cruiser-startup.mjs` (what the
 * command loads before a command runs), ESLint's harness rule for integration tests, and
 * remark-validate-links in `.remarkrc.mjs` for the markdown's links. Each rule is shown to fire: a
 * small tree breaking it, written to a temporary folder, is cruised (or linted, or checked) with
 * the repository's configuration, and that rule alone reports it; the imports each folder is meant
 * to use are accepted; and the repository itself passes `npm run check:shape`.
 */
import { spawnSync } from 'node:child_process';
import {
  mkdirSync,
  mkdtempSync,
  rmSync,
  symlinkSync,
  writeFileSync,
  readFileSync,
  copyFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { cruise, type IConfiguration, type ICruiseOptions, type ICruiseResult } from 'dependency-cruiser';
import extractDepcruiseOptions from 'dependency-cruiser/config-utl/extract-depcruise-options';
import extractTSConfig from 'dependency-cruiser/config-utl/extract-ts-config';
import { ESLint } from 'eslint';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const IMPORTS_CONFIG = join(ROOT, '.dependency-cruiser.mjs');
const STARTUP_CONFIG = join(ROOT, '.dependency-cruiser-startup.mjs');

/** A tree of files: repository-relative path → content. */
type Tree = Record<string, string>;

const made: string[] = [];
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

/** `tree` written to a fresh folder with the repository's package.json and node_modules. */
function writeTree(tree: Tree): string {
  const dir = mkdtempSync(join(tmpdir(), 'shape-'));
  made.push(dir);
  copyFileSync(join(ROOT, 'package.json'), join(dir, 'package.json'));
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
  for (const [path, text] of Object.entries(tree)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return dir;
}

const tsConfig = extractTSConfig(join(ROOT, 'tsconfig.json'));
/** What dependency-cruiser's command hands `cruise` for `config`: the tsconfig it names, parsed. */
const transpileOptions = (config: ICruiseOptions) => (config.tsConfig ? { tsConfig } : {});

/** The violations dependency-cruiser reports for `tree` with `config`: `rule: from -> to`. */
async function violations(config: ICruiseOptions, tree: Tree): Promise<string[]> {
  const dir = writeTree(tree);
  const roots = [...new Set(Object.keys(tree).map((p) => p.split('/')[0]!))];
  const { output } = await cruise(roots, { ...config, baseDir: dir }, {}, transpileOptions(config));
  const result = (typeof output === 'string' ? JSON.parse(output) : output) as ICruiseResult;
  return result.summary.violations.map((v) => `${v.rule.name}: ${v.from} -> ${v.to}`);
}

/** The names of the rules that fired. */
const rulesOf = (found: string[]) => [...new Set(found.map((v) => v.slice(0, v.indexOf(':'))))].sort();

const exportOne = 'export const x = 1;\n';

let importRules: ICruiseOptions;
let startupRules: ICruiseOptions;
let importConfig: IConfiguration & { PRODUCT_ENTRIES: string[] };
let startupConfig: IConfiguration;
beforeAll(async () => {
  importRules = await extractDepcruiseOptions(IMPORTS_CONFIG);
  startupRules = await extractDepcruiseOptions(STARTUP_CONFIG);
  const imports = (await import(pathToFileURL(IMPORTS_CONFIG).href)) as {
    default: IConfiguration;
    PRODUCT_ENTRIES: string[];
  };
  importConfig = { ...imports.default, PRODUCT_ENTRIES: imports.PRODUCT_ENTRIES };
  startupConfig = ((await import(pathToFileURL(STARTUP_CONFIG).href)) as { default: IConfiguration }).default;
});

/**
 * A tree for `.dependency-cruiser.mjs`: the launcher's entries of the product, `src/cli.ts`
 * importing every other file of src/ the case has (so that the product is whole), unless the case
 * brings its own.
 */
function productTree(tree: Tree): Tree {
  const src = Object.keys(tree).filter((p) => p.startsWith('src/') && p.endsWith('.ts'));
  return {
    'src/cli.ts': src.map((p) => `import './${p.slice('src/'.length).replace(/\.ts$/, '.js')}';\n`).join(''),
    'src/process/v8Flags.ts': 'export {};\n',
    'src/tracing/bootstrap.ts': 'export {};\n',
    ...tree,
  };
}

/** Each rule of `.dependency-cruiser.mjs` with trees that break it (and nothing else). */
const IMPORT_VIOLATIONS: Array<[rule: string, what: string, tree: Tree]> = [
  [
    'replay-below-cli',
    'src/replay imports the CLI',
    { 'src/replay/probe.ts': "import '../cli/jobs.js';\n", 'src/cli/jobs.ts': exportOne },
  ],
  [
    'replay-below-cli',
    'src/replay imports the views',
    { 'src/replay/probe.ts': "import '../http/server.js';\n", 'src/http/server.ts': exportOne },
  ],
  [
    'operator-below-commands',
    'src/operator imports the CLI',
    { 'src/operator/probe.ts': "import '../cli/jobs.js';\n", 'src/cli/jobs.ts': exportOne },
  ],
  [
    'console-beside-cli',
    'src/console imports the daemon',
    { 'src/console/probe.ts': "import '../daemon/daemon.js';\n", 'src/daemon/daemon.ts': exportOne },
  ],
  [
    'daemon-below-cli',
    'src/daemon imports a replay',
    { 'src/daemon/probe.ts': "import '../replay/inboxReplay.js';\n", 'src/replay/inboxReplay.ts': exportOne },
  ],
  [
    'step-below-loops',
    'src/step imports the daemon',
    { 'src/step/probe.ts': "import '../daemon/inboxBatch.js';\n", 'src/daemon/inboxBatch.ts': exportOne },
  ],
  ['step-below-loops', 'src/step imports src/cli.ts', { 'src/step/probe.ts': "import '../cli.js';\n" }],
  [
    'step-below-loops',
    'src/step imports the statecharts',
    { 'src/step/probe.ts': "import '../statecharts/render.js';\n", 'src/statecharts/render.ts': exportOne },
  ],
  [
    'statecharts-below-daemon',
    'src/statecharts imports the step',
    { 'src/statecharts/probe.ts': "import '../step/index.js';\n", 'src/step/index.ts': exportOne },
  ],
  [
    'statecharts-below-daemon',
    'src/statecharts imports the daemon by a longer path',
    {
      'src/statecharts/probe.ts': "import '../../src/daemon/daemon.js';\n",
      'src/daemon/daemon.ts': exportOne,
    },
  ],
  [
    'db-apart-from-nats',
    'src/db imports src/nats',
    { 'src/db/probe.ts': "import '../nats/subjects.js';\n", 'src/nats/subjects.ts': exportOne },
  ],
  [
    'db-apart-from-nats',
    'src/db imports the loops',
    { 'src/db/probe.ts': "import '../daemon/watchdog.js';\n", 'src/daemon/watchdog.ts': exportOne },
  ],
  [
    'nats-apart-from-db',
    'src/nats imports src/db',
    { 'src/nats/probe.ts': "import '../db/jobs.js';\n", 'src/db/jobs.ts': exportOne },
  ],
  [
    'process-below-commands',
    'src/process imports the CLI',
    { 'src/process/probe.ts': "import '../cli/plumbing.js';\n", 'src/cli/plumbing.ts': exportOne },
  ],
  [
    'local-servers-below-commands',
    'workshop/localServers imports the daemon',
    {
      'workshop/localServers/probe.ts': "import '../../src/daemon/daemon.js';\n",
      'src/daemon/daemon.ts': exportOne,
    },
  ],
  [
    'local-servers-below-commands',
    'workshop/localServers imports the demo',
    {
      'workshop/localServers/probe.ts': "import '../demo/runDemo.js';\n",
      'workshop/demo/runDemo.ts': exportOne,
    },
  ],
  [
    'bench-apart-from-test',
    'bench/ imports test/',
    { 'bench/probe.ts': "import '../test/helpers/logSink.js';\n", 'test/helpers/logSink.ts': exportOne },
  ],
  [
    'test-apart-from-bench',
    'an integration test imports bench/',
    { 'test/integration/probe.ts': "import '../../bench/env.js';\n", 'bench/env.ts': exportOne },
  ],
  [
    'product-not-workshop',
    'src/ imports the workshop',
    { 'src/probe.ts': "import '../workshop/cli/register.js';\n", 'workshop/cli/register.ts': exportOne },
  ],
  [
    'product-not-workshop',
    'src/ imports the workshop with import()',
    {
      'src/daemon/probe.ts':
        "export const load = () => import('../daemon/../../workshop/demo/runDemo.js');\n",
      'workshop/demo/runDemo.ts': exportOne,
    },
  ],
  [
    'product-not-workshop',
    'src/ imports a type of the workshop',
    {
      'src/tracing/probe.ts':
        "import type { x } from '../../workshop/tracing/otlpReceiver.js';\nexport type X = typeof x;\n",
      'workshop/tracing/otlpReceiver.ts': exportOne,
    },
  ],
  [
    'product-not-workshop',
    'src/ names a workshop type with import("…")',
    {
      'src/cli/probe.ts': "export type X = typeof import('../../workshop/cli/demo.js').x;\n",
      'workshop/cli/demo.ts': exportOne,
    },
  ],
  [
    'product-not-workshop',
    'machines/ imports the workshop',
    {
      'machines/probe.ts': "import '../workshop/machineSamples.js';\n",
      'workshop/machineSamples.ts': exportOne,
    },
  ],
  [
    'product-not-workshop',
    'src/ imports the tests',
    { 'src/probe.ts': "import '../test/helpers/fixtures.js';\n", 'test/helpers/fixtures.ts': exportOne },
  ],
  [
    'src-is-the-product',
    'a file of src/ only the tests use',
    {
      'src/cli.ts': 'export {};\n',
      'src/onlyForTests.ts': exportOne,
      'test/unit/probe.ts': "import '../../src/onlyForTests.js';\n",
    },
  ],
  [
    'product-loads-dependencies',
    'src/ loads a devDependency',
    { 'src/probe.ts': "import { parse } from 'yaml';\nexport const p = parse;\n" },
  ],
  [
    'product-loads-dependencies',
    'src/ loads a devDependency beside a type of it',
    {
      'src/probe.ts':
        "import YAML, { type Document } from 'yaml';\nexport const p = YAML.parse;\nexport type D = Document;\n",
    },
  ],
  [
    'service-kit-own-package',
    'the kit imports the daemon',
    {
      'service-kit/src/probe.ts': "import '../../src/messages/schemas.js';\n",
      'src/messages/schemas.ts': exportOne,
    },
  ],
  [
    'service-kit-own-package',
    "the kit's example imports the daemon",
    {
      'service-kit/examples/probe.ts': "import '../../src/nats/subjects.js';\n",
      'src/nats/subjects.ts': exportOne,
    },
  ],
  [
    'declared-packages',
    'a test imports a package package.json does not declare',
    { 'test/unit/probe.ts': "import picomatch from 'picomatch';\nexport const p = picomatch;\n" },
  ],
  [
    'resolvable',
    'an import of a file that does not exist',
    { 'test/unit/probe.ts': "import './missing.js';\n" },
  ],
];

/** Trees every rule of `.dependency-cruiser.mjs` accepts: the imports each folder is meant to use. */
const IMPORT_ALLOWED: Array<[what: string, tree: Tree]> = [
  [
    'the step reads rows, machines and its own files',
    {
      'src/step/probe.ts':
        "import '../db/jobRow.js';\nimport '../../machines/index.js';\nimport './plan.js';\n",
      'src/db/jobRow.ts': exportOne,
      'machines/index.ts': exportOne,
      'src/step/plan.ts': exportOne,
    },
  ],
  [
    'the daemon calls the step',
    { 'src/daemon/probe.ts': "import '../step/index.js';\n", 'src/step/index.ts': exportOne },
  ],
  [
    'the statecharts read machines, messages and process plumbing',
    {
      'src/statecharts/probe.ts':
        "import '../messages/schemas.js';\nimport '../../machines/index.js';\nimport '../process/stopSignals.js';\n",
      'src/messages/schemas.ts': exportOne,
      'machines/index.ts': exportOne,
      'src/process/stopSignals.ts': exportOne,
    },
  ],
  [
    'src/nats loads its client; src/db its configuration',
    {
      'src/nats/probe.ts': "import { jetstream } from '@nats-io/jetstream';\nexport const j = jetstream;\n",
      'src/db/probe.ts': "import '../config.js';\n",
      'src/config.ts': exportOne,
    },
  ],
  [
    'the product reads a type of a devDependency, and its schemas',
    {
      'src/probe.ts':
        "import type { Document } from 'yaml';\nexport type D = Document;\nimport '../schemas/job.json';\n",
      'schemas/job.json': '{}\n',
    },
  ],
  [
    'the workshop, the bench and the tests use the product and the local servers',
    {
      'workshop/demo/probe.ts': "import '../../src/daemon/daemon.js';\nimport '../../machines/index.js';\n",
      'bench/probe.ts': "import '../workshop/localServers/natsServer.js';\n",
      'test/integration/probe.ts': "import '../../workshop/localServers/pgCluster.js';\n",
      'test/unit/probe.ts': "import { parse } from 'yaml';\nexport const p = parse;\n",
      'src/daemon/daemon.ts': exportOne,
      'machines/index.ts': exportOne,
      'workshop/localServers/natsServer.ts': exportOne,
      'workshop/localServers/pgCluster.ts': exportOne,
    },
  ],
];

describe('the import rules (.dependency-cruiser.mjs)', { timeout: 60_000 }, () => {
  it('has a case that breaks each of its rules', () => {
    const names = (importConfig.forbidden ?? []).map((r) => r.name);
    expect(new Set(names).size).toBe(names.length);
    expect([...new Set(IMPORT_VIOLATIONS.map(([rule]) => rule))].sort()).toEqual([...names].sort());
    for (const rule of importConfig.forbidden ?? []) {
      expect(rule.comment, rule.name).toMatch(/\w{4,}/);
      expect(rule.severity, rule.name).toBe('error');
    }
  });

  it('enters the product where the launcher does', () => {
    const launcher = readFileSync(join(ROOT, 'bin/recognition-core.js'), 'utf8');
    const loaded = [...launcher.matchAll(/built\('(src\/[^']+)\.js'\)/g)].map((m) => `${m[1]}.ts`);
    expect(loaded.sort()).toEqual([...importConfig.PRODUCT_ENTRIES].sort());
  });

  it.each(IMPORT_VIOLATIONS)('%s fires: %s', async (rule, _what, tree) => {
    const found = await violations(importRules, productTree(tree));
    expect(rulesOf(found), found.join('\n')).toEqual([rule]);
  });

  it.each(IMPORT_ALLOWED)('accepts: %s', async (_what, tree) => {
    expect(await violations(importRules, productTree(tree))).toEqual([]);
  });
});

/**
 * A tree for `.dependency-cruiser-startup.mjs`: the launcher's entries, the CLI loading commander
 * through src/cli/commander.ts as the command does.
 */
function startupTree(tree: Tree): Tree {
  return {
    'src/cli.ts': "import { Command } from './cli/commander.js';\nexport const program = new Command();\n",
    'src/cli/commander.ts':
      "import { createRequire } from 'node:module';\nconst require = createRequire(import.meta.url);\nexport const { Command } = require('commander');\n",
    'src/process/v8Flags.ts': 'export {};\n',
    'src/tracing/bootstrap.ts': 'export {};\n',
    'workshop/cli/register.ts': 'export {};\n',
    ...tree,
  };
}

const STARTUP_VIOLATIONS: Array<[rule: string, what: string, tree: Tree]> = [
  [
    'startup-no-heavy-library',
    'a registration module imports pg',
    {
      'src/cli.ts': "import './cli/db.js';\nimport './cli/commander.js';\n",
      'src/cli/db.ts': "import pg from 'pg';\nexport const p = pg;\n",
    },
  ],
  [
    'startup-no-heavy-library',
    "the workshop's registration imports xstate",
    { 'workshop/cli/register.ts': "import { setup } from 'xstate';\nexport const s = setup;\n" },
  ],
  [
    'startup-no-heavy-library',
    'the tracing bootstrap requires an OpenTelemetry package',
    {
      'src/tracing/bootstrap.ts':
        "import { createRequire } from 'node:module';\nconst require = createRequire(import.meta.url);\nexport const api = require('@opentelemetry/api');\n",
    },
  ],
  [
    'startup-no-run-time-module',
    'the CLI reads the configuration before a command runs',
    {
      'src/cli.ts': "import './cli/commander.js';\nimport { x } from './config.js';\nexport const y = x;\n",
      'src/config.ts': exportOne,
    },
  ],
  [
    'startup-no-run-time-module',
    "the workshop's registration loads the demo",
    { 'workshop/cli/register.ts': "import '../demo/runDemo.js';\n", 'workshop/demo/runDemo.ts': exportOne },
  ],
  [
    'startup-production-dependencies',
    "the workshop's registration loads a devDependency",
    { 'workshop/cli/register.ts': "import { parse } from 'yaml';\nexport const p = parse;\n" },
  ],
  ['startup-reaches-commander', 'the CLI loads no commander', { 'src/cli.ts': 'export {};\n' }],
  [
    'commander-from-one-module',
    'the workshop imports commander as ESM',
    { 'workshop/cli/probe.ts': "import { Command } from 'commander';\nexport const c = new Command();\n" },
  ],
  [
    'commander-required',
    'src/cli/commander.ts imports commander as ESM',
    { 'src/cli/commander.ts': "import { Command } from 'commander';\nexport { Command };\n" },
  ],
];

const STARTUP_ALLOWED: Array<[what: string, tree: Tree]> = [
  [
    'an action imports pg, the configuration and the machine when it runs; types cost nothing',
    {
      'src/cli.ts':
        "import './cli/commander.js';\nimport type { Pool } from 'pg';\nexport type P = Pool;\nexport const run = async () => { await import('./config.js'); await import('pg'); await import('../machines/index.js'); };\n",
      'src/config.ts': exportOne,
      'machines/index.ts': "import { setup } from 'xstate';\nexport const s = setup;\n",
    },
  ],
  [
    'commander is required in src/cli/commander.ts and its types are imported anywhere',
    {
      'src/cli/commander.ts':
        "import { createRequire } from 'node:module';\nimport type * as Commander from 'commander';\nconst require = createRequire(import.meta.url);\nexport const commander = require('commander') as typeof Commander;\n",
      'workshop/cli/probe.ts': "import type { Command } from 'commander';\nexport type C = Command;\n",
    },
  ],
];

describe("the command's start-up imports (.dependency-cruiser-startup.mjs)", { timeout: 60_000 }, () => {
  it('has a case that breaks each of its rules', () => {
    const rules = [...(startupConfig.forbidden ?? []), ...(startupConfig.required ?? [])];
    expect([...new Set(STARTUP_VIOLATIONS.map(([rule]) => rule))].sort()).toEqual(
      rules.map((r) => r.name).sort(),
    );
    for (const rule of rules) {
      expect(rule.comment, rule.name).toMatch(/\w{4,}/);
      expect(rule.severity, rule.name).toBe('error');
    }
  });

  it.each(STARTUP_VIOLATIONS)('%s fires: %s', async (rule, _what, tree) => {
    const found = await violations(startupRules, startupTree(tree));
    expect(rulesOf(found), found.join('\n')).toEqual([rule]);
  });

  it.each(STARTUP_ALLOWED)('accepts: %s', async (_what, tree) => {
    expect(await violations(startupRules, startupTree(tree))).toEqual([]);
  });
});

describe(
  'integration tests start servers and daemons through the harness (eslint.config.js)',
  { timeout: 60_000 },
  () => {
    let eslint: ESLint;
    beforeAll(() => {
      eslint = new ESLint({ cwd: ROOT });
    });

    /** Whether ESLint's `no-restricted-imports` rejects `name` of `specifier` imported from `filePath`. */
    async function rejected(filePath: string, specifier: string, name: string): Promise<boolean> {
      const [result] = await eslint.lintText(`import { ${name} } from '${specifier}';\n`, { filePath });
      return (result?.messages ?? []).some((m) => m.severity === 2 && m.ruleId === 'no-restricted-imports');
    }
    const probe = 'test/integration/__probe.test.ts';

    it.each([
      ['startNatsServer', '../../workshop/localServers/natsServer.js'],
      ['startNatsCluster', '../../workshop/localServers/natsServer.js'],
      ['startPgCluster', '../../workshop/localServers/pgCluster.js'],
      ['startTestDaemon', '../helpers/testDaemon.js'],
    ])('%s from %s is rejected', async (name, specifier) => {
      expect(await rejected(probe, specifier, name)).toBe(true);
    });

    it.each([
      [probe, 'useHarness', '../helpers/harness.js'],
      [probe, 'waitFor', '../helpers/testDaemon.js'],
      [probe, 'findNatsServerBinary', '../../workshop/localServers/natsServer.js'],
      // The tests of the local servers themselves.
      [
        'test/integration/helpers.nats.test.ts',
        'startNatsServer',
        '../../workshop/localServers/natsServer.js',
      ],
      [
        'test/integration/helpers.pgCluster.test.ts',
        'startPgCluster',
        '../../workshop/localServers/pgCluster.js',
      ],
    ])('%s may import %s from %s', async (file, name, specifier) => {
      expect(await rejected(file, specifier, name)).toBe(false);
    });
  },
);

/** remark's report for the markdown of `tree`, checked as `npm run check:links` checks: `rule file:line`. */
function linkReport(tree: Tree): { status: number | null; found: string[] } {
  const dir = writeTree(tree);
  const remark = join(ROOT, 'node_modules/remark-cli/cli.js');
  const run = spawnSync(
    process.execPath,
    [
      remark,
      '.',
      '--rc-path',
      join(ROOT, '.remarkrc.mjs'),
      '--frail',
      '--quiet',
      '--no-stdout',
      '--no-color',
    ],
    { cwd: dir, encoding: 'utf8' },
  );
  const found: string[] = [];
  let file = '';
  for (const line of run.stderr.split('\n')) {
    if (/^\S+\.md$/.test(line.trim())) file = line.trim();
    const m = /^\s*(\d+):\d+-\S+\s+warning\s.*\sremark-validate-links:(\S+)\s*$/.exec(line);
    if (m) found.push(`${m[2]} ${file}:${m[1]}`);
  }
  return { status: run.status, found };
}

describe('the link check (.remarkrc.mjs)', { timeout: 60_000 }, () => {
  const good: Tree = {
    'README.md': [
      '# Title',
      '',
      'See [ops](docs/ops.md), [start](docs/ops.md#start-up), [again](docs/ops.md#start-up-1),',
      '[here](#the-code-path), [src](src/a.ts#L3), [lines](src/a.ts#L3-L5), [a folder](docs/),',
      '[web](https://example.org/x#y), ![img](docs/a.svg), [ref][r].',
      '',
      '## The `code` path',
      '',
      '```',
      '[not a link](nowhere.md)',
      '```',
      '',
      '[r]: docs/ops.md#ops',
    ].join('\n'),
    'docs/ops.md': '# Ops\n\n## Start-up\n\n## Start-up\n\nBack to [the readme](../README.md#title).\n',
    'docs/a.svg': '<svg/>\n',
    'src/a.ts': 'export {};\n',
  };

  it('accepts existing files, folders, headings (GitHub slugs, duplicates numbered), line anchors and URLs', () => {
    expect(linkReport(good)).toEqual({ status: 0, found: [] });
  });

  // The line remark reports: the link's, or a reference definition's.
  it.each([
    ['missing-file', 'a missing file', '[file](docs/missing.md)', 3],
    ['missing-file', 'a missing image', '![img](docs/missing.svg)', 3],
    ['missing-file', 'a reference link to a missing file', '[ref][r]\n\n[r]: docs/also-missing.md', 5],
    ['missing-heading-in-file', 'a missing heading of another file', '[anchor](docs/ops.md#no-such)', 3],
    ['missing-heading', 'a missing heading of the file itself', '[here](#nope)', 3],
    ['missing-heading-in-file', 'an anchor into code that is not a line', '[into code](src/a.ts#top)', 3],
  ])('%s fires: %s', (rule, _what, text, line) => {
    const { status, found } = linkReport({ ...good, 'BROKEN.md': `# Broken\n\n${text}\n` });
    expect(found).toEqual([`${rule} BROKEN.md:${line}`]);
    expect(status).toBe(1);
  });
});

describe('the repository', () => {
  const { scripts } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
    scripts: Record<string, string>;
  };

  it('checks its shape in npm test: npm run check:shape runs the imports, the start-up and the links', () => {
    expect(scripts.test).toContain('npm run check:shape');
    for (const part of ['check:imports', 'check:startup', 'check:links'])
      expect(scripts['check:shape']).toContain(`npm run ${part}`);
  });

  // What the scripts cruise, cruised here with the same configuration.
  it.each([
    ['check:imports', '.dependency-cruiser.mjs', () => importRules],
    ['check:startup', '.dependency-cruiser-startup.mjs', () => startupRules],
  ])('passes npm run %s (%s)', { timeout: 120_000 }, async (script, config, rules) => {
    const [command, flag, file, ...roots] = scripts[script]!.split(/\s+/);
    expect([command, flag, file]).toEqual(['depcruise', '--config', config]);
    expect(roots.length).toBeGreaterThan(1);
    const { output } = await cruise(roots, { ...rules(), baseDir: ROOT }, {}, transpileOptions(rules()));
    const result = (typeof output === 'string' ? JSON.parse(output) : output) as ICruiseResult;
    expect(result.summary.violations).toEqual([]);
    expect(result.summary.totalCruised).toBeGreaterThan(100);
  });

  it('passes npm run check:links', { timeout: 120_000 }, () => {
    const run = spawnSync('npm', ['run', '--silent', 'check:links'], { cwd: ROOT, encoding: 'utf8' });
    expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0);
  });
});
