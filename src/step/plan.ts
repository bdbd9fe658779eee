/**
 * The pure part of the step: deciding a batch's events against the rows it read (or, on the
 * unlocked path, for the states their jobs are expected to be in), and turning the decisions into
 * the write statement's parameters. No I/O; the caller sends the writes.
 */
import {
  WRITE_CLOCK,
  decide,
  decideExpected,
  JOB_STATUSES,
  type JobDecision,
  type JobEffects,
  type JobEvent,
  type JobEventInput,
  type JobState,
  type JobStatus,
} from '../../machines/index.js';
import { CONTEXT_COLUMNS, assignedColumns, rowToReadState, timeOf } from '../db/jobRow.js';
import { InconsistencyError } from '../errors.js';
import {
  claimedFileId,
  objectKey,
  resultObjectBreach,
  resultObjectDetails,
  type RegisteredObject,
  type ResultObjectBreach,
  type ResultObjectDetails,
  type ResultObjectRule,
  type ResultOwner,
} from '../messages/resultObject.js';
import { arrayLiteral, type ArrayElement } from './arrayLiteral.js';
import {
  WRITE_PARAMETERS,
  WRITE_PARTS,
  type StepRow,
  type WritePart,
  type WrittenRow,
} from './statements.js';

/** One event for one job. */
export interface StepItem {
  jobId: string;
  event: JobEventInput;
}

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
 * transition details, the count of jobs, whether the statement returns their new addresses, and
 * the expectations it checks: none, on the locked paths; see {@link planExpected}).
 */
export interface PlannedWrite {
  params: unknown[];
  /** The jobs it writes: a later chunk that changes one of them again needs its new address. */
  jobIds: string[];
}

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

/** The effects of a run of decided events, as rows for the write statement. */
interface Effects {
  objects: Map<string, { jobId: string } & JobEffects['registerResultObject']>;
  /** By file ({@link collectEffects}): each file's last change, with the job that made it. */
  files: Map<string, { job_id: string; status: string; error_code: string | null }>;
  transitions: TransitionRow[];
  /** Jobs an event was decided for in this run. */
  touched: Set<string>;
  /** Jobs with an effect to write (an object, a file change, a transition) in this run. */
  effected: Set<string>;
}

interface TransitionRow {
  job_id: string;
  from_status: string | null;
  to_status: string;
  event: string;
  msg_id: string | null;
  detail: unknown;
}

/** The expectations the locked paths' writes check: none, their rows are locked and read already. */
const NO_EXPECTATIONS = [null, null, null, null] as const;

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
      const w = writeParams(chunk.effects, { written, current, at });
      if (!w) return null;
      if (laterChunks) for (const id of w.jobIds) unsettled.add(id);
      return { ...w, params: [...w.params, laterChunks, ...NO_EXPECTATIONS] };
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
 * Step 2 for `items`: decide each in order against `current` (updated), appending to `outcomes`.
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

