/**
 * Retention's statements: deleting expired jobs (final, `finished_at` older than their class's
 * retention) with their transitions and expired quarantined messages, counting what would go, and
 * reading finished jobs page by page for an archive. A job is never deleted while it is its file's
 * current job; files and `s3_object` rows are never deleted (docs/operations.md, "Retention").
 */
import { sql, type Kysely } from 'kysely';
import {
  FAILED_JOB_STATUSES,
  FINAL_JOB_STATUSES,
  type FinalJobStatus,
  type QuarantineReason,
} from '../../machines/index.js';
import { sinceSql, type Since } from './jobs.js';
import type { Database, JobRow, TransitionRow } from './schema.js';

/** The classes of finished jobs, each with a retention of its own. */
export const RETENTION_CLASSES = {
  succeeded: FINAL_JOB_STATUSES.filter((s) => !(FAILED_JOB_STATUSES as readonly string[]).includes(s)),
  failed: [...FAILED_JOB_STATUSES],
} as const satisfies Record<string, readonly FinalJobStatus[]>;
/** `succeeded` (RETENTION_SUCCEEDED) or `failed` (RETENTION_FAILED). */
export type RetentionClass = keyof typeof RETENTION_CLASSES;

/**
 * A place in the walk through one status's finished jobs, in (`finished_at`, `id`) order: the last
 * job looked at. `finishedAt` is the database's value as text, to the microsecond: a Date would
 * round it to the millisecond, and the jobs finished in one transaction share one `finished_at`.
 */
export interface FinishedKey {
  finishedAt: string;
  id: string;
}

/** A retention as a {@link Since}: `ms` back from the database clock. */
export function olderThan(ms: number): Since {
  return { agoMs: ms };
}

/** `finished_at` as text that PostgreSQL reads back to the same microsecond. */
const FINISHED_KEY_SQL = sql<string>`to_char(j.finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/** `(finished_at, id) > key`, or true from the start. */
function afterKey(key: FinishedKey | null | undefined) {
  return key
    ? sql<boolean>`(j.finished_at, j.id) > (${key.finishedAt}::timestamptz, ${key.id}::uuid)`
    : sql<boolean>`true`;
}

/** What one batch of {@link deleteExpiredJobs} did. */
export interface ExpiredBatch {
  /** Expired jobs looked at (current ones included); fewer than the limit: the walk reached the end. */
  scanned: number;
  /** The last job looked at, to continue after; null when none was. */
  last: FinishedKey | null;
  /** Jobs deleted. */
  jobs: number;
  /** Their transitions, deleted with them. */
  transitions: number;
}

/**
 * Runs inside the caller's transaction. One batch of the walk through the expired jobs of
 * `status`: the next `limit` of them after `after` (in `finished_at`, `id` order; read without
 * locks), then, of those, the ones that are not their file's current job, locked `FOR UPDATE SKIP
 * LOCKED` and deleted with their transitions, all in one statement.
 *
 * The statement is the body of `recognition_retention_delete_jobs` (migration 0017), which runs
 * as the role that owns the tables: the daemon's role holds no DELETE, and can delete only what
 * that function allows (docs/deployment.md, "Database roles").
 *
 * A job whose row another transaction holds (a late result the inbox is looking at, another
 * instance's retention) is skipped, never waited for; a later pass takes it. Jobs that are current
 * are looked at and left, so the walk's position moves past them. Both the walk (the partial
 * (status, finished_at, id) index) and the check that no file points at a job (the index on
 * `stored_file.current_recognition_job_id`) read indexes only, not the tables.
 */
export async function deleteExpiredJobs(
  tx: Kysely<Database>,
  opts: ExpiredBatchOptions,
): Promise<ExpiredBatch> {
  const { rows } = await expiredJobsBatch(opts).execute(tx);
  const r = rows[0]!;
  return {
    scanned: r.scanned,
    last:
      r.last_finished_at !== null && r.last_id !== null
        ? { finishedAt: r.last_finished_at, id: r.last_id }
        : null,
    jobs: r.jobs,
    transitions: r.transitions,
  };
}

/** Which batch {@link deleteExpiredJobs} takes. */
export interface ExpiredBatchOptions {
  status: FinalJobStatus;
  retentionMs: number;
  /** Continue after this job; from the oldest expired job when absent. */
  after?: FinishedKey | null;
  limit: number;
}

/** The call of {@link deleteExpiredJobs}, not run: a test explains the statement it runs. */
export function expiredJobsBatch(opts: ExpiredBatchOptions) {
  if (!Number.isInteger(opts.limit) || opts.limit < 1)
    throw new Error(`limit must be a positive integer: ${opts.limit}`);
  return sql<{
    scanned: number;
    last_finished_at: string | null;
    last_id: string | null;
    jobs: number;
    transitions: number;
  }>`
    SELECT scanned, last_finished_at, last_id::text AS last_id, jobs, transitions
    FROM recognition_retention_delete_jobs(
      ${opts.status}::text,
      ${sinceSql(olderThan(opts.retentionMs))},
      ${opts.after?.finishedAt ?? null}::timestamptz,
      ${opts.after?.id ?? null}::uuid,
      ${opts.limit}::integer)`;
}

/**
 * What {@link deleteExpiredJobs} would delete of `statuses` now, all batches together: the
 * expired jobs that are not current, and their transitions. Reads only.
 */
export async function countExpiredJobs(
  db: Kysely<Database>,
  opts: { statuses: readonly FinalJobStatus[]; retentionMs: number },
): Promise<{ jobs: number; transitions: number }> {
  if (opts.statuses.length === 0) return { jobs: 0, transitions: 0 };
  const { rows } = await sql<{ jobs: number; transitions: number }>`
    WITH expired AS (
      SELECT j.id
      FROM recognition_job j
      WHERE j.status IN (${sql.join(opts.statuses.map((s) => sql.lit(s)))})
        AND j.finished_at < ${sinceSql(olderThan(opts.retentionMs))}
        AND NOT EXISTS (SELECT 1 FROM stored_file f WHERE f.current_recognition_job_id = j.id)
    )
    SELECT (SELECT count(*) FROM expired)::int AS jobs,
           (SELECT count(*) FROM recognition_job_transition t WHERE t.job_id IN (SELECT id FROM expired))::int
             AS transitions`.execute(db);
  return rows[0]!;
}

/** Which quarantined messages {@link deleteQuarantined} and {@link countQuarantined} take. */
export interface QuarantineSelection {
  /** Messages received before this moment. */
  receivedBefore: Since;
  /** Only this reason; every reason when absent. */
  reason?: QuarantineReason | undefined;
}

function quarantineWhere(which: QuarantineSelection) {
  const reason = which.reason !== undefined ? sql`AND q.reason = ${which.reason}` : sql``;
  return sql`q.received_at < ${sinceSql(which.receivedBefore)} ${reason}`;
}

/**
 * Runs inside the caller's transaction. Delete up to `limit` quarantined messages of `which`,
 * oldest first, skipping rows another transaction holds, through
 * `recognition_retention_delete_quarantined` (migration 0017; it runs as the tables' owner, as
 * {@link deleteExpiredJobs} says). Resolves with how many it deleted; fewer than `limit`: none is
 * left, or the rest were held (a later pass takes them).
 */
export async function deleteQuarantined(
  tx: Kysely<Database>,
  which: QuarantineSelection,
  limit: number,
): Promise<number> {
  const { rows } = await sql<{ deleted: number }>`
    SELECT recognition_retention_delete_quarantined(
      ${sinceSql(which.receivedBefore)}, ${which.reason ?? null}::text, ${limit}::integer) AS deleted`.execute(
    tx,
  );
  return rows[0]!.deleted;
}

/** How many quarantined messages of `which` there are now. Reads only. */
export async function countQuarantined(db: Kysely<Database>, which: QuarantineSelection): Promise<number> {
  const { rows } = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM inbox_quarantine q WHERE ${quarantineWhere(which)}`.execute(db);
  return rows[0]!.n;
}

