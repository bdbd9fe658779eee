/**
 * A job's recorded history as an inspector run: its `recognition_job_transition` rows, oldest
 * first, each as the event that was applied and the status it led to. Pure.
 */
import type { TransitionRow } from '../db/schema.js';
import type { InspectionRun } from './inspector.js';

/**
 * The run of job `jobId` from its transition rows (oldest first). It starts in the first row's
 * `from_status` (or `currentStatus` when the job has no transition yet).
 */
export function historyRun(
  jobId: string,
  rows: readonly TransitionRow[],
  currentStatus: string,
): InspectionRun {
  const first = rows[0];
  return {
    sessionId: jobId,
    start: { value: first ? first.from_status : currentStatus, context: { job_id: jobId } },
    steps: rows.map((r) => {
      const at = r.at instanceof Date ? r.at.toISOString() : String(r.at);
      const recorded = { transition_id: r.id, at, msg_id: r.msg_id, detail: r.detail };
      return {
        event: { ...r.detail, type: r.event, msgId: r.msg_id, at },
        value: r.to_status,
        context: { job_id: jobId, from: r.from_status, ...recorded },
      };
    }),
  };
}
