#!/usr/bin/env node
// Thin launcher: the CLI is compiled TypeScript (npm run build).
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
const cli = new URL('../dist/src/cli.js', import.meta.url);
if (!existsSync(fileURLToPath(cli))) {
  process.stderr.write('recognition-core: not built yet; run `npm run build` first\n');
  process.exit(2);
}
await import(cli.href);
