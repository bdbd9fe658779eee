/**
 * The unlocked planner: each item's unlocked decision (`decideUnlocked`), and the write that
 * applies them all where every job still is as they assumed, or nothing, with the outcomes it
 * makes once the write has returned its rows. Pure; `applyUnlocked.ts` sends the write.
 */
import { decideUnlocked, type JobState, type StepItem } from '../../machines/index.js';
import { InconsistencyError } from '../errors.js';
import { claimedFileId, type ResultObjectRule } from '../messages/resultObject.js';
import { collectEffects, noEffects, registeredObjectOf, type StepOutcome } from './effects.js';
import { statusBits, unlockedWrite, type WrittenRow } from './write.js';

/** An unlocked decision's job: found by id, not at an address it was read at. */
const NOT_READ = { address: null, version: null } as const;

/** A decided item's outcome. */
type DecidedOutcome = Exclude<Extract<StepOutcome, { fileId: string }>, { decision: 'object_not_owned' }>;

/**
 * The unlocked path's write, and the outcomes it makes once the write has returned its rows. It
 * holds only the write's parameters and what the outcomes need, so that a batch's events and
 * decisions are garbage before its write is sent: what a batch holds while its write runs lives
 * through V8's young-generation collections, each of which copies it.
 */
export interface UnlockedWrite {
  params: unknown[];
  /**
   * One outcome per item, from the rows the write returned; null when the write found a job not as
   * assumed, and wrote nothing.
   */
  outcomes(rows: readonly WrittenRow[]): StepOutcome[] | null;
}

/**
 * The unlocked path's plan for `items`: each item's unlocked decision, and the write that applies
 * them all where every job still is as they assumed, or nothing. A result's object must
 * be in the results bucket (`rule`) at `results/<file_id>/<job_id>/…`; the write checks that
 * `<file_id>` is the job's file, and writes nothing of a batch one of whose objects `s3_object`
 * holds already (a serialization failure, after which the locked path decides). Null when an
 * item has no unlocked decision, names a job another item names too, or names an object the key
 * alone shows is not its job's: only a decision on the job's row will do then (the locked path).
 */
export function planUnlocked(items: readonly StepItem[], rule?: ResultObjectRule): UnlockedWrite | null {
  const written = new Map<string, JobState>();
  const current = new Map<string, JobState>();
  const at = new Map<string, { address: null; version: null }>();
  // Per item, in order: what its outcome takes from its decision, the statuses it assumes (as
  // bits) and the service; not the event, nor the context the decision left (see UnlockedWrite).
  const decided: Array<Omit<DecidedOutcome, 'fileId' | 'from'>> = [];
  const statuses: number[] = [];
  const targets: string[] = [];
  /** Per item: the file id its result object's key names, or null without one. */
  const resultFiles: Array<string | null> = [];
  const fx = noEffects();
  for (const item of items) {
    if (current.has(item.jobId)) return null;
    const unlocked = decideUnlocked(item.event);
    if (!unlocked) return null;
    const d = unlocked.decision;
    const object = registeredObjectOf(d);
    let resultFile: string | null = null;
    if (object) {
      if (!rule)
        throw new Error('a result object is registered only against the results bucket: give the rule');
      resultFile = claimedFileId(object, item.jobId, rule);
      if (resultFile === null) return null;
    }
    resultFiles.push(resultFile);
    const targetService = unlocked.assumed.context.targetService;
    written.set(item.jobId, unlocked.assumed);
    current.set(item.jobId, { status: d.to, context: d.context });
    at.set(item.jobId, NOT_READ);
    decided.push({
      jobId: item.jobId,
      targetService,
      event: item.event.type,
      decision: d.decision,
      to: d.to,
      reason: d.reason,
    });
    statuses.push(statusBits(unlocked.statuses));
    targets.push(targetService);
    collectEffects(fx, item.jobId, item.jobId, d, null);
  }
  const w = unlockedWrite(fx, { written, current, at }, { statuses, targets, resultFiles });
  // An unlocked decision is applied: it records a transition, so each job has a row in the write,
  // in the order of the items (the assumptions' order).
  if (!w || w.jobIds.length !== items.length)
    throw new InconsistencyError('an unlocked decision must write its job: it is applied');
  return {
    params: w.params,
    outcomes(rows) {
      const byId = new Map<string, WrittenRow>();
      for (const r of rows) if (r.id !== null) byId.set(r.id, r);
      if (byId.size === 0) return null;
      return decided.map((d) => {
        const row = byId.get(d.jobId);
        if (!row?.prior_status || !row.file_id)
          throw new InconsistencyError(`the write returned no row of job ${d.jobId}`);
        return {
          jobId: d.jobId,
          fileId: row.file_id,
          targetService: d.targetService,
          event: d.event,
          decision: d.decision,
          from: row.prior_status,
          to: d.to,
          reason: d.reason,
        };
      });
    },
  };
}
