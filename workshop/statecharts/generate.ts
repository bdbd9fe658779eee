/**
 * The generated statecharts in `visualizations/`: produce them from the machine, write them, and
 * tell which committed files are stale.
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { AnyStateMachine } from 'xstate';
import { recognitionJobMachine } from '../../machines/index.js';
import { legalEdges, readMachineGraph } from '../../src/statecharts/machineGraph.js';
import { buildOverview, overviewToDot } from './overview.js';
import { renderSvg, toDot } from '../../src/statecharts/render.js';
import { FULL_SVG, OVERVIEW_SVG, renderMarkdown, renderStatelyFile } from './renderFiles.js';
import { buildStateEventTable } from './stateEventTable.js';

/** The generated files, by name relative to the output folder. */
export const STATECHART_FILES = [
  'recognition-job.md',
  OVERVIEW_SVG,
  FULL_SVG,
  'recognition-job.stately.ts',
] as const;
export type StatechartFile = (typeof STATECHART_FILES)[number];

/** Every generated file's content, from `machine` (the lifecycle machine by default). */
export async function generateStatecharts(
  machine: AnyStateMachine = recognitionJobMachine,
): Promise<Record<StatechartFile, string>> {
  const graph = readMachineGraph(machine);
  const overview = buildOverview(graph);
  return {
    'recognition-job.md': renderMarkdown({
      graph,
      rows: buildStateEventTable(machine),
      edges: legalEdges(machine),
      overview,
    }),
    [OVERVIEW_SVG]: await renderSvg(overviewToDot(overview)),
    [FULL_SVG]: await renderSvg(toDot(graph)),
    'recognition-job.stately.ts': renderStatelyFile(graph),
  };
}

/** Write `files` into `dir` (created if missing); returns the paths written. */
export async function writeStatecharts(dir: string, files: Record<string, string>): Promise<string[]> {
  await mkdir(dir, { recursive: true });
  const written: string[] = [];
  for (const [name, content] of Object.entries(files)) {
    const path = join(dir, name);
    await writeFile(path, content);
    written.push(path);
  }
  return written;
}

/** A committed file that differs from what the machine generates now. */
export interface StaleFile {
  name: string;
  problem: 'missing' | 'differs';
  /** First differing line (1-based), for the message. */
  line?: number;
}

/** The files of `dir` that are missing or differ from `files`; empty when all are fresh. */
export async function findStaleFiles(dir: string, files: Record<string, string>): Promise<StaleFile[]> {
  const stale: StaleFile[] = [];
  for (const [name, expected] of Object.entries(files)) {
    let actual: string;
    try {
      actual = await readFile(join(dir, name), 'utf8');
    } catch {
      stale.push({ name, problem: 'missing' });
      continue;
    }
    if (actual === expected) continue;
    const a = actual.split('\n');
    const e = expected.split('\n');
    let line = 0;
    while (line < Math.max(a.length, e.length) && a[line] === e[line]) line++;
    stale.push({ name, problem: 'differs', line: line + 1 });
  }
  return stale;
}

export { defaultVisualizationsDir } from './paths.js';