/** The object a decision registers, if any. */
function registeredObjectOf(d: JobDecision): JobEffects['registerResultObject'] | undefined {
  for (const effect of d.effects) if (effect.type === 'registerResultObject') return effect.params;
  return undefined;
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

function noEffects(): Effects {
  return { objects: new Map(), files: new Map(), transitions: [], touched: new Set(), effected: new Set() };
}

/**
 * Add one decision's effects for job `jobId` to `fx`. `fileKey` tells the job's file apart from
 * the batch's other files (its id; the job's, where each job has a file of its own); the
 * transition row's `from_status` is `from` (null: the status the write locks the job in).
 */
function collectEffects(
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

/** What {@link writeParams} compares with and where it finds the rows. */
interface WriteContext {
  /** Each job's state as last written; updated. */
  written: Map<string, JobState>;
  current: ReadonlyMap<string, JobState>;
  /** Each job's address and version (null for a job the write locks by id). */
  at: ReadonlyMap<string, { address: string | null; version: string | null }>;
}

/** An empty array per column of `part`. */
function columnsOf<P extends WritePart>(part: P): Record<keyof (typeof WRITE_PARAMETERS)[P], ArrayElement[]> {
  const out = {} as Record<string, ArrayElement[]>;
  for (const c of Object.keys(WRITE_PARAMETERS[part])) out[c] = [];
  return out as Record<keyof (typeof WRITE_PARAMETERS)[P], ArrayElement[]>;
}

/** The time {@link element} formatted last, and its text: most times of a batch are its clock. */
let lastTime = NaN;
let lastIso = '';

/**
 * A value as a typed array's element: times as ISO strings (the clock of an expected decision as
 * `now`), documents as JSON.
 */
function element(v: unknown): ArrayElement {
  if (v === null || v === undefined) return null;
  // PostgreSQL reads the time `now` as its transaction's clock.
  if (v === WRITE_CLOCK) return 'now';
  if (typeof v === 'string' || typeof v === 'number') return v;
  if (v instanceof Date) {
    if (v.getTime() !== lastTime) {
      lastTime = v.getTime();
      lastIso = v.toISOString();
    }
    return lastIso;
  }
  return JSON.stringify(v);
}

/**
 * The text columns whose values come from a small set, the same from job to job: statuses and
 * names ({@link arrayLiteral}'s `repeating`).
 */
const REPEATING = {
  objects: new Set(['bucket', 'created_by']),
  jobs: new Set([
    'status',
    'service_name',
    'service_version',
    'error_code',
    'result_schema_version',
    'result_bucket',
  ]),
  files: new Set(['status', 'error_code']),
  transitions: new Set(['from_status', 'to_status', 'event']),
} satisfies { [P in WritePart]: ReadonlySet<keyof (typeof WRITE_PARAMETERS)[P]> };

/**
 * Each part's arrays as array literals of their types, in the order of {@link WRITE_PARAMETERS};
 * an array of nulls only as null, which the statement reads the same (its functions unnest the
 * arrays side by side and give a missing element as null) without PostgreSQL parsing an element.
 * Each part has an array that holds no null (the objects' buckets, the jobs' statuses, the files'
 * and transitions' jobs), so its rows are still counted.
 */
function literalsOf(part: WritePart, columns: Record<string, ArrayElement[]>): Array<string | null> {
  const types = WRITE_PARAMETERS[part] as Record<string, string>;
  const repeating: ReadonlySet<string> = REPEATING[part];
  return Object.keys(types).map((c) => {
    const values = columns[c]!;
    return values.every((v) => v === null) ? null : arrayLiteral(types[c]!, values, repeating.has(c));
  });
}

/**
 * Step 3's parameters for `fx`: each touched job whose state changed or that has an effect, with
 * its status and the columns the machine assigned it since its last write (the mask `assigned`;
 * the other elements are null and the statement leaves those columns as they are); or null when
 * there is nothing to write.
 */
function writeParams(fx: Effects, ctx: WriteContext): PlannedWrite | null {
  const jobs = columnsOf('jobs');
  // The context columns' arrays by position (bit i of the mask is CONTEXT_COLUMNS[i]).
  const contextArrays = CONTEXT_COLUMNS.map(([column]) => jobs[column]);
  const jobIds: string[] = [];
  /** Each written job's place among the job rows, from 1: file changes and transitions name it so. */
  const places = new Map<string, number>();
  for (const id of fx.touched) {
    const after = ctx.current.get(id)!;
    const before = ctx.written.get(id)!;
    const assigned = assignedColumns(before, after);
    ctx.written.set(id, after);
    if (assigned === 0 && before.status === after.status && !fx.effected.has(id)) continue;
    const where = ctx.at.get(id)!;
    jobs.ctid.push(where.address);
    jobs.version.push(where.version);
    jobs.status.push(after.status);
    jobs.assigned.push(assigned);
    for (let i = 0; i < contextArrays.length; i++) {
      contextArrays[i]!.push(assigned & (1 << i) ? element(after.context[CONTEXT_COLUMNS[i]![1]]) : null);
    }
    // A registered result object: the statement resolves its id (3a) and points the job at it (3b).
    const object = fx.objects.get(id);
    jobs.result_bucket.push(object?.bucket ?? null);
    jobs.result_key.push(object?.key ?? null);
    jobIds.push(id);
    places.set(id, jobIds.length);
  }
  // A job with a file change or a transition has an effect, so it is among the rows written.
  const placeOf = (id: string): number => {
    const place = places.get(id);
    if (place === undefined) throw new Error(`job ${id} has an effect but no row in the write`);
    return place;
  };
  if (jobIds.length === 0 && fx.files.size === 0 && fx.transitions.length === 0 && fx.objects.size === 0)
    return null;
  // One insert row per (bucket, key), in a stable order: concurrent batches take the unique
  // index's locks in the same order. No two results of a batch register one object (the
  // decisions refuse the second), so no job is pointed at an object another job registered.
  const objects = columnsOf('objects');
  const sorted = [...fx.objects.values()].sort(byBucketAndKey);
  for (let i = 0; i < sorted.length; i++) {
    const o = sorted[i]!;
    const next = sorted[i + 1];
    if (next !== undefined && next.bucket === o.bucket && next.key === o.key)
      throw new Error(`two results of a batch register ${o.bucket}/${o.key}`);
    objects.bucket.push(o.bucket);
    objects.key.push(o.key);
    objects.created_by.push(o.createdBy);
  }
  const files = columnsOf('files');
  for (const f of fx.files.values()) {
    files.job.push(placeOf(f.job_id));
    files.status.push(f.status);
    files.error_code.push(f.error_code);
  }
  const transitions = columnsOf('transitions');
  // A batch's results share a few details (status, service, error code): each distinct document
  // goes once, and a row names its place, from 1. Consecutive rows mostly carry the same
  // document: the previous row's place is tried first.
  const details = new Map<string, number>();
  let previous: string | undefined;
  let previousPlace = 0;
  for (const t of fx.transitions) {
    transitions.job.push(placeOf(t.job_id));
    transitions.from_status.push(t.from_status);
    transitions.to_status.push(t.to_status);
    transitions.event.push(t.event);
    transitions.msg_id.push(t.msg_id);
    const detail = element(t.detail);
    if (detail === null) {
      transitions.detail.push(null);
      continue;
    }
    const text = String(detail);
    if (text !== previous) {
      let place = details.get(text);
      if (place === undefined) details.set(text, (place = details.size + 1));
      previous = text;
      previousPlace = place;
    }
    transitions.detail.push(previousPlace);
  }
  const parts: Record<WritePart, Record<string, ArrayElement[]>> = { objects, jobs, files, transitions };
  const params = WRITE_PARTS.flatMap((part) => literalsOf(part, parts[part]));
  const documents = details.size === 0 ? null : arrayLiteral('jsonb', [...details.keys()]);
  return { params: [...params, documents, jobIds.length], jobIds };
}

/** An expected decision's job: found by id, not at an address it was read at. */
const NOT_READ = { address: null, version: null } as const;

/** A decided item's outcome. */
type DecidedOutcome = Exclude<Extract<StepOutcome, { fileId: string }>, { decision: 'object_not_owned' }>;

/**
 * The unlocked path's write, and the outcomes it makes once the write has returned its rows. It
 * holds only the write's parameters and what the outcomes need, so that a batch's events and
 * decisions are garbage before its write is sent: what a batch holds while its write runs lives
 * through V8's young-generation collections, each of which copies it.
 */
export interface ExpectedWrite {
  params: unknown[];
  /**
   * One outcome per item, from the rows the write returned; null when the write found a job not as
   * expected, and wrote nothing.
   */
  outcomes(rows: readonly WrittenRow[]): StepOutcome[] | null;
}

/**
 * The unlocked path's plan: each item's expected decision (`decideExpected`), and the write that
 * applies them all where every job still is as they assumed, or nothing. A result's object must
 * be in the results bucket (`rule`) at `results/<file_id>/<job_id>/…`; the write checks that
 * `<file_id>` is the job's file, and writes nothing of a batch one of whose objects `s3_object`
 * holds already (a serialization failure, after which the locked path decides). Null when an
 * item has no expected decision, names a job another item names too, or names an object the key
 * alone shows is not its job's: only a decision on the job's row will do then (the locked path).
 */
export function planExpected(items: readonly StepItem[], rule?: ResultObjectRule): ExpectedWrite | null {
  const written = new Map<string, JobState>();
  const current = new Map<string, JobState>();
  const at = new Map<string, { address: null; version: null }>();
  // Per item, in order: what its outcome takes from its decision, the statuses it expects (as
  // bits) and the service; not the event, nor the context the decision left (see ExpectedWrite).
  const decided: Array<Omit<DecidedOutcome, 'fileId' | 'from'>> = [];
  const statuses: number[] = [];
  const targets: string[] = [];
  /** Per item: the file id its result object's key names, or null without one. */
  const resultFiles: Array<string | null> = [];
  const fx = noEffects();
  for (const item of items) {
    if (current.has(item.jobId)) return null;
    const expected = decideExpected(item.event);
    if (!expected) return null;
    const d = expected.decision;
    const object = registeredObjectOf(d);
    let resultFile: string | null = null;
    if (object) {
      if (!rule)
        throw new Error('a result object is registered only against the results bucket: give the rule');
      resultFile = claimedFileId(object, item.jobId, rule);
      if (resultFile === null) return null;
    }
    resultFiles.push(resultFile);
    const targetService = expected.assumed.context.targetService;
    written.set(item.jobId, expected.assumed);
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
    statuses.push(statusBits(expected.statuses));
    targets.push(targetService);
    collectEffects(fx, item.jobId, item.jobId, d, null);
  }
  const w = writeParams(fx, { written, current, at });
  // An expected decision is applied: it records a transition, so each job has a row in the write,
  // in the order of the items (the expectations' order).
  if (!w || w.jobIds.length !== items.length)
    throw new InconsistencyError('an expected decision must write its job: it is applied');
  const params = [
    ...w.params,
    true,
    arrayLiteral('uuid', w.jobIds),
    arrayLiteral('integer', statuses),
    arrayLiteral('text', targets, true),
    resultFiles.every((f) => f === null) ? null : arrayLiteral('text', resultFiles),
  ];
  return {
    params,
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

/** Statuses as the write's expectations give them: bit i for `JOB_STATUSES[i]`. */
function statusBits(statuses: readonly JobStatus[]): number {
  let bits = 0;
  for (const s of statuses) bits |= 1 << JOB_STATUSES.indexOf(s);
  return bits;
}

function byBucketAndKey(a: { bucket: string; key: string }, b: { bucket: string; key: string }): number {
  if (a.bucket !== b.bucket) return a.bucket < b.bucket ? -1 : 1;
  return a.key === b.key ? 0 : a.key < b.key ? -1 : 1;
}
