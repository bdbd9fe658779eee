#!/usr/bin/env node
// Thin launcher: the CLI is compiled TypeScript (npm run build).
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
const cli = new URL('../dist/src/cli.js', import.meta.url);
if (!existsSync(fileURLToPath(cli))) {
  process.stderr.write('recognition-core: not built yet; run `npm run build` first\n');
  process.exit(2);
}
// Tracing starts before the CLI is imported: the pg instrumentation must be in place before `pg`
// loads. Without OTEL_* variables asking for it, nothing of OpenTelemetry's SDK is loaded.
const { startTracingFromEnv } = await import(
  new URL('../dist/src/tracing/bootstrap.js', import.meta.url).href
);
await startTracingFromEnv({ argv: process.argv.slice(2) });
await import(cli.href);
