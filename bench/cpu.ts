/**
 * CPU per event of the machine step's pure part: hydrate (row → state, `resolveState`), transition
 * (`decide()`, xstate's pure `transition()`), row diff (`changedColumns`) — against a plain `switch`
 * making the same decision (bench/switchDecide.ts) with the same row mapping and diff, so the
 * difference is what XState costs. Measured with `process.cpuUsage()` (user + system CPU of this
 * process) over many events after a warm-up; run in a child process of its own.
 */
import { decide, type JobDecision, type JobEvent, type JobState } from '../machines/index.js';
import { changedColumns, rowToJobState } from '../src/db/jobRow.js';
import { sample, type Sample } from './samples.js';
import { switchDecide } from './switchDecide.js';

/** CPU per event, in microseconds. */
export interface CpuResult {
  events: number;
  machineUs: number;
  switchUs: number;
  /** The machine's µs per event for each case of the mix. */
  byCase: Record<string, number>;
  /** When several processes were measured: each one's `machineUs` (the reported one is the median). */
  runsUs?: number[];
}

type DecideFn = (job: JobState, event: JobEvent) => JobDecision;

/** One event through hydrate + transition + diff; returns the number of changed columns (kept live). */
function one(s: Sample, fn: DecideFn): number {
  const before = rowToJobState(s.row, s.fileIsCurrent);
  const d = fn(before, s.event);
  return Object.keys(changedColumns(before, { status: d.to, context: d.context })).length + d.effects.length;
}

function cpuMicros(): number {
  const u = process.cpuUsage();
  return u.user + u.system;
}

function time(samples: readonly Sample[], fn: DecideFn, rounds: number): number {
  let sink = 0;
  const start = cpuMicros();
  for (let r = 0; r < rounds; r++) for (const s of samples) sink += one(s, fn);
  const us = cpuMicros() - start;
  if (sink < 0) throw new Error('unreachable');
  return us / (rounds * samples.length);
}

/** Check that the switch and the machine agree, then time both over `events` events. */
export function measureCpu(events: number): CpuResult {
  const samples = Array.from({ length: 1_000 }, (_, i) => sample(i));
  for (const s of samples) {
    const st = rowToJobState(s.row, s.fileIsCurrent);
    const a = decide(st, s.event);
    const b = switchDecide(st, s.event);
    if (JSON.stringify(a) !== JSON.stringify(b)) {
      throw new Error(
        `switch and machine disagree on "${s.name}":\n${JSON.stringify(a)}\n${JSON.stringify(b)}`,
      );
    }
  }
  const rounds = Math.max(1, Math.round(events / samples.length));
  // Warm-up: let the JIT settle on both paths.
  time(samples, decide, Math.max(1, rounds / 5));
  time(samples, switchDecide, Math.max(1, rounds / 5));
  const machineUs = time(samples, decide, rounds);
  const switchUs = time(samples, switchDecide, rounds);
  const byCase: Record<string, number> = {};
  for (let k = 0; k < 5; k++) {
    const subset = samples.filter((_, i) => i % 5 === k);
    byCase[subset[0]!.name] = time(subset, decide, Math.max(1, Math.round(rounds / 2)));
  }
  return { events: rounds * samples.length, machineUs, switchUs, byCase };
}
