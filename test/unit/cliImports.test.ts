/**
 * Each command loads only what it uses: what the `recognition-core` command imports statically
 * (before any command is chosen: `--help`, `--version`, a usage error) is commander and light
 * modules only. Every library a command needs (the database client, NATS, OpenTelemetry, the
 * machine, the inspector, Graphviz, the validators, the logger) is imported by its action when it
 * runs.
 *
 * The graph is walked over the sources as the compiler emits them (`transpileModule`: imports
 * used as types only are gone), following static `import` and `export … from` declarations and
 * `createRequire(…)('x')` calls (they load with their module), not `import()` expressions.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { requiredSpecifier } from '../helpers/importGraph.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Packages no command may pay for before it runs. */
const HEAVY = [
  /^@opentelemetry\//,
  /^xstate$/,
  /^ajv(-formats)?$/,
  /^zod$/,
  /^@statelyai\//,
  /^@viz-js\//,
  /^@nats-io\//,
  /^pino(-pretty)?$/,
  /^kysely$/,
  /^pg$/,
  /^cli-progress$/,
  /^ws$/,
  /^prom-client$/,
];

/**
 * The specifiers a module loads when it is evaluated, as emitted: its `import` and `export … from`
 * declarations (`required: false`) and its `createRequire(…)('x')` calls (`required: true`).
 */
function staticImports(file: string): Array<{ specifier: string; required: boolean }> {
  const js = ts.transpileModule(readFileSync(file, 'utf8'), {
    fileName: file,
    compilerOptions: { module: ts.ModuleKind.ES2022, target: ts.ScriptTarget.ES2022 },
  }).outputText;
  const source = ts.createSourceFile(file, js, ts.ScriptTarget.ES2022, false, ts.ScriptKind.JS);
  const out: Array<{ specifier: string; required: boolean }> = [];
  const visit = (node: ts.Node): void => {
    const required = requiredSpecifier(node);
    if (required !== undefined) out.push({ specifier: required, required: true });
    ts.forEachChild(node, visit);
  };
  for (const s of source.statements) {
    if (
      (ts.isImportDeclaration(s) || ts.isExportDeclaration(s)) &&
      s.moduleSpecifier &&
      ts.isStringLiteral(s.moduleSpecifier)
    )
      out.push({ specifier: s.moduleSpecifier.text, required: false });
    else visit(s);
  }
  return out;
}

/** The package a bare specifier names: `@scope/name` or `name`. */
function packageOf(specifier: string): string {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!;
}

/** Every source file and package reachable by static imports from `entries`, each with a path to it. */
function staticGraph(entries: string[]): { files: Map<string, string[]>; packages: Map<string, string[]> } {
  const files = new Map<string, string[]>();
  const packages = new Map<string, string[]>();
  const queue = entries.map((e) => ({ file: resolve(ROOT, e), via: [e] }));
  while (queue.length > 0) {
    const { file, via } = queue.shift()!;
    const name = relative(ROOT, file);
    if (files.has(name)) continue;
    files.set(name, via);
    for (const { specifier: spec } of staticImports(file)) {
      if (spec.startsWith('node:')) continue;
      if (spec.startsWith('.')) {
        const target = resolve(dirname(file), spec.replace(/\.js$/, '.ts'));
        expect(existsSync(target), `${name} imports ${spec}`).toBe(true);
        queue.push({ file: target, via: [...via, relative(ROOT, target)] });
      } else if (!packages.has(packageOf(spec))) {
        packages.set(packageOf(spec), [...via, spec]);
      }
    }
  }
  return { files, packages };
}

describe('what the recognition-core command loads before a command runs', () => {
  // The launcher of a development checkout imports the workshop's registration module, then the
  // tracing bootstrap, then the CLI (the image's launcher the last two only).
  const graph = staticGraph(['workshop/cli/register.ts', 'src/tracing/bootstrap.ts', 'src/cli.ts']);

  it('walks the whole command line: every registration module and commander', () => {
    for (const f of [
      'src/cli/program.ts',
      'src/cli/jobs.ts',
      'src/cli/db.ts',
      'src/cli/quarantine.ts',
      'workshop/cli/statecharts.ts',
      'workshop/cli/demo.ts',
      'workshop/cli/service.ts',
    ])
      expect([...graph.files.keys()]).toContain(f);
    expect([...graph.packages.keys()]).toContain('commander');
  });

  it('loads commander as CommonJS, in src/cli/commander.ts only (no ESM import of it to resolve)', () => {
    const loading = [...graph.files.keys()].flatMap((f) =>
      staticImports(resolve(ROOT, f))
        .filter((i) => i.specifier === 'commander')
        .map((i) => `${f}: ${i.required ? 'require' : 'import'}`),
    );
    expect(loading).toEqual(['src/cli/commander.ts: require']);
  });

  it('reaches none of the heavy packages statically', () => {
    const heavy = [...graph.packages].filter(([p]) => HEAVY.some((h) => h.test(p)));
    expect(heavy.map(([p, via]) => `${p} via ${via.join(' -> ')}`)).toEqual([]);
  });

  it('reads no configuration, opens no database, starts no daemon before the command runs', () => {
    const forbidden = [
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
    const reached = forbidden.filter((f) => graph.files.has(f));
    expect(reached.map((f) => `${f} via ${graph.files.get(f)!.join(' -> ')}`)).toEqual([]);
  });

  it('imports only production dependencies', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    expect([...graph.packages.keys()].filter((p) => !(p in pkg.dependencies))).toEqual([]);
  });
});
