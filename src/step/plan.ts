/**
 * The pure part of the step: deciding a batch's events against the rows it read, and turning the
 * decisions into the write statement's mode and parameters. No I/O; the caller sends the writes.
 */
import {
  decide,
  type JobDecision,
  type JobEffects,
  type JobEvent,
  type JobEventInput,
  type JobState,
} from '../../machines/index.js';
import { changedColumns, rowToJobState } from '../db/jobRow.js';
import type { LockedRow, LockedWithFileRow, VersionedRow, WriteMode } from './statements.js';

/** One event for one job. */
export interface StepItem {
  jobId: string;
  event: JobEventInput;
}

/**
 * What happened to one item. `unknown_job` when no job has that id. A decided item names the job's
 * file and its `target_service` as read (what a `rejected` envelope is told apart from).
 */
export type StepOutcome =
  | ({ jobId: string; event: JobEventInput['type'] } & Omit<JobDecision, 'context'> & {
        fileId: string;
        targetService: string;
      })
  | {
      jobId: string;
      event: JobEventInput['type'];
      decision: 'unknown_job';
      from: null;
      to: null;
      effects: [];
      reason: null;
    };

/**
 * How the rows of a batch were read: locked by this transaction (their files too, for the
 * watchdog), or without a lock, each at its version (the unlocked path: one guarded statement).
 */
export type Reading =
  | { locked: 'jobs'; rows: readonly LockedRow[] }
  | { locked: 'jobs and files'; rows: readonly LockedWithFileRow[] }
  | { locked: false; rows: readonly VersionedRow[] };

/** One write statement's worth: which statement, and its parameters. */
export interface PlannedWrite {
  mode: WriteMode;
  params: string[];
}

/** A chunk of a batch, decided. */
export interface PlannedChunk {
  /** One per item, in order. */
  outcomes: StepOutcome[];
  /** What to write, or null when the chunk changes nothing. */
  write: PlannedWrite | null;
}

/** Plans a batch chunk by chunk; each chunk is decided on the states the earlier ones left. */
export interface BatchPlan {
  /** Decide `items` in order and plan their write (pure but for the plan's own state). */
  next(items: readonly StepItem[]): PlannedChunk;
}

/** The effects of a run of decided events, as rows for the write statement. */
interface Effects {
  objects: Map<string, { jobId: string } & JobEffects['registerResultObject']>;
  files: Map<string, { file_id: string; job_id: string; status: string; error_code: string | null }>;
  transitions: Array<Record<string, unknown>>;
  /** Jobs an event was decided for in this run. */
  touched: Set<string>;
  /** Jobs with an effect to write (an object, a file change, a transition) in this run. */
  effected: Set<string>;
}

/** Start planning a batch against the rows `read`. */
export function planBatch(read: Reading): BatchPlan {
  /** Each job's state as last written (or read). */
  const written = new Map<string, JobState>();
  /** Each job's state after the events decided so far. */
  const current = new Map<string, JobState>();
  let now: Date | undefined;
  for (const row of read.rows) {
    now = row.db_now;
    const state = rowToJobState(row, row.file_is_current);
    written.set(row.id, state);
    current.set(row.id, state);
  }
  const versions = read.locked === false ? new Map(read.rows.map((r) => [r.id, r.version])) : undefined;
  // Locked rows stay at their address until this batch updates them (`moved`).
  const jobAddresses =
    read.locked !== false ? new Map(read.rows.map((r) => [r.id, r.row_address])) : undefined;
  const fileAddresses =
    read.locked === 'jobs and files' ? new Map(read.rows.map((r) => [r.file_id, r.file_address])) : undefined;
  /** Jobs and files an earlier write of the batch has (or may have) moved. */
  const moved = new Set<string>();
  const notMoved = (ids: Iterable<string>) => moved.size === 0 || ![...ids].some((id) => moved.has(id));

  return {
    next(items) {
      const outcomes: StepOutcome[] = [];
      const fx = decideAll(items, current, now, outcomes);
      // A row an earlier chunk updated has moved: such a chunk finds its rows by id.
      const jobsAt = jobAddresses !== undefined && notMoved(fx.touched);
      const filesAt = jobsAt && fileAddresses !== undefined && notMoved(fx.files.keys());
      const mode = writeModeOf({ guarded: versions !== undefined, jobsAt, filesAt });
      const params = writeParams(fx, {
        written,
        current,
        versions,
        jobAddresses: jobsAt ? jobAddresses : undefined,
        fileAddresses: filesAt ? fileAddresses : undefined,
        moved,
      });
      return { outcomes, write: params ? { mode, params } : null };
    },
  };
}

/** The statement a chunk is written with. */
function writeModeOf(at: { guarded: boolean; jobsAt: boolean; filesAt: boolean }): WriteMode {
  if (at.guarded) return 'guarded';
  if (at.filesAt) return 'jobsAndFilesAtAddress';
  if (at.jobsAt) return 'jobsAtAddress';
  return 'byId';
}

