/**
 * The short chaos run (test/chaos/run.ts --short, about a minute) as part of `npm test`: its own
 * PostgreSQL and nats-server, three daemons and the reference service as processes, daemons
 * SIGKILLed every few seconds, one nats-server restart, one PostgreSQL crash; then every invariant
 * must hold. It runs the built harness (`npm test` builds first), with a fixed seed.
 */
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CHAOS_HARNESS, runChaosHarness } from '../helpers/chaosHarness.js';

const SEED = 42;

const INVARIANTS = [
  'transition log is a path of the machine',
  'no job left open after its deadline',
  'at most one result per job, its s3_object once, stored verbatim',
  'every valid envelope applied or decided without change',
  'every invalid message quarantined exactly once',
  'core-inbox drained: everything acked',
  'every file agrees with its current job',
  'processes: no crash; graceful stop exits 0',
];

describe('chaos (short)', () => {
  it(`seed ${SEED}: daemons killed, NATS restarted, PostgreSQL crashed: every invariant holds`, async () => {
    expect(existsSync(CHAOS_HARNESS), 'the harness is not built: run `npm run build`').toBe(true);
    const { code, output } = await runChaosHarness(['--short', '--seed', String(SEED)], 270_000);
    const lines = output.split('\n');
    expect(lines[0]).toMatch(new RegExp(`^chaos seed ${SEED} `));
    const verdicts = lines.filter((l) => /^(PASS|FAIL) /.test(l));
    // Names may hold a colon: match each line against the known names, in order.
    expect(
      verdicts.map((l) => INVARIANTS.find((name) => l.slice(5).startsWith(`${name}: `)) ?? l),
      output,
    ).toEqual(INVARIANTS);
    expect(
      verdicts.filter((l) => l.startsWith('FAIL')),
      output,
    ).toEqual([]);
    expect(code, output).toBe(0);
    expect(output).toMatch(/^result: PASS \(8\/8 invariants hold\)/m);
    // The faults really happened.
    const kills = Number(/faults: (\d+) daemon SIGKILLs/.exec(output)?.[1] ?? 0);
    expect(kills, output).toBeGreaterThanOrEqual(3);
    expect(output).toMatch(/1 nats-server restart, 1 PostgreSQL SIGKILL \+ restart/);
    // And the load did: every quarantine reason, duplicates, results before acks, late results.
    for (const reason of [
      'INVALID_JSON',
      'SCHEMA_INVALID',
      'MISSING_MSG_ID',
      'UNKNOWN_JOB',
      'PAYLOAD_TOO_LARGE',
    ]) {
      expect(output).toMatch(new RegExp(`invalid messages in the stream \\([^)]*${reason} \\d+`));
    }
    expect(output).toMatch(/decisions logged by the inboxes: .*duplicate \d+/);
    expect(output).toMatch(/decisions logged by the inboxes: .*late \d+/);
    expect(output).toMatch(/scripted scenarios: .*result_before_ack \d+/);
  }, 300_000);
});
