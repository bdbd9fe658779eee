/**
 * Every repository path the README and the manuals name in backticks exists, and the changelog's
 * newest version is package.json's. (Their links are checked by remark-validate-links:
 * `npm run check:links`, test/unit/shapeRules.test.ts.)
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import MarkdownIt, { type Token } from 'markdown-it';
import { describe, expect, it } from 'vitest';

const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** Folders that hold no markdown of ours: dependencies, build output, git and tool state. */
const SKIPPED_DIRS = new Set(['node_modules', 'dist']);

const md = new MarkdownIt({ html: true });

/** The markdown files under `dir`, repository-relative, skipping dependencies and dot-folders. */
function markdownFiles(dir = REPO_ROOT): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name.startsWith('.') || SKIPPED_DIRS.has(entry.name)) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) found.push(...markdownFiles(path));
    else if (entry.name.endsWith('.md')) found.push(relative(REPO_ROOT, path));
  }
  return found.sort();
}

function inlineTokens(tokens: Token[]): Token[] {
  return tokens.flatMap((t) => (t.type === 'inline' && t.children ? t.children : []));
}

/** The folders of the repository a backticked path in the docs starts with. */
const REPO_FOLDERS = readdirSync(REPO_ROOT, { withFileTypes: true })
  .filter((e) => e.isDirectory() && !SKIPPED_DIRS.has(e.name) && e.name !== '.git')
  .map((e) => e.name);

/**
 * The repository paths named in backticks in a markdown text: inline code that starts with one of
 * the repository's folders and holds no placeholder, wildcard or space (`results/<file_id>/` is a
 * pattern, not a path). A trailing `:line` or `#anchor` is dropped.
 */
export function backtickedPaths(text: string, folders: readonly string[] = REPO_FOLDERS): string[] {
  const paths: string[] = [];
  for (const t of inlineTokens(md.parse(text, {}))) {
    if (t.type !== 'code_inline') continue;
    const word = t.content.replace(/(:\d+(-\d+)?|#.*)$/, '');
    if (/[<>*{}\s…$%]/.test(word)) continue;
    if (folders.some((f) => word.startsWith(`${f}/`))) paths.push(word.replace(/\/$/, ''));
  }
  return paths;
}

describe('paths in backticks', () => {
  const files = markdownFiles().filter(
    (f) => f === 'README.md' || f.endsWith('/README.md') || f.startsWith('docs/'),
  );

  // Folders git ignores are made by a command the docs name (`deploy/secrets/`): not required here.
  const ignored = readFileSync(join(REPO_ROOT, '.gitignore'), 'utf8')
    .split('\n')
    .filter((l) => l.includes('/') && !l.startsWith('#'))
    .map((l) => l.replace(/\/$/, ''));

  it.each(files)('%s: every backticked repository path exists', (file) => {
    const text = readFileSync(join(REPO_ROOT, file), 'utf8');
    const missing = backtickedPaths(text).filter(
      (p) => !existsSync(join(REPO_ROOT, p)) && !ignored.some((i) => p === i || p.startsWith(`${i}/`)),
    );
    expect(missing).toEqual([]);
  });

  it('finds paths in inline code, not placeholders, patterns or prose', () => {
    const text =
      'Run `src/cli.ts` and `docs/x.md#top`, not `results/<file_id>/`, `src/*.ts`, src/plain.ts or `npm test`.';
    expect(backtickedPaths(text, ['src', 'docs', 'results'])).toEqual(['src/cli.ts', 'docs/x.md']);
  });
});

describe('the changelog and the version', () => {
  it("package.json's version is the changelog's newest version", () => {
    const changelog = readFileSync(join(REPO_ROOT, 'CHANGELOG.md'), 'utf8');
    const newest = /^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$/m.exec(changelog)?.[1];
    const pkg = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string };
    expect(newest).toBeDefined();
    expect(pkg.version).toBe(newest);
  });
});
