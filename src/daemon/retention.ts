/**
 * Retention: deletes finished jobs (with their transitions) and quarantined messages older than
 * their retention, so the tables hold a window of history. A file's current job and a job that is
 * not final are never deleted. {@link runRetentionPass} is one pass: batches under a retention lock
 * taken without waiting, one short transaction each; the daemon resumes each status's walk where the
 * last pass stopped (docs/operations.md, "Retention").
 */
import { sql, type Kysely, type Transaction } from 'kysely';
import type { FinalJobStatus } from '../../machines/index.js';
import type { Config } from '../config.js';
import {
  RETENTION_CLASSES,
  countExpiredJobs,
  countQuarantined,
  deleteExpiredJobs,
  deleteQuarantined,
  olderThan,
  type FinishedKey,
  type RetentionClass,
} from '../db/retention.js';
import type { Database } from '../db/schema.js';
import type { Logger } from '../logger.js';
import { createPeriodicLoop, type RunControl } from './periodicLoop.js';
import type { Metrics, RETENTION_DELETED_TABLES } from '../metrics.js';

/**
 * Key of the advisory lock each batch of a pass holds: the ASCII bytes of `rcretent` as a bigint.
 * Fixed, so that every instance and every version of the command contend for the same lock.
 */
export const RETENTION_LOCK_KEY = '8242557523088207476';

/**
 * How often the daemon's walk starts again from the oldest expired job. A job that stops being
 * current after it expired (a new attempt for an old file), or that was held by another
 * transaction when the walk passed it, is behind the walk's position; the next walk from the start
 * deletes it. Once a day keeps that delay short next to any retention, and the cost of looking at
 * every expired current job small.
 */
export const FULL_WALK_EVERY_MS = 24 * 3_600_000;

/** The retentions and the batch size of a pass. A retention of 0 keeps that kind forever. */
export interface RetentionSettings {
  succeededMs: number;
  failedMs: number;
  quarantineMs: number;
  /** Jobs (or quarantined messages) looked at per transaction. */
  batchSize: number;
  /** Share of wall-clock time (1–100 %) a pass spends in its batches; it rests in between. */
  maxBusyPercent: number;
}

/** The settings of the configuration's `RETENTION_*` variables. */
export function retentionSettings(cfg: Config): RetentionSettings {
  return {
    succeededMs: cfg.RETENTION_SUCCEEDED,
    failedMs: cfg.RETENTION_FAILED,
    quarantineMs: cfg.RETENTION_QUARANTINE,
    batchSize: cfg.RETENTION_BATCH_SIZE,
    maxBusyPercent: cfg.RETENTION_MAX_BUSY_PERCENT,
  };
}

/** Deleted (or, in a dry run, to be deleted) jobs and transitions of one class. */
export interface ClassCounts {
  jobs: number;
  transitions: number;
}

/** What a pass did, or in a dry run would do. */
export interface RetentionPassResult {
  succeeded: ClassCounts;
  failed: ClassCounts;
  quarantine: { messages: number };
  /** Another instance held the retention lock: this pass did nothing. */
  busy: boolean;
  /** The pass was stopped (the daemon is stopping) before it was through. */
  halted: boolean;
  /** The pass walked every status from its oldest expired job. */
  fullWalk: boolean;
  dryRun: boolean;
  durationMs: number;
  /** Of `durationMs`, the rests between batches (`maxBusyPercent`). */
  restedMs: number;
}

/** What {@link runRetentionPass} needs besides the database. */
export interface RetentionPassOptions {
  settings: RetentionSettings;
  /** Count what would be deleted; delete nothing, take no lock. */
  dryRun?: boolean;
  /**
   * Where each status's walk stopped in earlier passes; updated as this one goes. Absent or empty:
   * walk from the start.
   */
  positions?: Map<FinalJobStatus, FinishedKey>;
  /** Set `halted` to stop after the current batch. */
  control?: RunControl;
  /** Called after each committed batch, for progress metrics. */
  onBatch?: (table: RetentionTable, deleted: number) => void;
}

/** The tables retention deletes from. */
export type RetentionTable = (typeof RETENTION_DELETED_TABLES)[number];

function emptyResult(dryRun: boolean, fullWalk: boolean): RetentionPassResult {
  return {
    succeeded: { jobs: 0, transitions: 0 },
    failed: { jobs: 0, transitions: 0 },
    quarantine: { messages: 0 },
    busy: false,
    halted: false,
    fullWalk,
    dryRun,
    durationMs: 0,
    restedMs: 0,
  };
}

