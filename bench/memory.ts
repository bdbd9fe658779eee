/**
 * Memory of the machine step's pure part over a long run: `events` events through hydrate +
 * `decide()` + `changedColumns` (the same mix as the CPU measurement), RSS sampled after 100 000
 * and after 1 000 000 events (scaled). A leak (snapshots, actors or listeners kept alive by xstate,
 * caches growing with job ids) shows as RSS growing with the event count. Run in a child process
 * of its own, so the bench's own allocations do not count. Each sample is taken after a full
garbage collection (`--expose-gc`): RSS then shows what the run retains; the RSS just before that
collection is kept in the JSON too.
 */
import { decide } from '../machines/index.js';
import { changedColumns, rowToJobState } from '../src/db/jobRow.js';
import { sample } from './samples.js';

/** RSS at each checkpoint, in bytes. */
export interface MemoryResult {
  checkpoints: Array<{ events: number; rssBytes: number; heapUsedBytes: number; rssBeforeGcBytes: number }>;
  /** The child's V8 flags (see MEMORY_V8_FLAGS in run.ts). */
  v8Flags?: string[];
  /** The same run with V8's default flags. */
  withDefaultFlags?: MemoryResult;
}

/** Run events through decide + diff, sampling RSS after each count of `checkpoints` (ascending). */
export function measureMemory(checkpoints: readonly number[]): MemoryResult {
  const out: MemoryResult['checkpoints'] = [];
  let sink = 0;
  let i = 0;
  for (const target of checkpoints) {
    for (; i < target; i++) {
      // Distinct job ids on every event, as a real stream has.
      const s = sample(i);
      const before = rowToJobState(s.row, s.fileIsCurrent);
      const d = decide(before, s.event);
      sink += Object.keys(changedColumns(before, { status: d.to, context: d.context })).length;
    }
    const raw = process.memoryUsage();
    // Collect what is garbage now (the child runs with --expose-gc), so the sample shows what is
    // retained, not how far the young generation happened to fill since the last collection.
    (globalThis as { gc?: () => void }).gc?.();
    const m = process.memoryUsage();
    out.push({ events: target, rssBytes: m.rss, heapUsedBytes: m.heapUsed, rssBeforeGcBytes: raw.rss });
  }
  if (sink < 0) throw new Error('unreachable');
  return { checkpoints: out };
}
