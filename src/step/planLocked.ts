/**
 * The locked planner: a batch decided in order against the rows its read locked and returned,
 * chunk by chunk, each chunk's effects made the write's parameters (`write.ts`). Pure; the caller
 * sends the writes (`decideAndWrite.ts`).
 */
import {
  decide,
  type JobEffects,
  type JobEvent,
  type JobState,
  type StepItem,
} from '../../machines/index.js';
import { rowToReadState, timeOf } from '../db/jobRow.js';
import {
  objectKey,
  resultObjectBreach,
  resultObjectDetails,
  type RegisteredObject,
  type ResultObjectDetails,
  type ResultOwner,
} from '../messages/resultObject.js';
import {
  collectEffects,
  noEffects,
  registeredObjectOf,
  type Effects,
  type ResultObjects,
  type StepOutcome,
} from './effects.js';
import type { StepRow } from './statements.js';
import { lockedWrite, type PlannedWrite, type WrittenRow } from './write.js';

/** A chunk of a batch, decided. */
export interface DecidedChunk {
  /** One per item, in order. */
  outcomes: StepOutcome[];
  effects: Effects;
}

/** A chunk of a batch, decided and planned. */
export interface PlannedChunk {
  outcomes: StepOutcome[];
  /** What to write, or null when the chunk changes nothing. */
  write: PlannedWrite | null;
}

/**
 * Plans a batch chunk by chunk; each chunk is decided on the states the earlier ones left. A
 * chunk's write needs the address and version of each job it changes: a job an earlier write of
 * the batch changed has new ones, known once that write has returned them ({@link moved}).
 */
export interface BatchPlan {
  /** Decide `items` in order (pure but for the plan's own state). */
  decide(items: readonly StepItem[]): DecidedChunk;
  /** Whether planning `chunk`'s write must wait for the rows an earlier write returns. */
  waitsForMoved(chunk: DecidedChunk): boolean;
  /**
   * Plan `chunk`'s write, or null when it changes nothing. With `laterChunks`, the write returns
   * where its jobs stand now, for {@link moved}; the last chunk of a batch needs none of that.
   */
  write(chunk: DecidedChunk, o?: { laterChunks: boolean }): PlannedWrite | null;
  /** Decide and plan a batch's only (or last) chunk. */
  next(items: readonly StepItem[]): PlannedChunk;
  /** Where the jobs a write changed stand now (its returned rows). */
  moved(rows: readonly WrittenRow[]): void;
}

/**
 * Start planning a batch against the rows its read returned. `objects`: what its results' objects
 * are checked against; a batch without one takes no result that registers an object.
 */
export function planBatch(rows: readonly StepRow[], objects?: ResultObjects): BatchPlan {
  /** Each job's state as last written (or read). */
  const written = new Map<string, JobState>();
  /** Each job's state after the events decided so far. */
  const current = new Map<string, JobState>();
  /** Where each job's row stands: its address and version, as read or as last written. */
  const at = new Map<string, { address: string; version: string }>();
  // The database clock, the same in every row of one read.
  const now = rows.length > 0 ? timeOf(rows[0]!.db_now) : undefined;
  for (const row of rows) {
    const state = rowToReadState(row, row.file_is_current);
    written.set(row.id, state);
    current.set(row.id, state);
    at.set(row.id, { address: row.row_address, version: row.version });
  }
  /** Jobs a write has changed whose new address is not known yet. */
  const unsettled = new Set<string>();
  /** The objects this batch's results registered so far, by {@link objectKey}. */
  const claimed = new Map<string, RegisteredObject>();

  const plan: BatchPlan = {
    decide(items) {
      const outcomes: StepOutcome[] = [];
      return { outcomes, effects: decideAll(items, current, now, outcomes, { objects, claimed }) };
    },
    waitsForMoved(chunk) {
      if (unsettled.size === 0) return false;
      for (const id of chunk.effects.touched) if (unsettled.has(id)) return true;
      return false;
    },
    write(chunk, { laterChunks } = { laterChunks: false }) {
      if (plan.waitsForMoved(chunk)) throw new Error('a job of this chunk has moved: wait for moved() first');
      const w = lockedWrite(chunk.effects, { written, current, at }, laterChunks);
      if (w && laterChunks) for (const id of w.jobIds) unsettled.add(id);
      return w;
    },
    next(items) {
      const chunk = plan.decide(items);
      return { outcomes: chunk.outcomes, write: plan.write(chunk) };
    },
    moved(rows) {
      for (const r of rows) {
        if (r.id === null) continue;
        at.set(r.id, { address: r.row_address!, version: r.version! });
        unsettled.delete(r.id);
      }
    },
  };
  return plan;
}

/** The objects a batch's decisions are checked against, and those they registered (updated). */
interface ObjectContext {
  objects: ResultObjects | undefined;
  claimed: Map<string, RegisteredObject>;
}

/**
 * The decision for `items`: decide each in order against `current` (updated), appending to `outcomes`.
 * A result the machine applies whose object is not the job's own is not applied: its job stays as
 * it was for the items after it.
 */
function decideAll(
  items: readonly StepItem[],
  current: Map<string, JobState>,
  now: Date | undefined,
  outcomes: StepOutcome[],
  owned: ObjectContext,
): Effects {
  const fx = noEffects();
  for (const item of items) {
    const state = current.get(item.jobId);
    if (!state || !now) {
      outcomes.push({
        jobId: item.jobId,
        event: item.event.type,
        decision: 'unknown_job',
        from: null,
        to: null,
        reason: null,
      });
      continue;
    }
    // The clock first, then the event's fields (an input event has no clock of its own): V8
    // builds this literal as an object the machine's guards and actions read fast, where
    // `{ ...event, now }`, a clone of the event with a property added after, is read slower.
    const d = decide(state, { now, ...item.event } as JobEvent);
    const object = d.decision === 'applied' ? registeredObjectOf(d) : undefined;
    if (object) {
      const details = objectRefusal(object, state.context, owned);
      if (details) {
        outcomes.push({
          jobId: item.jobId,
          fileId: state.context.fileId,
          targetService: state.context.targetService,
          event: item.event.type,
          decision: 'object_not_owned',
          from: state.status,
          to: state.status,
          reason: details.breach,
          details,
        });
        continue;
      }
      owned.claimed.set(objectKey(object), { bucket_role: 'results', created_by: object.createdBy });
    }
    current.set(item.jobId, { status: d.to, context: d.context });
    outcomes.push({
      jobId: item.jobId,
      fileId: state.context.fileId,
      targetService: state.context.targetService,
      event: item.event.type,
      decision: d.decision,
      from: d.from,
      to: d.to,
      reason: d.reason,
    });
    collectEffects(fx, item.jobId, state.context.fileId, d, d.from);
  }
  return fx;
}

/**
 * Why `object` cannot be the result of `owner`'s job, or null when it can: the rule (bucket and
 * prefix), then whether `s3_object` holds it already or an earlier result of the batch took it.
 */
function objectRefusal(
  object: JobEffects['registerResultObject'],
  owner: ResultOwner,
  { objects, claimed }: ObjectContext,
): ResultObjectDetails | null {
  if (!objects)
    throw new Error('a result object is registered only against the results bucket: give the rule');
  const got = { bucket: object.bucket, key: object.key };
  const breach = resultObjectBreach(got, owner, objects.rule);
  if (breach) return resultObjectDetails(breach, got, owner, objects.rule);
  const key = objectKey(got);
  const registered = objects.registered.get(key) ?? claimed.get(key);
  return registered ? resultObjectDetails('registered', got, owner, objects.rule, registered) : null;
}
