/**
 * Which console actions a job offers, read from the machine: a retry where the job's status has a
 * `RETRY_REQUESTED` transition that starts the next attempt ({@link NEXT_ATTEMPT_ACTION}) and whose
 * guard holds for what the page knows (whether the job is still its file's current one). The step
 * decides again when the action runs; this only keeps the page from offering what it would refuse.
 * Pure.
 */
import { NEXT_ATTEMPT_ACTION } from '../../machines/index.js';
import { candidates, type MachineGraph } from '../statecharts/machineGraph.js';
import type { ConsoleAction } from './identity.js';

/** What the page knows of a job that the machine's guards read. */
export interface JobFacts {
  status: string;
  fileIsCurrent: boolean;
}

/** The guards the page can evaluate; any other guard is left to the step. */
const GUARDS: Record<string, (facts: JobFacts) => boolean> = {
  fileIsCurrent: (f) => f.fileIsCurrent,
};

/** The job actions the machine allows for a job with `facts` (the console's own word for each). */
export function jobActions(graph: MachineGraph, facts: JobFacts): ConsoleAction[] {
  const retry = candidates(graph, facts.status, 'RETRY_REQUESTED').find(
    (t) =>
      t.actions.some((a) => (typeof a === 'string' ? a : a.type) === NEXT_ATTEMPT_ACTION) &&
      (t.guard === null || (GUARDS[t.guard]?.(facts) ?? true)),
  );
  return retry ? ['retry'] : [];
}

/** The statuses from which the machine starts a next attempt (a bulk retry's choices). */
export function retryableStatuses(graph: MachineGraph): string[] {
  return graph.states
    .map((s) => s.name)
    .filter((status) => jobActions(graph, { status, fileIsCurrent: true }).includes('retry'));
}
