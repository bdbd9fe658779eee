/**
 * What a batch's decisions make, on either path: each item's outcome, and the effects the write
 * turns into rows (result objects, file changes, transitions). Pure.
 */
import type { JobDecision, JobEffects, JobEventInput, JobStatus } from '../../machines/index.js';
import type {
  RegisteredObject,
  ResultObjectBreach,
  ResultObjectDetails,
  ResultObjectRule,
} from '../messages/resultObject.js';

/**
 * What happened to one item. `unknown_job` when no job has that id. `object_not_owned` when the
 * machine would apply a result but its object is not the job's own (outside the results bucket or
 * the job's prefix, or already in `s3_object`): the job stays as it was, and `details` says why.
 * A decided item names the job's file and its `target_service` as read (what a `rejected` envelope
 * is told apart from). Not the decision's effects: the write makes them rows, and an outcome, kept
 * until its envelope is settled, holds no more than its report needs.
 */
export type StepOutcome =
  | ({ jobId: string; event: JobEventInput['type'] } & Omit<JobDecision, 'context' | 'effects'> & {
        fileId: string;
        targetService: string;
      })
  | {
      jobId: string;
      event: JobEventInput['type'];
      decision: 'unknown_job';
      from: null;
      to: null;
      reason: null;
    }
  | {
      jobId: string;
      event: JobEventInput['type'];
      decision: 'object_not_owned';
      from: JobStatus;
      to: JobStatus;
      reason: ResultObjectBreach;
      fileId: string;
      targetService: string;
      details: ResultObjectDetails;
    };

/**
 * What a locked batch checks its results' objects against: the rule (the results bucket), and the
 * objects among them that `s3_object` already holds, read in the transaction that writes.
 */
export interface ResultObjects {
  rule: ResultObjectRule;
  /** By {@link objectKey}. */
  registered: ReadonlyMap<string, RegisteredObject>;
}

/**
 * One write statement's worth: its parameters ({@link WRITE_PARAMETERS}, then the batch's distinct

/** The effects of a run of decided events, as rows for the write statement. */
export interface Effects {
  objects: Map<string, { jobId: string } & JobEffects['registerResultObject']>;
  /** By file ({@link collectEffects}): each file's last change, with the job that made it. */
  files: Map<string, { job_id: string; status: string; error_code: string | null }>;
  transitions: TransitionRow[];
  /** Jobs an event was decided for in this run. */
  touched: Set<string>;
  /** Jobs with an effect to write (an object, a file change, a transition) in this run. */
  effected: Set<string>;
}

export interface TransitionRow {
  job_id: string;
  from_status: string | null;
  to_status: string;
  event: string;
  msg_id: string | null;
  detail: unknown;
}

/** The object a decision registers, if any. */
export function registeredObjectOf(d: JobDecision): JobEffects['registerResultObject'] | undefined {
  for (const effect of d.effects) if (effect.type === 'registerResultObject') return effect.params;
  return undefined;
}

/** No effects yet: what a run of decisions starts from. */
export function noEffects(): Effects {
  return { objects: new Map(), files: new Map(), transitions: [], touched: new Set(), effected: new Set() };
}

/**
 * Add one decision's effects for job `jobId` to `fx`. `fileKey` tells the job's file apart from
 * the batch's other files (its id; the job's, where each job has a file of its own); the
 * transition row's `from_status` is `from` (null: the status the write locks the job in).
 */
export function collectEffects(
  fx: Effects,
  jobId: string,
  fileKey: string,
  d: JobDecision,
  from: JobStatus | null,
): void {
  fx.touched.add(jobId);
  for (const effect of d.effects) {
    // The next attempt is an insert this path's write statement does not make.
    if (effect.type === 'createAttempt')
      throw new Error('RETRY_REQUESTED goes through applyRetries, not through the event paths');
    if (effect.type !== 'noteNoChange') fx.effected.add(jobId);
    if (effect.type === 'registerResultObject') fx.objects.set(jobId, { jobId, ...effect.params });
    else if (effect.type === 'setFileStatus') {
      // The last change of a file within the batch wins, as it would one event at a time.
      fx.files.set(fileKey, {
        job_id: jobId,
        status: effect.params.status,
        error_code: effect.params.errorCode,
      });
    } else if (effect.type === 'recordTransition') {
      fx.transitions.push({
        job_id: jobId,
        from_status: from,
        to_status: d.to,
        event: effect.params.event,
        msg_id: effect.params.msgId,
        detail: effect.params.detail,
      });
    }
  }
}
