/**
 * The imports of the repository's sources, read with the TypeScript compiler's parser (no type
 * checking): `import … from` and `export … from` declarations, type-only ones included and marked,
 * `import()` expressions, `import('…')` types and `createRequire(…)('…')` calls with a literal
 * specifier (the last counted as a static import: it loads when the module does). A relative
 * specifier names a source file: `./x.js` is `./x.ts` (or `./x.js` where there is no `.ts`).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

/** One import of a module. */
export interface ModuleImport {
  specifier: string;
  /** `import type …`, `export type … from`, or every binding `type`: gone from the emitted code. */
  typeOnly: boolean;
  /** An `import()` expression. */
  dynamic: boolean;
}

/** Every import of `file` with a literal specifier. */
export function moduleImports(file: string): ModuleImport[] {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.ES2022, true);
  const out: ModuleImport[] = [];
  const visit = (node: ts.Node): void => {
    const required = requiredSpecifier(node);
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
      const clause = node.importClause;
      const named = clause?.namedBindings;
      const typeOnly =
        !!clause &&
        (clause.isTypeOnly ||
          (!clause.name &&
            !!named &&
            ts.isNamedImports(named) &&
            named.elements.length > 0 &&
            named.elements.every((e) => e.isTypeOnly)));
      out.push({ specifier: node.moduleSpecifier.text, typeOnly, dynamic: false });
    } else if (
      ts.isExportDeclaration(node) &&
      node.moduleSpecifier &&
      ts.isStringLiteral(node.moduleSpecifier)
    ) {
      out.push({ specifier: node.moduleSpecifier.text, typeOnly: node.isTypeOnly, dynamic: false });
    } else if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments[0] &&
      ts.isStringLiteralLike(node.arguments[0])
    ) {
      out.push({ specifier: node.arguments[0].text, typeOnly: false, dynamic: true });
    } else if (required !== undefined) {
      out.push({ specifier: required, typeOnly: false, dynamic: false });
    } else if (
      ts.isImportTypeNode(node) &&
      ts.isLiteralTypeNode(node.argument) &&
      ts.isStringLiteral(node.argument.literal)
    ) {
      out.push({ specifier: node.argument.literal.text, typeOnly: true, dynamic: false });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return out;
}

/** What `node` loads if it is a `createRequire(…)('x')` call: a CommonJS package, loaded with its module. */
export function requiredSpecifier(node: ts.Node): string | undefined {
  if (!ts.isCallExpression(node) || !ts.isCallExpression(node.expression)) return undefined;
  const callee = node.expression.expression;
  const [arg] = node.arguments;
  return ts.isIdentifier(callee) && callee.text === 'createRequire' && arg && ts.isStringLiteralLike(arg)
    ? arg.text
    : undefined;
}

/** The source file (relative to `root`) a relative `specifier` of `file` names. */
export function resolveSource(root: string, file: string, specifier: string): string {
  const target = resolve(root, dirname(file), specifier);
  const typescript = target.replace(/\.js$/, '.ts');
  return relative(root, existsSync(typescript) ? typescript : target);
}

/** The package a bare specifier names (`@scope/name` or `name`), or undefined for a Node built-in. */
export function packageOf(specifier: string): string | undefined {
  if (specifier.startsWith('node:')) return undefined;
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
}

/** The `.ts` files under `dir` of `root` (relative to `root`), tests excluded. */
export function sourceFiles(root: string, dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(join(root, d), { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith('.ts') && !e.name.endsWith('.test.ts')) out.push(p);
    }
  };
  walk(dir);
  return out.sort();
}

/**
 * Every source file reachable from `entries` (relative to `root`) through relative imports of any
 * kind, each with the chain of files that reaches it.
 */
export function reachableFiles(root: string, entries: string[]): Map<string, string[]> {
  const reached = new Map<string, string[]>();
  const queue = entries.map((e) => ({ file: e, via: [e] }));
  while (queue.length > 0) {
    const { file, via } = queue.shift()!;
    if (reached.has(file)) continue;
    reached.set(file, via);
    for (const { specifier } of moduleImports(join(root, file))) {
      if (!specifier.startsWith('.')) continue;
      const target = resolveSource(root, file, specifier);
      queue.push({ file: target, via: [...via, target] });
    }
  }
  return reached;
}
