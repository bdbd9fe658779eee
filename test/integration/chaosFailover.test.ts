/**
 * The short failover and switchover scenarios (test/chaos/run.ts --scenario NAME --short) as part
 * of `npm test`: PostgreSQL under Patroni (two members, synchronous replication, etcd) behind
 * HAProxy, three daemons and the reference service under the chaos load; the primary is SIGKILLed
 * (failover) or handed over with `patronictl switchover`. Every common invariant and the
 * scenario's own must hold: nothing applied lost, nothing applied twice, no valid envelope
 * quarantined, every process stopping cleanly. The figures row is printed, not asserted (its
 * times depend on the machine). The harness installs Patroni, etcd and HAProxy when they are
 * missing (scripts/ensure-patroni.sh).
 */
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CHAOS_HARNESS, runChaosHarness } from '../helpers/chaosHarness.js';

const SEED = 42;

/** The figures row of a scenario: its cells by column name. */
function figuresRow(output: string, scenario: string): Record<string, string> {
  const lines = output.split('\n');
  const header = lines.find((l) => l.startsWith('| scenario |'));
  const row = lines.find((l) => l.startsWith(`| ${scenario} (short) |`));
  expect(header, output).toBeDefined();
  expect(row, output).toBeDefined();
  const cells = (l: string) =>
    l
      .split('|')
      .slice(1, -1)
      .map((c) => c.trim());
  const names = cells(header!);
  const values = cells(row!);
  return Object.fromEntries(names.map((n, i) => [n, values[i] ?? '']));
}

describe.each([
  { scenario: 'failover', fault: /SIGKILL primary m\d/ },
  { scenario: 'switchover', fault: /switchover m\d → m\d/ },
])('chaos $scenario (short)', ({ scenario, fault }) => {
  it(`seed ${SEED}: every invariant holds across the primary change`, async () => {
    expect(existsSync(CHAOS_HARNESS), 'the harness is not built: run `npm run build`').toBe(true);
    const { code, output } = await runChaosHarness(
      ['--scenario', scenario, '--short', '--seed', String(SEED)],
      330_000,
    );
    const verdicts = output.split('\n').filter((l) => /^(PASS|FAIL) /.test(l));
    expect(
      verdicts.filter((l) => l.startsWith('FAIL')),
      output,
    ).toEqual([]);
    expect(verdicts.length, output).toBeGreaterThanOrEqual(10);
    expect(output).toContain(`PASS ${scenario}: the fault script ran to its end: yes`);
    expect(output).toContain(`PASS ${scenario}: no applied envelope lost, none applied twice`);
    // No valid envelope quarantined: a read-only or shut-down connection is retried, not final.
    expect(output).toMatch(
      /PASS every invalid message quarantined exactly once: .* 0 valid ones quarantined/,
    );
    expect(code, output).toBe(0);
    const row = figuresRow(output, scenario);
    expect(row['faults'], output).toMatch(fault);
    expect(row['lost'], output).toBe('0');
    expect(row['doubled'], output).toBe('0');
    expect(Number(row['envelopes']), output).toBeGreaterThan(0);
  }, 360_000);
});