/** Step 2 for `items`: decide each in order against `current` (updated), appending to `outcomes`. */
function decideAll(
  items: readonly StepItem[],
  current: Map<string, JobState>,
  now: Date | undefined,
  outcomes: StepOutcome[],
): Effects {
  const fx: Effects = {
    objects: new Map(),
    files: new Map(),
    transitions: [],
    touched: new Set(),
    effected: new Set(),
  };
  for (const item of items) {
    const state = current.get(item.jobId);
    if (!state || !now) {
      outcomes.push({
        jobId: item.jobId,
        event: item.event.type,
        decision: 'unknown_job',
        from: null,
        to: null,
        effects: [],
        reason: null,
      });
      continue;
    }
    const d = decide(state, { ...item.event, now } as JobEvent);
    current.set(item.jobId, { status: d.to, context: d.context });
    fx.touched.add(item.jobId);
    outcomes.push({
      jobId: item.jobId,
      fileId: state.context.fileId,
      targetService: state.context.targetService,
      event: item.event.type,
      decision: d.decision,
      from: d.from,
      to: d.to,
      effects: d.effects,
      reason: d.reason,
    });
    for (const effect of d.effects) {
      // The next attempt is an insert this path's write statement does not make.
      if (effect.type === 'createAttempt')
        throw new Error('RETRY_REQUESTED goes through applyRetries, not through the event paths');
      if (effect.type !== 'noteNoChange') fx.effected.add(item.jobId);
      if (effect.type === 'registerResultObject')
        fx.objects.set(item.jobId, { jobId: item.jobId, ...effect.params });
      else if (effect.type === 'setFileStatus') {
        // The last change of a file within the batch wins, as it would one event at a time.
        fx.files.set(state.context.fileId, {
          file_id: state.context.fileId,
          job_id: item.jobId,
          status: effect.params.status,
          error_code: effect.params.errorCode,
        });
      } else if (effect.type === 'recordTransition') {
        fx.transitions.push({
          seq: fx.transitions.length,
          job_id: item.jobId,
          from_status: d.from,
          to_status: d.to,
          event: effect.params.event,
          msg_id: effect.params.msgId,
          detail: effect.params.detail,
        });
      }
    }
  }
  return fx;
}

/** What {@link writeParams} compares with and where it finds the rows. */
interface WriteContext {
  /** Each job's state as last written; updated. */
  written: Map<string, JobState>;
  current: ReadonlyMap<string, JobState>;
  /** The versions the jobs were read at, for a guarded write. */
  versions: ReadonlyMap<string, string> | undefined;
  /** Job id → address, for a chunk that finds its jobs by address. */
  jobAddresses: ReadonlyMap<string, string> | undefined;
  /** File id → address, for a chunk that finds its files by address too. */
  fileAddresses: ReadonlyMap<string, string> | undefined;
  /** Rows an earlier write of the batch has (or may have) moved; every row this write changes is added. */
  moved: Set<string>;
}

/**
 * Step 3's parameters for `fx`: the changed columns of each touched job against what was last
 * written for it, or null when there is nothing to write. Job and file changes carry their rows'
 * addresses when the context has them.
 */
function writeParams(fx: Effects, at: WriteContext): string[] | null {
  const changes: Array<Record<string, unknown>> = [];
  for (const id of fx.touched) {
    const after = at.current.get(id)!;
    const diff: Record<string, unknown> = changedColumns(at.written.get(id)!, after);
    // A registered result object: the statement resolves its id (3a) and points the job at it (3b).
    const object = fx.objects.get(id);
    if (object) diff['result_object'] = { bucket: object.bucket, key: object.key };
    const changed = Object.keys(diff).length > 0;
    // Guarded: every job with something to write is checked at the version it was read at.
    if (at.versions) {
      if (changed || fx.effected.has(id)) changes.push({ id, version: at.versions.get(id), ...diff });
    } else if (changed) {
      changes.push(at.jobAddresses ? { id, ctid: at.jobAddresses.get(id), ...diff } : { id, ...diff });
      at.moved.add(id);
    }
    at.written.set(id, after);
  }
  for (const fileId of fx.files.keys()) at.moved.add(fileId);
  if (changes.length === 0 && fx.files.size === 0 && fx.transitions.length === 0 && fx.objects.size === 0)
    return null;
  // One upsert row per (bucket, key), in a stable order: a row is never affected twice, and
  // concurrent batches take the unique index's locks in the same order.
  const unique = [
    ...new Map([...fx.objects.values()].map((o) => [`${o.bucket}\u0000${o.key}`, o])).values(),
  ].sort(byBucketAndKey);
  const fileAddresses = at.fileAddresses;
  return [
    JSON.stringify(unique.map((o) => ({ bucket: o.bucket, key: o.key, created_by: o.createdBy }))),
    JSON.stringify(changes),
    JSON.stringify(
      [...fx.files.values()].map((f) => (fileAddresses ? { ...f, ctid: fileAddresses.get(f.file_id) } : f)),
    ),
    JSON.stringify(fx.transitions),
    ...(at.versions ? [String(changes.length)] : []),
  ];
}

function byBucketAndKey(a: { bucket: string; key: string }, b: { bucket: string; key: string }): number {
  if (a.bucket !== b.bucket) return a.bucket < b.bucket ? -1 : 1;
  return a.key < b.key ? -1 : 1;
}
