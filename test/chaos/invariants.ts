/**
 * The pure rules the chaos harness (and the property tests) check recorded histories against.
 * Everything here is derived from the lifecycle machine itself (its graph), never restated by hand.
 *
 * Terminology:
 * - a *step* is one `recognition_job_transition` row (or one `recordTransition` effect): `from`,
 *   `event`, `to`;
 * - a *path* is a job's steps in the order they were written.
 */
import {
  ATTEMPT_CREATED_EVENT,
  FILE_STATUS,
  FINAL_JOB_STATUSES,
  isFinalStatus,
  type FileStatus,
  type JobStatus,
} from '../../machines/index.js';
import {
  candidates,
  legalEdges,
  readMachineGraph,
  type MachineGraph,
} from '../../src/statecharts/machineGraph.js';

/** One recorded transition. */
export interface Step {
  from: string;
  event: string;
  to: string;
}

let cachedGraph: MachineGraph | undefined;
let cachedEdges: Set<string> | undefined;

function graph(): MachineGraph {
  cachedGraph ??= readMachineGraph();
  return cachedGraph;
}

function edges(): Set<string> {
  cachedEdges ??= new Set(legalEdges().map((e) => `${e.from}>${e.to}`));
  return cachedEdges;
}

function actionType(a: string | { type: string }): string {
  return typeof a === 'string' ? a : a.type;
}

/**
 * Whether the machine can record `step`: a status change must be one of the machine's legal edges,
 * and some transition the machine would try for (`from`, `event`) must lead to `to` without being
 * a no-change note. (A transition without a target that records, such as a publish retry, keeps
 * the status: `from === to`.)
 */
export function isMachineStep(step: Step): boolean {
  if (step.from !== step.to && !edges().has(`${step.from}>${step.to}`)) return false;
  return candidates(graph(), step.from, step.event).some(
    (t) => (t.target ?? step.from) === step.to && !t.actions.some((a) => actionType(a) === 'noteNoChange'),
  );
}

/** Whether `step` is the creation row of a job created as the next attempt of a failed one. */
function isCreation(step: Step, initial: string): boolean {
  return step.event === ATTEMPT_CREATED_EVENT && step.from === initial && step.to === initial;
}

/**
 * Why `steps` is not a path of the machine from its initial state ending at `status`, or `null`
 * when it is: the first step leaves the initial state (`pending`) or is a retried job's creation
 * row there, each step starts where the previous one ended, each is a step of the machine, no step
 * leaves a final status (a final status may record a step that keeps it: a retry), and the job's
 * current status is where the path ends.
 */
export function pathProblem(steps: readonly Step[], status: string): string | null {
  let at = graph().initial;
  for (const [i, s] of steps.entries()) {
    if (i === 0 && isCreation(s, at)) continue;
    if (s.from !== at) return `step ${i + 1} starts at ${s.from}, but the job was ${at}`;
    if (isFinalStatus(at as JobStatus) && s.to !== at) return `step ${i + 1} leaves the final status ${at}`;
    if (!isMachineStep(s))
      return `step ${i + 1} (${s.from} --${s.event}--> ${s.to}) is not a transition of the machine`;
    at = s.to;
  }
  return at === status ? null : `the path ends at ${at}, but the job's status is ${status}`;
}

/** `a>b c>d …`: a path as one string, for histograms. */
export function pathKey(steps: readonly Step[]): string {
  return steps.length === 0 ? '(none)' : [graph().initial, ...steps.map((s) => s.to)].join(' → ');
}

/** The file status that goes with its current job's status (docs/lifecycle.md). */
export function fileStatusFor(jobStatus: JobStatus): FileStatus {
  switch (jobStatus) {
    case 'pending':
    case 'published':
      return FILE_STATUS.QUEUED;
    case 'processing':
    case 'done':
    case 'needs_check':
      return FILE_STATUS.PROCESSING;
    case 'error':
    case 'timeout':
    case 'dlq':
      return FILE_STATUS.ERROR;
  }
}

/**
 * Why a file does not agree with its current job, or `null`: its status is the one of
 * {@link fileStatusFor}, and its `error_code` is the job's when it is `ERROR`, null otherwise.
 */
export function fileProblem(
  file: { status: string; error_code: string | null },
  job: { status: JobStatus; error_code: string | null },
): string | null {
  const expected = fileStatusFor(job.status);
  if (file.status !== expected) return `file ${file.status}, job ${job.status} (expected file ${expected})`;
  const code = expected === FILE_STATUS.ERROR ? job.error_code : null;
  if (file.error_code !== code) return `file error_code ${String(file.error_code)}, expected ${String(code)}`;
  return null;
}

export { FINAL_JOB_STATUSES, isFinalStatus };
