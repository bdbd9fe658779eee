/**
 * The chart is what the database enforces: the legal edges frozen in migration 0002 are exactly the
 * machine's. When this fails, the machine's edges changed: add a migration that rewrites
 * `recognition_job_edge` and the trigger's `WHEN` list (migration 0004 compiled the list into it;
 * never edit an applied one), and point this test at it.
 */
import { describe, expect, it } from 'vitest';
import { JOB_STATUSES } from '../../machines/index.js';
import { LEGAL_EDGES_0002 } from '../../src/db/migrations/0002_legal_edges.js';
import { legalEdges } from '../../src/statecharts/machineGraph.js';

describe('legal edges', () => {
  it("the migration's literal list equals the machine's legalEdges()", () => {
    expect(LEGAL_EDGES_0002.map(([from, to]) => ({ from, to }))).toEqual(legalEdges());
  });

  it('are status changes between known statuses, never a self-loop', () => {
    for (const { from, to } of legalEdges()) {
      expect(JOB_STATUSES).toContain(from);
      expect(JOB_STATUSES).toContain(to);
      expect(from).not.toBe(to);
    }
  });

  it('never leave a final status', () => {
    const finals = ['done', 'needs_check', 'error', 'timeout', 'dlq'];
    expect(legalEdges().filter((e) => finals.includes(e.from))).toEqual([]);
  });
});
