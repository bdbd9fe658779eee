/**
 * Model-based: the paths come from the machine itself (`xstate/graph`), the expectations from
 * `decide()`, the API the shell really calls. For every simple path through the job's lifecycle
 * over the sample events, replaying its events through `decide()` from a fresh pending job must
 * reach the path's end status step by step, never leave a final status, and log a chain of
 * transitions that are all edges of the machine.
 *
 * The graph is finite because the samples are: every sample event carries a fixed time, publish
 * attempts are bounded by the retry policy, and a vertex is the whole job (status and context), so
 * events that change nothing loop on their vertex and never lengthen a simple path.
 */
import { describe, expect, it } from 'vitest';
import { getShortestPaths, getSimplePaths, toDirectedGraph, type DirectedGraphNode } from 'xstate/graph';
import {
  FINAL_JOB_STATUSES,
  JOB_STATUSES,
  decide,
  isFinalStatus,
  recognitionJobMachine,
  type JobEvent,
  type JobEventType,
  type JobState,
  type JobStatus,
} from '../../machines/index.js';
import { baseContext, sampleEvents, sampleEventsByKind } from '../../workshop/machineSamples.js';

type Snapshot = ReturnType<typeof recognitionJobMachine.transition>;

const EVENTS = sampleEvents();
const traversal = {
  input: baseContext(),
  events: EVENTS,
  serializeState: (snapshot: Snapshot) => JSON.stringify([snapshot.value, snapshot.context]),
};

const simplePaths = getSimplePaths(recognitionJobMachine, traversal);
const shortestPaths = getShortestPaths(recognitionJobMachine, traversal);

/** A path's events, without the `xstate.init` step the graph puts first. */
function eventsOf(path: { steps: Array<{ event: { type: string } }> }): JobEvent[] {
  return path.steps.map((s) => s.event).filter((e): e is JobEvent => e.type !== 'xstate.init');
}
/** The status after each event of a path (the graph's own record of where each step leads). */
function statusesOf(path: { steps: Array<{ event: { type: string }; state: Snapshot }> }): JobStatus[] {
  return path.steps.filter((s) => s.event.type !== 'xstate.init').map((s) => s.state.value as JobStatus);
}

const edge = (from: string, event: string, to: string) => `${from} --${event}--> ${to}`;

/** The machine's edges that record a transition, read from the machine's own graph. */
const RECORDED_EDGES: ReadonlySet<string> = (() => {
  const edges = new Set<string>();
  const visit = (node: DirectedGraphNode) => {
    for (const e of node.edges) {
      const actions = e.transition.actions as ReadonlyArray<string | { type?: unknown }>;
      const records = actions.some((a) => typeof a === 'object' && a.type === 'recordAndSetFile');
      if (records) edges.add(edge(e.source.key, e.label.text, e.target.key));
    }
    node.children.forEach(visit);
  };
  visit(toDirectedGraph(recognitionJobMachine));
  return edges;
})();

interface Replay {
  statuses: JobStatus[];
  recorded: Array<{ from: JobStatus; event: JobEventType; to: JobStatus }>;
}

/** Replays `events` through `decide()` from a fresh pending job. */
function replay(events: readonly JobEvent[]): Replay {
  let job: JobState = { status: 'pending', context: baseContext() };
  const out: Replay = { statuses: [], recorded: [] };
  for (const event of events) {
    const result = decide(job, event);
    for (const effect of result.effects) {
      if (effect.type === 'recordTransition') {
        out.recorded.push({ from: result.from, event: effect.params.event, to: result.to });
      }
    }
    out.statuses.push(result.to);
    job = { status: result.to, context: result.context };
  }
  return out;
}