function retentionOf(settings: RetentionSettings, cls: RetentionClass): number {
  return cls === 'succeeded' ? settings.succeededMs : settings.failedMs;
}

/** Counts of a dry run: what a pass from the start would delete now. */
async function dryRun(db: Kysely<Database>, settings: RetentionSettings, result: RetentionPassResult) {
  for (const cls of Object.keys(RETENTION_CLASSES) as RetentionClass[]) {
    const retentionMs = retentionOf(settings, cls);
    if (retentionMs > 0)
      result[cls] = await countExpiredJobs(db, { statuses: RETENTION_CLASSES[cls], retentionMs });
  }
  if (settings.quarantineMs > 0)
    result.quarantine.messages = await countQuarantined(db, {
      receivedBefore: olderThan(settings.quarantineMs),
    });
}

/**
 * Longest rest after one batch. A batch that took long (a loaded database) asks for a long rest,
 * but a stopping daemon waits for the rest to end, so it is capped.
 */
const MAX_REST_MS = 1_000;

/**
 * The rest after a batch that took `batchMs`, so that batches fill at most `maxBusyPercent` of the
 * pass's time. Retention is background work: on a database the inbox keeps busy, a pass that
 * deletes flat out takes CPU and I/O from every envelope, while a pass that rests most of the time
 * still deletes jobs far faster than an exchange creates them.
 */
