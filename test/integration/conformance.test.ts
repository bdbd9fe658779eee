/**
 * The conformance check, as a team runs it (`recognition-core conformance --service NAME --
 * <command>`), against a private nats-server where the core's streams and consumers exist too:
 * it passes against the reference service, fails naming the check against services broken in
 * one way each, and leaves the core's streams and consumers as they were.
 */
import { fileURLToPath } from 'node:url';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { beforeAll, describe, expect, it } from 'vitest';
import { CONFORMANCE_CHECKS, runConformance } from '../../service-kit/src/conformance.js';
import { loadConfig } from '../../src/config.js';
import { provisionStreams } from '../../src/nats/provision.js';
import { CLI_BIN, runCli } from '../helpers/cliProcess.js';
import { useHarness } from '../helpers/harness.js';

const BROKEN = fileURLToPath(new URL('../../dist/test/helpers/brokenService.js', import.meta.url));
const t = useHarness({ nats: true, client: true });
const cfg = loadConfig({});
let jsm: JetStreamManager;

/** The streams and consumers there are, with what the core's hold. */
async function natsState() {
  const streams = [];
  for await (const s of jsm.streams.list()) {
    const consumers = [];
    for await (const c of jsm.consumers.list(s.config.name))
      consumers.push({ name: c.name, config: c.config, delivered: c.delivered });
    streams.push({ name: s.config.name, config: s.config, messages: s.state.messages, consumers });
  }
  return streams.sort((a, b) => a.name.localeCompare(b.name));
}

beforeAll(async () => {
  jsm = await jetstreamManager(t.nc);
  await provisionStreams(jsm, {
    duplicateWindowMs: cfg.NATS_DUPLICATE_WINDOW_MS,
    replicas: cfg.NATS_STREAM_REPLICAS,
    ackWaitMs: cfg.INBOX_ACK_WAIT_MS,
    maxAckPending: cfg.INBOX_MAX_ACK_PENDING,
  });
});

describe('recognition-core conformance', () => {
  it('passes against the reference service, check by check, and touches none of the core streams', async () => {
    const before = await natsState();
    const r = await runCli(
      [
        'conformance',
        '--service',
        'tabular-parser',
        '--ack-wait',
        '2000',
        '--',
        process.execPath,
        CLI_BIN,
        'service',
        'tabular-parser',
        '--weights',
        'done=1',
        '--delay',
        '300',
      ],
      { NATS_URL: t.nats.url },
      60_000,
    );
    expect(r.code, r.output).toBe(0);
    for (const name of CONFORMANCE_CHECKS)
      expect(
        r.stdout.some((l) => l.startsWith(`PASS ${name} `)),
        `${name} in\n${r.output}`,
      ).toBe(true);
    expect(r.stdout.at(-1)).toBe(`tabular-parser: all ${CONFORMANCE_CHECKS.length} checks passed`);
    expect(await natsState()).toEqual(before);
  });

  it('exits 1 naming the check against a service that never acks', async () => {
    const r = await runCli(
      [
        'conformance',
        '--service',
        'tabular-parser',
        '--ack-timeout',
        '2000',
        '--ack-wait',
        '2000',
        '--',
        process.execPath,
        BROKEN,
        'never-acks',
      ],
      { NATS_URL: t.nats.url },
      60_000,
    );
    expect(r.code, r.output).toBe(1);
    expect(
      r.stdout.some((l) => l.startsWith('FAIL ack-deadline ')),
      r.output,
    ).toBe(true);
    expect(r.stdout).toContain('tabular-parser: 1 of 7 checks failed: ack-deadline');
  });

  it.each([
    // Its answer to an invalid job message has a random id too.
    ['random-ids', ['stable-msg-ids', 'invalid-job']],
    ['drops-traceparent', ['traceparent']],
    ['schema-invalid', ['result-schema']],
    ['other-service', ['service-name']],
  ] as const)('fails against a service that %s, naming %j and only those', async (mode, failing) => {
    const report = await runConformance({
      nats: t.nc,
      natsUrl: t.nats.url,
      service: 'tabular-parser',
      command: [process.execPath, BROKEN, mode],
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
      ackTimeoutMs: 5_000,
      resultTimeoutMs: 10_000,
      ackWaitMs: 2_000,
    });
    expect(report.ok).toBe(false);
    expect(
      report.checks.filter((c) => !c.ok).map((c) => c.name),
      JSON.stringify(report.checks, null, 2),
    ).toEqual(failing);
  });
});
