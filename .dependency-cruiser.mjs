// @ts-check
/**
 * The repository's shape (docs/development.md, "Product and workshop" and "Layers"): which folder
 * may import which, what the product is, and which packages it may load. Every import counts:
 * `import()` expressions, type-only imports and `import('…')` types included. What the command
 * loads before a command runs is .dependency-cruiser-startup.mjs's. `npm run check:shape` runs
 * both (and the link check); test/unit/shapeRules.test.ts shows each rule firing on a file that
 * breaks it.
 */

/** The modules the launcher (`bin/recognition-core.js`) loads out of the product's compiled tree. */
export const PRODUCT_ENTRIES = ['src/cli.ts', 'src/process/v8Flags.ts', 'src/tracing/bootstrap.ts'];

/** An anchored regular expression matching exactly `files`. */
export const exactly = (/** @type {string[]} */ files) =>
  `^(${files.map((f) => f.replace(/[.]/g, '\\.')).join('|')})$`;

/** A folder of src/ (or `src/<name>.ts`), for the layer rules. */
const srcFolders = (/** @type {string[]} */ names) => `^src/(${names.join('|')})(/|\\.ts$)`;

/** A package's files under node_modules. */
export const packages = (/** @type {string[]} */ names) =>
  `(^|/)node_modules/(${names.map((n) => n.replace(/[.]/g, '\\.')).join('|')})/`;

/** `rules`, each an error: a broken rule fails the check. */
export const errors = (/** @type {object[]} */ rules) =>
  rules.map((rule) => ({ severity: 'error', ...rule }));

/** The layers: a lower folder never reaches up, so each can be read, tested and changed alone. */
const layers = [
  {
    name: 'replay-below-cli',
    comment: 'src/replay is a library for the CLI and the console: it never imports the CLI or the views',
    from: { path: '^src/replay/' },
    to: { path: srcFolders(['cli', 'http', 'statecharts']) },
  },
  {
    name: 'operator-below-commands',
    comment:
      "src/operator is the operator's actions as a library for the CLI and the console: it never imports either",
    from: { path: '^src/operator/' },
    to: { path: srcFolders(['cli', 'console']) },
  },
  {
    name: 'console-beside-cli',
    comment:
      'src/console acts through src/operator as the CLI does: it never imports the CLI, nor the daemon that starts it',
    from: { path: '^src/console/' },
    to: { path: srcFolders(['cli', 'daemon']) },
  },
  {
    name: 'daemon-below-cli',
    comment: 'src/daemon runs the loops: it never imports the CLI or the replays built on it',
    from: { path: '^src/daemon/' },
    to: { path: srcFolders(['cli', 'replay']) },
  },
  {
    name: 'step-below-loops',
    comment: 'src/step sits below the loops: it never imports the daemon, the replays, the CLI or the views',
    from: { path: '^src/step/' },
    to: { path: srcFolders(['daemon', 'replay', 'cli', 'statecharts', 'http']) },
  },
  {
    name: 'statecharts-below-daemon',
    comment: 'src/statecharts reads machines and messages, never the daemon, the step or the CLI',
    from: { path: '^src/statecharts/' },
    to: { path: srcFolders(['daemon', 'step', 'cli']) },
  },
  {
    name: 'db-apart-from-nats',
    comment: 'src/db never imports src/nats or the loops: each is tested against its own server',
    from: { path: '^src/db/' },
    to: { path: srcFolders(['nats', 'daemon']) },
  },
  {
    name: 'nats-apart-from-db',
    comment: 'src/nats never imports src/db or the loops: each is tested against its own server',
    from: { path: '^src/nats/' },
    to: { path: srcFolders(['db', 'daemon']) },
  },
  {
    name: 'process-below-commands',
    comment: 'process plumbing (src/process) sits below every command and loop',
    from: { path: '^src/process/' },
    to: { path: srcFolders(['cli', 'daemon']) },
  },
  {
    name: 'local-servers-below-commands',
    comment: 'workshop/localServers sits below every command, loop and the demo, which all start servers',
    from: { path: '^workshop/localServers/' },
    to: { path: '^(src|workshop)/(cli|daemon|demo)(/|\\.ts$)' },
  },
  {
    name: 'bench-apart-from-test',
    comment: 'bench/ never imports test/: what the two share lives in workshop/',
    from: { path: '^bench/' },
    to: { path: '^test/' },
  },
  {
    name: 'test-apart-from-bench',
    comment: 'test/ never imports bench/: what the two share lives in workshop/',
    from: { path: '^test/' },
    to: { path: '^bench/' },
  },
];