describe('model-based paths of the job lifecycle', () => {
  it('generates enough paths, and some path reaches every status', () => {
    // One path per reachable job: pending after 0, 1 or 2 failed publishes (3); published and
    // processing after each (3 + 3); from pending, 3 results (9); from published, 3 results, dlq and
    // timeout (15); from processing, 3 results and timeout (12); dlq after the 3rd failure (1).
    expect(simplePaths.length).toBeGreaterThanOrEqual(3 + 3 + 3 + 9 + 15 + 12 + 1);
    const reached = new Set(simplePaths.map((p) => p.state.value));
    expect([...reached].sort()).toEqual([...JOB_STATUSES].sort());
  });

  it('the recorded edges of the machine are exactly the lifecycle of docs/lifecycle.md', () => {
    expect([...RECORDED_EDGES].sort()).toEqual(
      [
        edge('pending', 'PUBLISHED', 'published'),
        edge('pending', 'PUBLISH_FAILED', 'pending'),
        edge('pending', 'PUBLISH_FAILED', 'dlq'),
        edge('published', 'DELIVERY_EXHAUSTED', 'dlq'),
        edge('published', 'ENVELOPE_PROCESSING', 'processing'),
        ...['pending', 'published', 'processing'].flatMap((from) =>
          ['done', 'needs_check', 'error'].map((to) => edge(from, 'ENVELOPE_RESULT', to)),
        ),
        edge('published', 'DEADLINE_PASSED', 'timeout'),
        edge('processing', 'DEADLINE_PASSED', 'timeout'),
        // A failed job's retry keeps its status; the next attempt is a new job.
        ...['error', 'timeout', 'dlq'].map((s) => edge(s, 'RETRY_REQUESTED', s)),
      ].sort(),
    );
  });

  it('every path replays through decide(): same statuses, final kept, a legal chain of transitions', () => {
    const taken = new Set<string>();
    for (const path of simplePaths) {
      const events = eventsOf(path);
      // After the path, every sample event once more: a final status must hold against all of them.
      const { statuses, recorded } = replay([...events, ...EVENTS]);

      expect(statuses.slice(0, events.length)).toEqual(statusesOf(path));
      expect(events.length === 0 ? 'pending' : statuses[events.length - 1]).toBe(path.state.value);

      // A final status holds whatever comes, a retry included.
      const firstFinal = statuses.findIndex((s) => isFinalStatus(s));
      if (firstFinal >= 0) {
        expect(statuses.slice(firstFinal)).toEqual(
          statuses.slice(firstFinal).map(() => statuses[firstFinal]),
        );
      }

      let at: JobStatus = 'pending';
      for (const t of recorded) {
        expect(t.from).toBe(at);
        expect(RECORDED_EDGES).toContain(edge(t.from, t.event, t.to));
        taken.add(edge(t.from, t.event, t.to));
        at = t.to;
      }
      expect(at).toBe(statuses.at(-1));
    }
    expect([...taken].sort()).toEqual([...RECORDED_EDGES].sort());
  });

  it("at the end of every path, another service's ack and result are rejected and change nothing", () => {
    const kinds = sampleEventsByKind();
    for (const path of simplePaths) {
      let job: JobState = { status: 'pending', context: baseContext() };
      for (const event of eventsOf(path)) {
        const result = decide(job, event);
        job = { status: result.to, context: result.context };
      }
      for (const event of [kinds.otherServiceAck, kinds.otherServiceError]) {
        const result = decide(job, event);
        expect(result).toMatchObject({ decision: 'rejected', reason: 'service_mismatch', to: job.status });
        expect(result.context).toEqual(job.context);
      }
    }
  });

  it('the fewest events to reach each status', () => {
    const fewest = new Map<string, number>();
    for (const path of shortestPaths) {
      const status = String(path.state.value);
      const n = eventsOf(path).length;
      fewest.set(status, Math.min(fewest.get(status) ?? Infinity, n));
      expect(replay(eventsOf(path)).statuses.at(-1) ?? 'pending').toBe(status);
    }
    expect(Object.fromEntries([...fewest].sort())).toEqual({
      pending: 0,
      published: 1, // PUBLISHED
      processing: 2, // PUBLISHED, ENVELOPE_PROCESSING
      done: 1, // a result for a pending job counts (the publisher's commit was lost)
      needs_check: 1,
      error: 1,
      timeout: 2, // PUBLISHED, DEADLINE_PASSED
      dlq: 2, // PUBLISHED, DELIVERY_EXHAUSTED (three PUBLISH_FAILED take longer)
    });
    expect(FINAL_JOB_STATUSES.every((s) => fewest.has(s))).toBe(true);
  });
});