export function restAfterBatch(batchMs: number, maxBusyPercent: number): number {
  if (maxBusyPercent >= 100) return 0;
  return Math.min(MAX_REST_MS, Math.round((batchMs * (100 - maxBusyPercent)) / maxBusyPercent));
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A batch found the retention lock taken: another instance's pass is under way. */
class RetentionBusy extends Error {}

/** Steps 2 and 3 of a pass: each batch a transaction of its own, which holds the lock. */
async function deleteExpired(
  db: Kysely<Database>,
  opts: RetentionPassOptions,
  positions: Map<FinalJobStatus, FinishedKey>,
  result: RetentionPassResult,
): Promise<void> {
  const { settings, control, onBatch } = opts;
  const limit = settings.batchSize;
  /** Run one batch's transaction under the lock, then rest as `maxBusyPercent` asks. */
  const batched = async <T>(run: (tx: Transaction<Database>) => Promise<T>): Promise<T> => {
    const started = performance.now();
    const out = await db.transaction().execute(async (tx) => {
      // 1. The lock, or nothing: held by this transaction, released by its end.
      const { rows } = await sql<{ locked: boolean }>`
        SELECT pg_try_advisory_xact_lock(${RETENTION_LOCK_KEY}::bigint) AS locked`.execute(tx);
      if (!rows[0]!.locked) throw new RetentionBusy();
      return run(tx);
    });
    const rest = restAfterBatch(performance.now() - started, settings.maxBusyPercent);
    if (rest > 0) await sleep(rest);
    result.restedMs += rest;
    return out;
  };
  // 2. Jobs, status by status, batch by batch, from where the walk stopped.
  for (const cls of Object.keys(RETENTION_CLASSES) as RetentionClass[]) {
    const retentionMs = retentionOf(settings, cls);
    if (retentionMs === 0) continue;
    for (const status of RETENTION_CLASSES[cls]) {
      for (;;) {
        if (control?.halted) return void (result.halted = true);
        const after = positions.get(status) ?? null;
        const batch = await batched((tx) => deleteExpiredJobs(tx, { status, retentionMs, after, limit }));
        if (batch.last) positions.set(status, batch.last);
        result[cls].jobs += batch.jobs;
        result[cls].transitions += batch.transitions;
        onBatch?.('recognition_job', batch.jobs);
        onBatch?.('recognition_job_transition', batch.transitions);
        if (batch.scanned < limit) break;
      }
    }
  }
  // 3. Quarantined messages, oldest first.
  if (settings.quarantineMs === 0) return;
  for (;;) {
    if (control?.halted) return void (result.halted = true);
    const deleted = await batched((tx) =>
      deleteQuarantined(tx, { receivedBefore: olderThan(settings.quarantineMs) }, limit),
    );
    result.quarantine.messages += deleted;
    onBatch?.('inbox_quarantine', deleted);
    if (deleted < limit) break;
  }
}

/**
 * One retention pass (see the module's steps). Resolves with the counts per class; `busy` when
 * another pass holds the lock. Rejects when a statement fails; the batches committed before it
 * stay committed, and the lock is released (or goes with the connection).
 */
export async function runRetentionPass(
  db: Kysely<Database>,
  opts: RetentionPassOptions,
): Promise<RetentionPassResult> {
  const started = performance.now();
  const positions = opts.positions ?? new Map<FinalJobStatus, FinishedKey>();
  const result = emptyResult(opts.dryRun === true, positions.size === 0);
  if (opts.dryRun) {
    await dryRun(db, opts.settings, result);
  } else {
    // The lock is transaction-scoped, taken by each batch: nothing of a pass outlives a
    // transaction, so a pass runs the same through a transaction-mode pooler, and a batch whose
    // connection dies releases it. A batch that finds it taken ends the pass as busy: another
    // instance's pass is deleting, and takes the rest.
    try {
      await deleteExpired(db, opts, positions, result);
    } catch (err) {
      if (!(err instanceof RetentionBusy)) throw err;
      result.busy = true;
    }
  }
  result.durationMs = Math.round(performance.now() - started);
  return result;
}

/** What {@link createRetention} needs. */
export interface RetentionOptions {
  db: Kysely<Database>;
  logger: Logger;
  metrics?: Metrics;
  settings: RetentionSettings;
  /** Pause between the end of one pass and the start of the next (`RETENTION_INTERVAL_MS`). */
  intervalMs: number;
  /** The clock that decides when the walk starts again from the oldest job (tests move it). */
  now?: () => number;
}

/** The daemon's retention loop. */
export interface Retention {
  /** Run a pass `intervalMs` from now, then again `intervalMs` after each pass ends. Idempotent. */
  start(): void;
  /** Stop scheduling passes; a pass in flight stops after its current batch, and stop() resolves then. */
  stop(): Promise<void>;
  /** One pass now, continuing the loop's walk; logged and counted like a scheduled one. */
  pass(): Promise<RetentionPassResult>;
}

/**
 * Create the retention loop. Nothing runs until `start()` (or a direct `pass()`). The first pass
 * comes one interval after the start, not at once: a daemon that restarts in a loop must not walk
 * the whole history at every start. A failed pass is logged at error and tried again at the next
 * tick; the loop never dies. Every pass is one log line (`retention_pass`) with its counts.
 */
export function createRetention(opts: RetentionOptions): Retention {
  const { db, metrics, settings, intervalMs } = opts;
  const now = opts.now ?? Date.now;
  const log = opts.logger.child({ loop: 'retention' });
  // With the time of the last successful pass, what the alert on passes that stop compares.
  metrics?.retention.interval.set(intervalMs / 1000);
  const positions = new Map<FinalJobStatus, FinishedKey>();
  let lastFullWalk: number | undefined;

  async function runPass(control: RunControl): Promise<RetentionPassResult> {
    if (lastFullWalk === undefined || now() - lastFullWalk >= FULL_WALK_EVERY_MS) positions.clear();
    const startedAt = now();
    const ended = metrics?.retention.passDuration.startTimer();
    let result: RetentionPassResult;
    try {
      result = await runRetentionPass(db, {
        settings,
        positions,
        control,
        onBatch: (table, deleted) => metrics?.retention.deleted.inc({ table }, deleted),
      });
    } catch (err) {
      ended?.();
      metrics?.retention.passes.inc({ outcome: 'failed' });
      throw err;
    }
    ended?.();
    const outcome = result.busy ? 'busy' : result.halted ? 'halted' : 'done';
    metrics?.retention.passes.inc({ outcome });
    if (outcome === 'done') {
      const endedAt = Date.now() / 1000;
      metrics?.retention.lastPass.set(endedAt);
      metrics?.retention.lastSuccess.set(endedAt);
      if (result.fullWalk) lastFullWalk = startedAt;
    }
    log.info(
      {
        event: 'retention_pass',
        outcome,
        full_walk: result.fullWalk,
        succeeded_jobs: result.succeeded.jobs,
        failed_jobs: result.failed.jobs,
        transitions: result.succeeded.transitions + result.failed.transitions,
        quarantined_messages: result.quarantine.messages,
        duration_ms: result.durationMs,
        rested_ms: result.restedMs,
      },
      outcome === 'busy' ? 'retention pass skipped: another instance holds the lock' : 'retention pass',
    );
    return result;
  }

  const loop = createPeriodicLoop({
    run: runPass,
    intervalMs,
    // Not at once: a daemon that restarts in a loop must not walk the whole history every time.
    firstRunAfterMs: intervalMs,
    onError: (err) =>
      log.error(
        { err, event: 'retention_pass_failed' },
        'retention pass failed; trying again at the next tick',
      ),
  });

  return {
    start: loop.start,
    stop: loop.stop,
    pass: loop.runNow,
  };
}
