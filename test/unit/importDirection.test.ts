/**
 * Imports point one way (docs/development.md, "Layers"): the product (src/, machines/) never
 * reaches the workshop, the step never reaches the loops above it, statecharts
 * never reach the daemon or the step, db and nats never each other nor the daemon, bench/ and
 * test/ never each other. The lint rules that keep it so are
 * under test here: a probe import, linted as if it lived in the folder, is rejected, and the
 * imports each folder is meant to use are accepted.
 */
import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';
import { beforeAll, describe, expect, it } from 'vitest';

const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));

let eslint: ESLint;
beforeAll(() => {
  eslint = new ESLint({ cwd: REPO_ROOT });
});

/** Whether ESLint's `no-restricted-imports` rejects `specifier` (or `name` of it) imported from `filePath`. */
async function rejected(filePath: string, specifier: string, name?: string): Promise<boolean> {
  const code = name ? `import { ${name} } from '${specifier}';\n` : `import '${specifier}';\n`;
  const [result] = await eslint.lintText(code, { filePath });
  return (result?.messages ?? []).some((m) => m.severity === 2 && m.ruleId === 'no-restricted-imports');
}

describe('the import direction is enforced by lint', { timeout: 60_000 }, () => {
  it.each([
    ['src/step/__probe.ts', '../daemon/inboxBatch.js'],
    ['src/step/__probe.ts', '../cli/start.js'],
    ['src/step/__probe.ts', '../cli.js'],
    ['src/step/__probe.ts', '../statecharts/scenario.js'],
    ['src/statecharts/__probe.ts', '../step/index.js'],
    ['src/statecharts/__probe.ts', '../daemon/inboxBatch.js'],
    ['src/statecharts/__probe.ts', '../../src/daemon/daemon.js'],
    ['src/db/__probe.ts', '../nats/subjects.js'],
    ['src/db/__probe.ts', '../daemon/watchdog.js'],
    ['src/nats/__probe.ts', '../db/jobs.js'],
    ['src/nats/__probe.ts', '../daemon/inbox.js'],
    ['src/process/__probe.ts', '../cli/plumbing.js'],
    ['workshop/localServers/__probe.ts', '../../src/daemon/daemon.js'],
    ['workshop/localServers/__probe.ts', '../demo/runDemo.js'],
    // The product never imports the workshop, whichever folder of src/ asks and however it gets there.
    ['src/__probe.ts', '../workshop/cli/register.js'],
    ['src/cli/__probe.ts', '../../workshop/cli/demo.js'],
    ['src/tracing/__probe.ts', '../../workshop/tracing/otlpReceiver.js'],
    ['src/statecharts/__probe.ts', '../../workshop/statecharts/generate.js'],
    ['src/step/__probe.ts', '../../workshop/localServers/natsServer.js'],
    ['src/db/__probe.ts', '../../workshop/localServers/jobHistory.js'],
    ['src/nats/__probe.ts', '../../workshop/reference/fates.js'],
    ['src/process/__probe.ts', '../../workshop/localServers/childProcesses.js'],
    ['src/daemon/inboxScheduler.ts', '../../workshop/localServers/freePort.js'],
    ['src/daemon/__probe.ts', '../daemon/../../workshop/demo/runDemo.js'],
    ['machines/__probe.ts', '../workshop/machineSamples.js'],
    ['bench/__probe.ts', '../test/helpers/logSink.js'],
    ['test/integration/__probe.ts', '../../bench/env.js'],
    // The service kit is a package of its own: nothing of the daemon or the workshop.
    ['service-kit/src/__probe.ts', '../../src/messages/schemas.js'],
    ['service-kit/src/__probe.ts', '../../workshop/reference/fates.js'],
    ['service-kit/examples/__probe.ts', '../../src/nats/subjects.js'],
  ])('%s may not import %s', async (file, specifier) => {
    expect(await rejected(file, specifier)).toBe(true);
  });

  it.each([
    ['src/step/__probe.ts', '../db/jobRow.js'],
    ['src/step/__probe.ts', '../../machines/index.js'],
    ['src/step/__probe.ts', './plan.js'],
    ['src/daemon/__probe.ts', '../step/index.js'],
    ['src/statecharts/__probe.ts', '../messages/envelopeToJobEvent.js'],
    ['src/statecharts/__probe.ts', '../../machines/index.js'],
    ['src/statecharts/__probe.ts', '../messages/schemas.js'],
    ['src/statecharts/__probe.ts', '../process/stopSignals.js'],
    ['src/db/__probe.ts', '../config.js'],
    ['src/nats/__probe.ts', '@nats-io/jetstream'],
    ['bench/__probe.ts', '../workshop/localServers/natsServer.js'],
    ['test/unit/__probe.ts', '../../workshop/statecharts/scenario.js'],
    // The workshop uses the product.
    ['workshop/cli/__probe.ts', '../../src/cli/plumbing.js'],
    ['workshop/demo/__probe.ts', '../../src/daemon/daemon.js'],
    ['workshop/statecharts/__probe.ts', '../../src/statecharts/render.js'],
    ['workshop/tracing/__probe.ts', '../../src/tracing/bootstrap.js'],
    ['workshop/statecharts/__probe.ts', '../../machines/index.js'],
    ['test/integration/__probe.ts', '../../workshop/localServers/pgCluster.js'],
  ])('%s may import %s', async (file, specifier) => {
    expect(await rejected(file, specifier)).toBe(false);
  });
});

describe('integration tests start servers and daemons through the harness', { timeout: 60_000 }, () => {
  const probe = 'test/integration/__probe.test.ts';

  it.each([
    ['startNatsServer', '../../workshop/localServers/natsServer.js'],
    ['startNatsCluster', '../../workshop/localServers/natsServer.js'],
    ['startPgCluster', '../../workshop/localServers/pgCluster.js'],
    ['startTestDaemon', '../helpers/testDaemon.js'],
  ])('%s from %s is rejected', async (name, specifier) => {
    expect(await rejected(probe, specifier, name)).toBe(true);
  });

  it.each([
    [probe, 'useHarness', '../helpers/harness.js'],
    [probe, 'waitFor', '../helpers/testDaemon.js'],
    [probe, 'findNatsServerBinary', '../../workshop/localServers/natsServer.js'],
    // The tests of the local servers themselves.
    ['test/integration/helpers.nats.test.ts', 'startNatsServer', '../../workshop/localServers/natsServer.js'],
    [
      'test/integration/helpers.pgCluster.test.ts',
      'startPgCluster',
      '../../workshop/localServers/pgCluster.js',
    ],
  ])('%s may import %s from %s', async (file, name, specifier) => {
    expect(await rejected(file, specifier, name)).toBe(false);
  });

  it('the bench ban still holds there', async () => {
    expect(await rejected(probe, '../../bench/env.js')).toBe(true);
  });
});