/** A finished job as archived: its row, its result object's address, and its transitions. */
export interface ArchivedJob extends JobRow {
  result_s3: { bucket: string; key: string } | null;
  transitions: TransitionRow[];
}

/** Which finished jobs {@link loadFinishedJobs} reads. */
export interface FinishedSelection {
  status: FinalJobStatus;
  /** Jobs that finished before this moment. */
  finishedBefore: Since;
  /** And at or after this one, when given. */
  finishedSince?: Since | undefined;
}

/**
 * One page of the finished jobs of `which`, after `after` in (`finished_at`, `id`) order, at most
 * `limit`, each with its result object's address and its transitions (oldest first); and the key
 * to continue after. The jobs and their transitions are read in one snapshot (a repeatable-read
 * transaction), so a job deleted meanwhile is either whole or absent. Served by the partial
 * (status, finished_at, id) index: a page costs the same on any size of history.
 */
export async function loadFinishedJobs(
  db: Kysely<Database>,
  which: FinishedSelection,
  after: FinishedKey | null,
  limit: number,
): Promise<{ jobs: ArchivedJob[]; last: FinishedKey | null }> {
  return db
    .transaction()
    .setIsolationLevel('repeatable read')
    .setAccessMode('read only')
    .execute(async (tx) => {
      let q = tx
        .selectFrom('recognition_job as j')
        .leftJoin('s3_object as o', 'o.id', 'j.result_s3_object_id')
        .selectAll('j')
        .select(['o.bucket as result_bucket', 'o.key as result_key', FINISHED_KEY_SQL.as('finished_key')])
        .where('j.status', '=', sql.lit(which.status))
        .where('j.finished_at', '<', sinceSql(which.finishedBefore))
        .where(afterKey(after));
      if (which.finishedSince) q = q.where('j.finished_at', '>=', sinceSql(which.finishedSince));
      const rows = await q.orderBy('j.finished_at').orderBy('j.id').limit(limit).execute();
      if (rows.length === 0) return { jobs: [], last: null };
      const transitions = await tx
        .selectFrom('recognition_job_transition')
        .selectAll()
        .where('job_id', '=', sql<string>`ANY(${rows.map((r) => r.id)}::uuid[])`)
        .orderBy('job_id')
        .orderBy('id')
        .execute();
      const byJob = new Map<string, TransitionRow[]>();
      for (const t of transitions) {
        const list = byJob.get(t.job_id);
        if (list) list.push(t);
        else byJob.set(t.job_id, [t]);
      }
      const jobs = rows.map(({ result_bucket, result_key, finished_key: _key, ...job }) => ({
        ...job,
        result_s3:
          result_bucket !== null && result_key !== null ? { bucket: result_bucket, key: result_key } : null,
        transitions: byJob.get(job.id) ?? [],
      }));
      const last = rows[rows.length - 1]!;
      return { jobs, last: { finishedAt: last.finished_key, id: last.id } };
    });
}