/** The product and the workshop, and the packages of each. */
const boundaries = [
  {
    name: 'product-not-workshop',
    comment:
      'src/ and machines/ are the product, which ships alone: they import only src/, machines/ and schemas/ of the repository, never workshop/, test/ or bench/ (the image carries none of them)',
    from: { path: '^(src|machines)/' },
    to: { dependencyTypes: ['local'], pathNot: '^(src|machines|schemas)/' },
  },
  {
    name: 'src-is-the-product',
    comment:
      'every file of src/ is reached from the modules the launcher loads: a module only the tests, the bench or the demo use belongs in workshop/',
    from: { path: exactly(PRODUCT_ENTRIES) },
    to: { path: '^src/', pathNot: exactly(PRODUCT_ENTRIES), reachable: false },
  },
  {
    name: 'product-loads-dependencies',
    comment:
      'what the product loads at run time is a production dependency: the image installs `dependencies` only (a type-only import is gone from the compiled code)',
    from: { path: '^(src|machines|bin)/' },
    to: {
      dependencyTypes: ['npm-dev', 'npm-optional', 'npm-peer'],
      dependencyTypesNot: ['pre-compilation-only'],
    },
  },
  {
    name: 'service-kit-own-package',
    comment:
      'service-kit/ is a package of its own: it imports its own files and its dependencies, never the rest of the repository',
    from: { path: '^service-kit/' },
    to: { dependencyTypes: ['local'], pathNot: '^service-kit/' },
  },
  {
    name: 'declared-packages',
    comment:
      "every package imported is declared in package.json (service-kit/package.json for the kit); the kit's example is a service of its own, whose packages are the service's",
    from: { pathNot: '^service-kit/examples/' },
    to: { dependencyTypes: ['npm-no-pkg', 'npm-unknown'] },
  },
  {
    name: 'resolvable',
    comment: 'every import names a file or package that exists: the rules above see the whole graph',
    from: {},
    to: { couldNotResolve: true },
  },
];

/**
 * The options of these rules, which the start-up rules start from: TypeScript sources, every
 * import as written, each marked `pre-compilation-only` when the compiled code no longer has it (a
 * type-only import). Paths stay as written, inside the repository, where node_modules is a link.
 */
export const options = {
  tsConfig: { fileName: 'tsconfig.json' },
  tsPreCompilationDeps: 'specify',
  preserveSymlinks: true,
  doNotFollow: { path: 'node_modules' },
  exclude: { path: '^(service-kit/)?dist/' },
  moduleSystems: ['es6', 'cjs'],
  // `require.resolve('pkg/file')` names a package's file the product serves (the console's assets):
  // it counts as a dependency on that package.
  exoticRequireStrings: ['require.resolve'],
  combinedDependencies: false,
  // Packages resolve as node resolves them for this ESM project: their `exports`, `import` first.
  enhancedResolveOptions: {
    exportsFields: ['exports'],
    conditionNames: ['import', 'require', 'node', 'default'],
    mainFields: ['module', 'main', 'types', 'typings'],
  },
};

/** @type {import('dependency-cruiser').IConfiguration} */
export default {
  forbidden: errors([...layers, ...boundaries]),
  options,
};
