// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

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
  {
    // Every integration test file sets up its servers through the one harness, which takes them
    // down in one order. Which folder may import which is dependency-cruiser's
    // (.dependency-cruiser.mjs); this rule is about names, which it does not see.
    files: ['test/integration/**/*.ts'],
    ignores: ['test/integration/helpers.nats.test.ts', 'test/integration/helpers.pgCluster.test.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            ['localServers/natsServer', ['startNatsServer', 'startNatsCluster']],
            ['localServers/pgCluster', ['startPgCluster']],
            ['helpers/testDaemon', ['startTestDaemon']],
          ].map(([module, importNames]) => ({
            regex: `(?:^|/)${module}\\.js$`,
            importNames,
            message:
              'integration tests start servers and daemons through useHarness (test/helpers/harness.ts)',
          })),
        },
      ],
    },
  },
);
