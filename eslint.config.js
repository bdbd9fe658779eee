// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

/**
 * The product (`src/`, `machines/`) never imports the workshop (`workshop/`: what only tests,
 * bench, the demo and developers use): the container image carries no workshop, and an import of
 * it would fail there.
 */
const NO_WORKSHOP = {
  regex: '^\\.{1,2}/(?:.*/)?workshop(?:/|\\.js$)',
  message: 'src/ and machines/ are the product: they never import workshop/ (docs/development.md)',
};

/**
 * One `no-restricted-imports` block per folder: an import whose path names a banned folder
 * (`../daemon/x.js`, `../../src/daemon/x.js`, `../test/helpers/x.js`) is an error. A block of
 * `src/` bans the workshop too: for one file, the last block that sets the rule replaces the
 * others, so each repeats {@link NO_WORKSHOP}.
 * @param {Array<{ files: string[]; ignores?: string[]; banned: string[]; message: string }>} bans
 */
function importBans(bans) {
  return bans.map(({ files, ignores = [], banned, message }) => ({
    files,
    ignores,
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { regex: `^\\.{1,2}/(?:.*/)?(?:${banned.join('|')})(?:/|\\.js$)`, message },
            ...(files.every((f) => f.startsWith('src/')) ? [NO_WORKSHOP] : []),
          ],
        },
      ],
    },
  }));
}

export default tseslint.config(
  { ignores: ['dist/**', 'service-kit/dist/**', 'node_modules/**', 'visualizations/**', 'bench/results/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  { languageOptions: { globals: globals.node } },
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'no-restricted-syntax': [
        'error',
        {
          selector: "CallExpression[callee.property.name='only']",
          message: 'no focused tests (.only) in the repo',
        },
      ],
    },
  },
  {
    // The product never imports the workshop. The blocks below that set the rule for some of
    // src/ again (and machines/, which imports only xstate and itself) keep this ban.
    files: ['src/**/*.ts'],
    rules: { 'no-restricted-imports': ['error', { patterns: [NO_WORKSHOP] }] },
  },
  {
    // The lifecycle machine is pure: xstate and its own files only; time arrives on the event.
    // `xstate/guards` is xstate's own guard evaluation, which the compiled decision table calls.
    files: ['machines/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^(?!xstate(?:/guards)?$|\\./).*',
              message:
                'machines/ is pure: import only xstate (and xstate/guards) and files of machines/ itself',
            },
          ],
        },
      ],
      'no-restricted-properties': [
        'error',
        { object: 'Date', property: 'now', message: 'time enters as data on the event (now)' },
      ],
      'no-restricted-globals': ['error', 'process', 'setTimeout', 'setInterval', 'fetch', 'performance'],
    },
  },
  {
    // The inbox's scheduler is pure: no imports, no clock, no timers; the inbox runs its linger
    // timer, so every interleaving of arrivals, settlements and time can be tested without one.
    files: ['src/daemon/inboxScheduler.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        { patterns: [{ regex: '.*', message: 'the inbox scheduler is pure: it imports nothing' }] },
      ],
      'no-restricted-properties': [
        'error',
        { object: 'Date', property: 'now', message: 'time enters through the linger port' },
      ],
      'no-restricted-globals': [
        'error',
        'process',
        'setTimeout',
        'clearTimeout',
        'setInterval',
        'clearInterval',
        'setImmediate',
        'queueMicrotask',
        'performance',
      ],
    },
  },
  // Direction of imports (docs/development.md, "Layers"): cli -> replay -> daemon -> step -> {db, nats, messages, machines};
  // a lower folder never reaches up, so each can be read, tested and changed without the ones above.
  ...importBans([
    {
      files: ['src/replay/**/*.ts'],
      banned: ['cli', 'http', 'statecharts'],
      message: 'src/replay is a library for the CLI and the console: it never imports the CLI or the views',
    },
    {
      // The scheduler keeps its own stricter block above: it imports nothing.
      files: ['src/daemon/**/*.ts'],
      ignores: ['src/daemon/inboxScheduler.ts'],
      banned: ['cli', 'replay'],
      message: 'src/daemon runs the loops: it never imports the CLI or the replays built on it',
    },
    {
      files: ['src/step/**/*.ts'],
      banned: ['daemon', 'replay', 'cli', 'statecharts', 'http'],
      message: 'src/step sits below the loops: it never imports the daemon, the CLI or the views',
    },
    {
      files: ['src/statecharts/**/*.ts'],
      banned: ['daemon', 'step', 'cli'],
      message: 'src/statecharts reads machines and messages, never the daemon, the step or the CLI',
    },
    {
      files: ['src/db/**/*.ts'],
      banned: ['nats', 'daemon'],
      message: 'src/db never imports src/nats or src/daemon',
    },
    {
      files: ['src/nats/**/*.ts'],
      banned: ['db', 'daemon'],
      message: 'src/nats never imports src/db or src/daemon',
    },
    {
      files: ['src/process/**/*.ts'],
      banned: ['cli', 'daemon'],
      message: 'process plumbing sits below every command and loop',
    },
    {
      files: ['workshop/localServers/**/*.ts'],
      banned: ['cli', 'daemon', 'demo'],
      message: 'local servers sit below every command, loop and the demo',
    },
    {
      files: ['bench/**/*.ts'],
      banned: ['test'],
      message: 'bench/ never imports test/: shared process helpers live in workshop/localServers',
    },
    {
      files: ['test/**/*.ts'],
      banned: ['bench'],
      message: 'test/ never imports bench/: shared process helpers live in workshop/localServers',
    },
  ]),
  {
    // The service kit is a package of its own: it imports its own files and its dependencies,
    // never the daemon, the workshop or anything else of the repository.
    files: ['service-kit/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^\\.\\./\\.\\.(?:/|$)',
              message: 'service-kit/ is a package of its own: it never imports the rest of the repository',
            },
          ],
        },
      ],
    },
  },
  {
    // Every integration test file sets up its servers through the one harness, which takes them
    // down in one order. This block repeats test/'s bench ban: a later rule replaces an earlier one.
    files: ['test/integration/**/*.ts'],
    ignores: ['test/integration/helpers.nats.test.ts', 'test/integration/helpers.pgCluster.test.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^\\.{1,2}/(?:.*/)?bench(?:/|\\.js$)',
              message: 'test/ never imports bench/: shared process helpers live in workshop/localServers',
            },
            ...[
              ['localServers/natsServer', ['startNatsServer', 'startNatsCluster']],
              ['localServers/pgCluster', ['startPgCluster']],
              ['helpers/testDaemon', ['startTestDaemon']],
            ].map(([module, importNames]) => ({
              regex: `(?:^|/)${module}\\.js$`,
              importNames,
              message:
                'integration tests start servers and daemons through useHarness (test/helpers/harness.ts)',
            })),
          ],
        },
      ],
    },
  },
);
