/**
 * What a full run leaves behind: `bench/results/latest.json` (every figure of the run, replacing
 * the previous one), one line appended to `bench/results/history.jsonl` (the headline ratios of
 * the run, see {@link HistoryEntry}) and the run's table in `docs/performance.md`, between its
 * markers. Only ratios of one run are comparable across machines; absolute figures are context.
 */
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { BenchReport } from './report.js';
import { headlines, type Headlines } from './report.js';

/** One line of `bench/results/history.jsonl`. */
export interface HistoryEntry {
  date: string;
  commit: string;
  /** Uncommitted changes were present: the figures are of the working tree, not of `commit`. */
  dirty: boolean;
  scale: number;
  /** The machine in one line: cores, memory, Node, PostgreSQL, nats-server. */
  machine: string;
  /** Each headline's ceiling, as the run named it (a ratio means nothing without it). */
  ceilings: Headlines['ceilings'];
  /** Each headline as a ratio to its ceiling of the same run (see bench/README.md for each key). */
  ratios: Headlines['ratios'];
  /** The targets of the run's code, by the same keys, and whether the run met each. */
  targets: Headlines['targets'];
  met: Headlines['met'];
  /** Absolute figures of the run, for context only: they depend on the machine and its load. */
  context: Headlines['context'];
}

/** The machine of a report in one line. */
export function machineLine(r: BenchReport): string {
  const m = r.machine;
  return `${m.cpus} × ${m.cpuModel}, ${m.memoryGiB} GiB; Node ${m.node}; PostgreSQL ${m.postgres}; ${m.natsServer}`;
}

/** The history line of a report. */
export function historyEntry(r: BenchReport): HistoryEntry {
  const h = headlines(r);
  return {
    date: r.date,
    commit: r.commit,
    dirty: r.dirty,
    scale: r.scale,
    machine: machineLine(r),
    ceilings: h.ceilings,
    ratios: h.ratios,
    targets: h.targets,
    met: h.met,
    context: h.context,
  };
}

export const LATEST_START = '<!-- latest-bench:start -->';
export const LATEST_END = '<!-- latest-bench:end -->';

/**
 * `text` with the block between its latest-bench markers replaced by `table` (kept from
 * Prettier, which would realign it on every run); null when the markers are missing.
 */
export function withLatestTable(text: string, table: string): string | null {
  const a = text.indexOf(LATEST_START);
  const b = text.indexOf(LATEST_END);
  if (a < 0 || b < a) return null;
  const block = [
    LATEST_START,
    '<!-- prettier-ignore-start -->',
    'From [`bench/results/latest.json`](../bench/results/latest.json):',
    '',
    table.trimEnd(),
    '<!-- prettier-ignore-end -->',
    '',
  ].join('\n');
  return text.slice(0, a) + block + text.slice(b);
}

/** Write the latest result, append its history line and update the docs' table. */
export function recordRun(
  repoRoot: string,
  report: BenchReport,
  table: string,
  log: (l: string) => void,
): void {
  const dir = join(repoRoot, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'latest.json'), JSON.stringify(report, null, 2) + '\n');
  appendFileSync(join(dir, 'history.jsonl'), JSON.stringify(historyEntry(report)) + '\n');
  const doc = join(repoRoot, 'docs', 'performance.md');
  let updated: string | null = null;
  try {
    updated = withLatestTable(readFileSync(doc, 'utf8'), table);
  } catch {
    // missing: reported below
  }
  if (updated === null) {
    log(`docs/performance.md has no ${LATEST_START} … ${LATEST_END} block: its table is not updated`);
  } else writeFileSync(doc, updated);
  log('wrote bench/results/latest.json, appended bench/results/history.jsonl, updated docs/performance.md');
}
