/**
 * `recognition-core simulate <scenario>`: on each example scenario, the printed trace is
 * the one the machine predicts. The command runs in-process (commander, stdout captured); every
 * step of the parsed `--json` trace is checked against `decide()` applied to the state the
 * previous step left.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Command } from 'commander';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { decide, type JobEvent, type JobState } from '../../machines/index.js';
import { registerStatechartsCommands } from '../../workshop/cli/statecharts.js';
import { rowToJobState } from '../../src/db/jobRow.js';
import { defaultVisualizationsDir } from '../../workshop/statecharts/generate.js';
import { startingRow, type Trace } from '../../workshop/statecharts/scenario.js';
import { loadScenario, parseScenario } from '../../workshop/statecharts/scenarioFile.js';

const scenarioDir = join(defaultVisualizationsDir(), 'scenarios');
const scenarios = readdirSync(scenarioDir)
  .filter((f) => f.endsWith('.json'))
  .sort();

/** Run the CLI in-process; returns what it wrote to stdout, or the error it threw. */
async function cli(...args: string[]): Promise<{ stdout: string; error: unknown }> {
  const chunks: string[] = [];
  const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
    chunks.push(typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8'));
    return true;
  });
  const program = new Command('recognition-core').exitOverride();
  registerStatechartsCommands(program);
  let error: unknown = null;
  try {
    await program.parseAsync(['node', 'recognition-core', ...args]);
  } catch (err) {
    error = err;
  } finally {
    spy.mockRestore();
  }
  return { stdout: chunks.join(''), error };
}

/** A trace event back into a machine event: ISO dates become Dates again. */
function toEvent(e: Record<string, unknown>): JobEvent {
  return { ...e, now: new Date(e['now'] as string) } as JobEvent;
}

afterEach(() => vi.restoreAllMocks());

describe('simulate', () => {
  it('has the six example scenarios', () => {
    expect(scenarios).toEqual([
      'error.json',
      'happy-path.json',
      'impostor.json',
      'late-result-after-timeout.json',
      'publish-retries-to-dlq.json',
      'redelivery.json',
    ]);
  });

  it.each(scenarios)('%s: the --json trace is what decide() predicts, step by step', async (file) => {
    const path = join(scenarioDir, file);
    const scenario = await loadScenario(path);
    const { stdout, error } = await cli('simulate', path, '--json');
    expect(error).toBeNull();
    const trace = JSON.parse(stdout) as Trace;

    let state: JobState = rowToJobState(startingRow(scenario), scenario.file_is_current);
    expect(trace.start.status).toBe(state.status);
    expect(trace.steps).toHaveLength(scenario.events.length);
    for (const step of trace.steps) {
      if (step.decision === 'quarantined') {
        expect(step.from).toBe(state.status);
        expect(step.to).toBe(state.status);
        // Quarantined by the decoder (no event), or rejected by the machine (from another service).
        if (step.event) {
          const predicted = decide(state, toEvent(step.event));
          expect(predicted).toMatchObject({ decision: 'rejected', reason: step.reason, to: state.status });
          expect(step.quarantine).toEqual({
            reason: 'SERVICE_MISMATCH',
            details: expect.objectContaining({
              expected: state.context.targetService,
              got: (step.event['service'] as { name: string }).name,
            }),
          });
        }
        continue;
      }
      const predicted = decide(state, toEvent(step.event!));
      expect(
        { from: step.from, to: step.to, decision: step.decision, reason: step.reason },
        `step ${step.index}`,
      ).toEqual({
        from: predicted.from,
        to: predicted.to,
        decision: predicted.decision,
        reason: predicted.reason,
      });
      expect(step.effects).toEqual(JSON.parse(JSON.stringify(predicted.effects)));
      state = { status: predicted.to, context: predicted.context };
    }
    expect(trace.final.status).toBe(state.status);

    // The scenario's own expectations (written by hand) hold too.
    expect(trace.unmet).toEqual([]);
    expect(trace.steps.map((s) => s.to)).toEqual(scenario.expect?.statuses);
    expect(trace.steps.map((s) => s.decision)).toEqual(scenario.expect?.decisions);
  });

  it.each(scenarios)(
    '%s: the readable trace names each event, guard, from → to, effects and decision',
    async (file) => {
      const path = join(scenarioDir, file);
      const { stdout, error } = await cli('simulate', path);
      expect(error).toBeNull();
      const { stdout: json } = await cli('simulate', path, '--json');
      const trace = JSON.parse(json) as Trace;
      const blocks = stdout.split('\n\n').slice(1);
      trace.steps.forEach((s, i) => {
        const block = blocks[i]!;
        expect(block).toMatch(new RegExp(`^${s.index}\\. `));
        expect(block).toContain(`   ${s.from} → ${s.to}`);
        expect(block).toContain(`decision:  ${s.decision}`);
        if (s.event) expect(block).toContain(`event:     ${String(s.event['type'])}`);
        if (s.guard?.name) expect(block).toContain(`${s.guard.name} ✓`);
        if (s.effects.some((e) => e.type === 'recordTransition')) expect(block).toContain('log transition');
      });
      expect(stdout.trimEnd().split('\n').at(-1)).toBe(`end: ${trace.final.status}`);
    },
  );

  it('fails (exit 1) when the expectations are not met, naming them', async () => {
    const scenario = parseScenario({
      name: 'wrong',
      job: { status: 'published' },
      events: [{ tick: 'deadline', at: '+1m' }],
      expect: { statuses: ['timeout'] },
    });
    expect(scenario.events).toHaveLength(1);
    const { writeFile, mkdtemp } = await import('node:fs/promises');
    const { tmpdir } = await import('node:os');
    const path = join(await mkdtemp(join(tmpdir(), 'rc-scenario-')), 'wrong.json');
    await writeFile(path, JSON.stringify(scenario));
    const { stdout, error } = await cli('simulate', path);
    expect(stdout).toContain('EXPECTATION NOT MET: statuses: expected timeout, got published');
    expect((error as Error).name).toBe('CheckFailed');
  });

  it('refuses an invalid scenario with every problem and its path', () => {
    expect(() =>
      parseScenario({
        name: 'x',
        job: { status: 'nope' },
        events: [{ tick: 'now' }, { at: 'soon', publish: 'accepted' }],
      }),
    ).toThrow(/job\.status.*events\.0.*events\.1\.at/);
  });
});
