/**
 * `statecharts` (write or check `visualizations/`) and `simulate <scenario>` (run a scenario
 * through the pure machine, optionally into the Stately inspector). Neither needs a service.
 */
import { resolve } from 'node:path';
import type { Command } from 'commander';
import type { JobStatus } from '../../machines/statuses.js';
import type { InspectionRun } from '../../src/statecharts/inspector.js';
import { defaultVisualizationsDir } from '../statecharts/paths.js';
import type { Trace } from '../statecharts/scenario.js';
import { inspectOptions, type InspectOptions } from '../../src/cli/plumbing.js';

/** Exit code of `statecharts --check` when a file is stale, and of `simulate` when `expect` fails. */
export class CheckFailed extends Error {
  override name = 'CheckFailed';
}

/** The scenario's run, as the inspector shows it: the job row's columns at each step. */
export function scenarioRun(trace: Trace, startRow: Record<string, unknown>): InspectionRun {
  let row = { ...startRow };
  const steps: InspectionRun['steps'] = [];
  for (const s of trace.steps) {
    row = { ...row, ...s.changes };
    const event = s.event
      ? ({ ...s.event } as InspectionRun['steps'][number]['event'])
      : { type: 'QUARANTINED', reason: s.quarantine?.reason ?? null, input: s.input };
    steps.push({ event, value: s.to, context: { ...row, decision: s.decision, reason: s.reason } });
  }
  return {
    sessionId: `simulate:${trace.scenario}`,
    start: { value: trace.start.status as JobStatus, context: { ...startRow } },
    steps,
  };
}

export function registerStatechartsCommands(program: Command): void {
  program
    .command('statecharts')
    .description(
      'write the statecharts generated from the machine (visualizations/); --check fails when they are stale',
    )
    .option('--out <dir>', 'output folder', defaultVisualizationsDir())
    .option('--check', 'regenerate in memory and exit 1 naming every committed file that differs')
    .action(async (o: { out: string; check?: boolean }) => {
      const { findStaleFiles, generateStatecharts, writeStatecharts } =
        await import('../statecharts/generate.js');
      const dir = resolve(o.out);
      const files = await generateStatecharts();
      if (o.check) {
        const stale = await findStaleFiles(dir, files);
        if (stale.length > 0) {
          for (const s of stale) {
            process.stderr.write(
              `stale: ${resolve(dir, s.name)} ${s.problem === 'missing' ? 'is missing' : `differs from the machine (first at line ${s.line})`}\n`,
            );
          }
          throw new CheckFailed('the statecharts are stale: run `npm run statecharts` and commit the result');
        }
        process.stdout.write(`statecharts are fresh (${Object.keys(files).length} files in ${dir})\n`);
        return;
      }
      const written = await writeStatecharts(dir, files);
      for (const path of written) process.stdout.write(`wrote ${path}\n`);
    });

  inspectOptions(
    program
      .command('simulate <scenario>')
      .description(
        'run a scenario file (visualizations/scenarios/README.md) through the pure machine and print the trace',
      )
      .option('--json', 'print the trace as JSON'),
  ).action(async (file: string, o: InspectOptions & { json?: boolean }) => {
    const { loadScenario } = await import('../statecharts/scenarioFile.js');
    const { runScenario, startingRow } = await import('../statecharts/scenario.js');
    const { formatTrace } = await import('../statecharts/formatTrace.js');
    const scenario = await loadScenario(file);
    const trace = runScenario(scenario);
    process.stdout.write(o.json ? JSON.stringify(trace, null, 2) + '\n' : formatTrace(trace));
    if (o.inspect) {
      const startRow = JSON.parse(JSON.stringify(startingRow(scenario))) as Record<string, unknown>;
      const log = (line: string) => (o.json ? process.stderr : process.stdout).write(line + '\n');
      const { sendToInspector } = await import('../../src/cli/inspect.js');
      await sendToInspector(scenarioRun(trace, startRow), o, log);
    }
    if (trace.unmet.length)
      throw new CheckFailed(`the scenario's expectations are not met: ${trace.unmet.join('; ')}`);
  });
}
