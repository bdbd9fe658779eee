#!/usr/bin/env node
// Composition root of the `recognition-core` command (compiled TypeScript: npm run build). The
// product is dist/src. A development checkout also has dist/workshop, whose commands (the demo,
// the reference service, the conformance check, the statecharts and simulate) are added to the
// product's program; the container image carries dist/src only, and the product never imports
// the workshop.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The workshop's commands: absent where dist/workshop is (workshop/cli/register.ts). */
const WORKSHOP_COMMANDS = ['statecharts', 'simulate', 'demo', 'service', 'conformance'];

const built = (path) => new URL(`../dist/${path}`, import.meta.url);
const cli = built('src/cli.js');
if (!existsSync(fileURLToPath(cli))) {
  process.stderr.write('recognition-core: not built yet; run `npm run build` first\n');
  process.exit(2);
}
const argv = process.argv.slice(2);
const workshopEntry = built('workshop/cli/register.js');
// The process's V8 settings come first, before any of the product's code runs (see the module).
// The workshop's registration module, which only declares commands, loads alongside: the two
// loads overlap, and every command line, `--help` included, starts sooner.
const [{ applyV8Flags }, workshop] = await Promise.all([
  import(built('src/process/v8Flags.js').href),
  existsSync(fileURLToPath(workshopEntry)) ? import(workshopEntry.href) : undefined,
]);
applyV8Flags();
if (!workshop && WORKSHOP_COMMANDS.includes(argv[0])) {
  process.stderr.write(
    `recognition-core: ${argv[0]} is part of a development checkout (npm ci && npm run build there); this installation has the operator's commands only (recognition-core --help)\n`,
  );
  process.exit(2);
}
// Tracing starts before the CLI is imported: the pg instrumentation must be in place before `pg`
// loads. Without OTEL_* variables asking for it, nothing of OpenTelemetry's SDK is loaded.
const { startTracingFromEnv } = await import(built('src/tracing/bootstrap.js').href);
await startTracingFromEnv(workshop ? await workshop.prepareTracing({ argv }) : {});
const { runCli } = await import(cli.href);
await runCli({ addCommands: workshop?.registerWorkshopCommands });
