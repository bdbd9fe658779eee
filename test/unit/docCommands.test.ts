/**
 * Every `recognition-core …` command line the manuals and the runbooks tell an operator to type
 * is one the command accepts. The lines are read from README.md, docs/*.md (inline code and code
 * blocks, with markdown-it) and monitoring/* (backticked, as the alerts' runbooks and the
 * dashboard's descriptions write them); placeholders (`<job_id>`, `ID`, `N`, `R`, a Prometheus
 * `{{ $labels.reason }}`) get sample values. Each is parsed by the real program of a development
 * checkout (`buildProgram()` and the workshop's commands, as the launcher composes them), checks of
 * its arguments included, and stopped before its action runs.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CommanderError, type Command } from 'commander';
import MarkdownIt, { type Token } from 'markdown-it';
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../../src/cli/program.js';
import { registerWorkshopCommands } from '../../workshop/cli/register.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The program a development checkout runs: the product's commands and the workshop's. */
function checkoutProgram(): Command {
  const program = buildProgram();
  registerWorkshopCommands(program);
  return program;
}

const md = new MarkdownIt({ html: true });

/** A command line found in a file. */
interface Found {
  file: string;
  text: string;
  args: string[];
}

/** The code of a markdown text: inline code spans, and code blocks line by line. */
function markdownCode(text: string): Array<{ code: string; block: boolean }> {
  const out: Array<{ code: string; block: boolean }> = [];
  const walk = (tokens: Token[]) => {
    for (const t of tokens) {
      if (t.type === 'code_inline') out.push({ code: t.content, block: false });
      else if (t.type === 'fence' || t.type === 'code_block') {
        // A line ending in a backslash goes on on the next.
        for (const line of t.content.replace(/\\\n\s*/g, ' ').split('\n'))
          out.push({ code: line, block: true });
      }
      if (t.children) walk(t.children);
    }
  };
  walk(md.parse(text, {}));
  return out;
}

