/**
 * Every relative link in the repository's markdown resolves: the file or folder it names exists,
 * and a `#anchor` names a heading of the markdown file it points into (GitHub's slugs, as
 * `github-slugger` makes them, duplicates numbered). Links are read with markdown-it, so links
 * inside code are not links, and reference-style links count like inline ones. Every repository
 * path the README and the manuals name in backticks exists too.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import GithubSlugger from 'github-slugger';
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

/** The attribute that holds the target of each kind of link token. */
const TARGET_ATTRIBUTE: Partial<Record<string, string>> = { link_open: 'href', image: 'src' };

/** Every link and image target of a markdown text, as written (percent-decoded). */
export function linkTargets(text: string): string[] {
  const targets: string[] = [];
  for (const t of inlineTokens(md.parse(text, {}))) {
    const attribute = TARGET_ATTRIBUTE[t.type];
    const target = attribute === undefined ? null : t.attrGet(attribute);
    if (target !== null) targets.push(safeDecode(String(target)));
  }
  return targets;
}

/** The anchors a markdown text defines: its headings' GitHub slugs, and HTML `id`/`name` attributes. */
export function anchorsOf(text: string): Set<string> {
  const slugger = new GithubSlugger();
  const anchors = new Set<string>();
  const tokens = md.parse(text, {});
  tokens.forEach((t, i) => {
    if (t.type === 'heading_open') {
      const heading = (tokens[i + 1]?.children ?? [])
        .filter((c) => c.type === 'text' || c.type === 'code_inline')
        .map((c) => c.content)
        .join('');
      anchors.add(slugger.slug(heading));
    }
  });
  for (const t of [...tokens, ...inlineTokens(tokens)]) {
    if (t.type !== 'html_block' && t.type !== 'html_inline') continue;
    for (const m of t.content.matchAll(/\b(?:id|name)="([^"]+)"/g)) anchors.add(m[1]!);
  }
  return anchors;
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** How the checker sees the files: whether a path exists, is a folder, and a markdown file's text. */
export interface LinkFs {
  exists(path: string): boolean;
  isDirectory(path: string): boolean;
  read(path: string): string;
}

const diskFs: LinkFs = {
  exists: (p) => existsSync(join(REPO_ROOT, p)),
  isDirectory: (p) => statSync(join(REPO_ROOT, p)).isDirectory(),
  read: (p) => readFileSync(join(REPO_ROOT, p), 'utf8'),
};

/** A URL with a scheme (`https:`, `mailto:`) or protocol-relative: not checked here. */
const EXTERNAL = /^(?:[a-z][a-z0-9+.-]*:|\/\/)/i;
/** GitHub's line anchors into a source file: `#L10`, `#L10-L20`. */
const LINE_ANCHOR = /^L\d+(?:-L\d+)?$/;

/** The broken relative links of `file` (repository-relative), each with why. */
export function brokenLinks(file: string, fs: LinkFs = diskFs): string[] {
  const broken: string[] = [];
  for (const target of linkTargets(fs.read(file))) {
    if (EXTERNAL.test(target)) continue;
    const hash = target.indexOf('#');
    const pathPart = hash >= 0 ? target.slice(0, hash) : target;
    const anchor = hash >= 0 ? target.slice(hash + 1) : '';
    // A leading slash is the repository's root, as on GitHub.
    const path =
      pathPart === ''
        ? file
        : relative(
            REPO_ROOT,
            resolve(
              pathPart.startsWith('/') ? REPO_ROOT : join(REPO_ROOT, dirname(file)),
              pathPart.replace(/^\//, ''),
            ),
          );
    if (path.startsWith('..') || !fs.exists(path)) {
      broken.push(`${target}: no such file ${path}`);
      continue;
    }
    if (anchor === '') continue;
    if (path.endsWith('.md') && !fs.isDirectory(path)) {
      if (!anchorsOf(fs.read(path)).has(anchor)) broken.push(`${target}: no heading #${anchor} in ${path}`);
    } else if (!LINE_ANCHOR.test(anchor)) {
      broken.push(`${target}: #${anchor} points into ${path}, which is not a markdown file`);
    }
  }
  return broken;
}

describe('links in the markdown', () => {
  const files = markdownFiles();

  it('covers the README, the changelog, the manuals and the bench README', () => {
    expect(files).toEqual(expect.arrayContaining(['README.md', 'CHANGELOG.md', 'bench/README.md']));
    expect(files.filter((f) => f.startsWith('docs/')).length).toBeGreaterThan(3);
  });

  it.each(files)('%s: every relative link resolves', (file) => {
    expect(brokenLinks(file)).toEqual([]);
  });
});

describe('the link checker', () => {
  const files: Record<string, string> = {
    'README.md': [
      '# Title',
      'See [ops](docs/ops.md), [start](docs/ops.md#start-up), [again](docs/ops.md#start-up-1),',
      '[here](#the-code-path), [src](src/a.ts#L3), [web](https://example.org/x#y), ![img](docs/a.svg).',
      '## The `code` path',
      '```',
      '[not a link](nowhere.md)',
      '```',
    ].join('\n'),
    'docs/ops.md': '# Ops\n\n## Start-up\n\n## Start-up\n\nBack to [the readme](../README.md#title).\n',
    'docs/a.svg': '<svg/>',
    'src/a.ts': '',
    'BROKEN.md': [
      '[file](docs/missing.md) [anchor](docs/ops.md#no-such) [here](#nope)',
      '[ref][r] [into code](src/a.ts#top) [out](../outside.md)',
      '',
      '[r]: docs/also-missing.md',
    ].join('\n'),
  };
  const memoryFs: LinkFs = {
    exists: (p) => p in files || Object.keys(files).some((f) => f.startsWith(`${p}/`)),
    isDirectory: (p) => !(p in files),
    read: (p) => files[p]!,
  };

  it('accepts existing files, headings (GitHub slugs, duplicates numbered), line anchors and URLs', () => {
    expect(brokenLinks('README.md', memoryFs)).toEqual([]);
    expect(brokenLinks('docs/ops.md', memoryFs)).toEqual([]);
  });

  it('reports a missing file, a missing heading, a reference link and an anchor into code', () => {
    expect(brokenLinks('BROKEN.md', memoryFs)).toEqual([
      'docs/missing.md: no such file docs/missing.md',
      'docs/ops.md#no-such: no heading #no-such in docs/ops.md',
      '#nope: no heading #nope in BROKEN.md',
      'docs/also-missing.md: no such file docs/also-missing.md',
      'src/a.ts#top: #top points into src/a.ts, which is not a markdown file',
      '../outside.md: no such file ../outside.md',
    ]);
  });
});

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
