// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'visualizations/**', 'bench/results/**'] },
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
    files: ['machines/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^(?!xstate$|\\./).*',
              message: 'machines/ is pure: import only xstate and files of machines/ itself',
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
    // The step sits below the loops: cli -> daemon -> step -> {db, nats, messages, machines}.
    files: ['src/step/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '(^|/)(daemon|cli|statecharts|http)(/|\\.js$)',
              message: 'src/step/ sits below the loops: it never imports the daemon, the CLI or the views',
            },
          ],
        },
      ],
    },
  },
  {
    // The statecharts read the machine and the messages, never the loops that run them.
    files: ['src/statecharts/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '(^|/)(daemon|step|cli)(/|\\.js$)',
              message:
                'src/statecharts/ reads machines/ and src/messages/, never the daemon, the step or the CLI',
            },
          ],
        },
      ],
    },
  },
);