/** The backticked spans of a text that is not markdown (YAML, JSON). */
function backticked(text: string): Array<{ code: string; block: boolean }> {
  return [...text.matchAll(/`([^`\n]+)`/g)].map((m) => ({ code: m[1]!, block: false }));
}

/** Words of a shell line, quotes removed (none of the documented lines nests them). */
function words(line: string): string[] {
  return [...line.matchAll(/'([^']*)'|"([^"]*)"|(\S+)/g)].map((m) => m[1] ?? m[2] ?? m[3]!);
}

/**
 * The arguments of `recognition-core` in a piece of code, or undefined when it is not such a
 * command: the first word (after `$`, `npx`, `sudo` and `VAR=value` words), or the image of a
 * `docker run` given arguments. A comment (` # …`) is not part of it.
 */
function commandArgs(code: string): string[] | undefined {
  const line = code
    .replace(/(^|\s)#.*$/, '')
    .replace(/\{\{\s*\$labels\.(\w+)\s*\}\}/g, (_m, label: string) => `<${label}>`);
  // A pipe or a redirection ends the command's arguments.
  const w = words(line.replace(/\s[|>].*$/, ''));
  while (w.length > 0 && (['$', 'npx', 'sudo'].includes(w[0]!) || /^[A-Za-z_]\w*=/.test(w[0]!))) w.shift();
  if (w[0] === 'recognition-core') return w.slice(1);
  if (w[0] === 'docker' && w[1] === 'run') {
    const image = w.indexOf('recognition-core', 2);
    if (image > 0 && !w[image - 1]!.startsWith('-') && image < w.length - 1) return w.slice(image + 1);
  }
  return undefined;
}

const SAMPLE_UUID = '4f1c2b8e-9a3d-4e6f-8b7a-1c2d3e4f5a6b';
/** Sample values of an option's placeholder, by option. */
const OPTION_SAMPLES: Record<string, string> = {
  '--reason': 'SCHEMA_INVALID',
  '--status': 'timeout',
  '--service': 'tabular-parser',
  '--to-service': 'tabular-parser',
  '--file': SAMPLE_UUID,
  '--since': '1h',
  '--created-since': '1h',
  '--finished-since': '1h',
  '--finished-before': '2026-11-30T00:00:00Z',
  '--older-than': '30d',
  '--action': 'jobs retry',
  '--actor': 'alice',
  '--note': 'the parser is fixed',
  '--limit': '5',
  '--jobs': '5',
  '--seed': '5',
  '--delay': '5',
  '--timeout': '5',
  '--inspect-port': '8090',
  '--bucket': 'arm-ka',
  '--key': 'uploads/report.xlsx',
  '--name': 'report.xlsx',
};
/** A placeholder, or a word the shell expands (`"${day}T00:00:00Z"`), stands for a sample value. */
const isPlaceholder = (word: string) =>
  /^<[^>]+>$/.test(word) || /^(ID|N|T|R|NAME|ACTION|USER|TEXT)$/.test(word) || word.includes('$');

/**
 * The command lines `args` stands for with sample values: `<command>` stands for every command
 * of the program; an option's placeholder for a value of that option; any other placeholder for
 * an operand (a number for `quarantine replay`, a job id otherwise).
 */
function withSamples(args: string[], commands: string[]): string[][] {
  if (args.includes('<command>'))
    return commands.flatMap((c) =>
      withSamples(
        args.map((a) => (a === '<command>' ? c : a)),
        commands,
      ),
    );
  return [
    args.map((a, i) => {
      if (!isPlaceholder(a)) return a;
      const option = OPTION_SAMPLES[args[i - 1] ?? ''];
      if (option) return option;
      return args[0] === 'quarantine' ? '42' : SAMPLE_UUID;
    }),
  ];
}

/** Every `recognition-core` command line of the manuals and the runbooks. */
function documentedCommands(commands: string[]): Found[] {
  const files = [
    'README.md',
    ...readdirSync(join(ROOT, 'docs'))
      .filter((f) => f.endsWith('.md'))
      .map((f) => join('docs', f)),
    ...readdirSync(join(ROOT, 'monitoring')).map((f) => join('monitoring', f)),
  ];
  const found: Found[] = [];
  for (const file of files) {
    const text = readFileSync(join(ROOT, file), 'utf8');
    for (const { code } of file.endsWith('.md') ? markdownCode(text) : backticked(text)) {
      const args = commandArgs(code);
      // No arguments, or only a placeholder (`recognition-core <command>`): a form, not a command line.
      if (args === undefined || args.length === 0 || (args.length === 1 && isPlaceholder(args[0]!))) continue;
      for (const sample of withSamples(args, commands)) found.push({ file, text: code.trim(), args: sample });
    }
  }
  return found;
}

/** Thrown by the hook that stops an accepted command line before its action. */
class Accepted extends Error {}

/** Every command of `program`, itself included. */
function allCommands(program: Command): Command[] {
  return [program, ...program.commands.flatMap((c) => allCommands(c))];
}

/**
 * Parse `args` as the command does, actions replaced by a stop: resolves with `accepted`, or with
 * the message the command would print.
 */
async function parse(args: string[]): Promise<string> {
  const program = checkoutProgram();
  const errors: string[] = [];
  for (const c of allCommands(program)) {
    c.configureOutput({ writeOut: () => {}, writeErr: (s) => errors.push(s) });
    // On the commands that run something: after their own checks, before their action.
    if (c.commands.length === 0)
      c.hook('preAction', () => {
        throw new Accepted();
      });
  }
  try {
    await program.parseAsync(args, { from: 'user' });
    return 'ran an action';
  } catch (err) {
    if (err instanceof Accepted) return 'accepted';
    if (err instanceof CommanderError && err.exitCode === 0) return 'accepted';
    return errors.join('').trim() || (err as Error).message;
  }
}

describe('the command lines of the manuals and runbooks', () => {
  const commands = checkoutProgram().commands.map((c) => c.name());
  const found = documentedCommands(commands);

  it('are found in the manuals, the runbooks and the dashboard', () => {
    const files = new Set(found.map((f) => f.file));
    for (const f of ['docs/operations.md', 'docs/monitoring.md', 'monitoring/recognition-core.rules.yml'])
      expect(files).toContain(f);
    expect(found.length).toBeGreaterThan(30);
  });

  it('are accepted by the command, each', async () => {
    const refused: string[] = [];
    for (const f of found) {
      const outcome = await parse(f.args);
      if (outcome !== 'accepted') refused.push(`${f.file}: \`${f.text}\` → ${f.args.join(' ')}: ${outcome}`);
    }
    expect(refused).toEqual([]);
  });

  it('tell a mistyped command line from a good one', async () => {
    expect(await parse(['jobs', 'list', '--status', 'timeout', '--finished-since', '1h'])).toBe('accepted');
    expect(await parse(['jobs', 'list', '--status', 'timeout', '--since', '1h'])).toMatch(
      /unknown option '--since'/,
    );
    expect(await parse(['quarantine', 'replay'])).toMatch(/either a quarantine id or --reason/);
    expect(await parse(['jobs', 'retry'])).toMatch(/give a job id, or --status/);
    expect(await parse(['jobs', 'create', '--service', 'x'])).toMatch(/required option '--file <id>'/);
    expect(await parse(['--version'])).toBe('accepted');
  });

  it('take their placeholders from the sample values', () => {
    expect(commandArgs('npx recognition-core jobs show <job_id>   # one job')).toEqual([
      'jobs',
      'show',
      '<job_id>',
    ]);
    expect(commandArgs('docker run --rm --env-file recognition-core.env recognition-core migrate')).toEqual([
      'migrate',
    ]);
    expect(commandArgs('journalctl -u recognition-core -o cat')).toBeUndefined();
    expect(commandArgs('recognition-core quarantine list --reason {{ $labels.reason }}')).toEqual([
      'quarantine',
      'list',
      '--reason',
      '<reason>',
    ]);
    expect(withSamples(['quarantine', 'replay', 'ID'], commands)).toEqual([['quarantine', 'replay', '42']]);
    expect(withSamples(['<command>', '--help'], commands)).toHaveLength(commands.length);
  });
});
