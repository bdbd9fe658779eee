/**
 * `jobs retry` as a library, for the CLI and the operator console: the failed jobs a selection
 * names, their next attempts through the step in batches (each its own transaction), and the audit
 * row of a retry that writes. A dry run decides the same way and writes nothing, audit included.
 */
import type { Kysely } from 'kysely';
import { FAILED_JOB_STATUSES } from '../../machines/statuses.js';
import { audited, type AuditEntry } from '../db/audit.js';
import { assertUuid, findRetryCandidates, type RetryFilter } from '../db/jobs.js';
import type { Database } from '../db/schema.js';
import type { RetryOutcome, RetryRequest } from '../step/index.js';

/**
 * Jobs retried per transaction. Each batch holds its jobs' and files' locks until it commits, so a
 * result or a deadline for one of them waits at most one batch; large enough that a bulk retry of
 * thousands costs a few dozen transactions.
 */
export const RETRY_BATCH = 200;

/** New attempts' ids an audit row keeps: enough to follow a small retry, bounded for a bulk one. */
export const AUDITED_IDS = 100;

/** What a retry aims at: one job by id, or the failed jobs a filter selects. */
export type RetrySelection = { jobId: string } | { filter: RetryFilter };

/** The requests of `selection`, each to `toService` when given (else the job's own service). */
export async function retryRequests(
  db: Kysely<Database>,
  selection: RetrySelection,
  toService?: string | undefined,
): Promise<RetryRequest[]> {
  const target = toService !== undefined ? { targetService: toService } : {};
  if ('jobId' in selection) {
    assertUuid(selection.jobId, 'job id');
    return [{ jobId: selection.jobId, ...target }];
  }
  const candidates = await findRetryCandidates(db, selection.filter);
  return candidates.map((c) => ({ jobId: c.id, ...target }));
}

/** How {@link retryJobs} runs. */
export interface RetryRun {
  /** Decide and write nothing (no audit row either). */
  dryRun: boolean;
  /** The audit row of a run that writes; its `affected` and `outcome` are filled as batches commit. */
  audit: Omit<AuditEntry, 'affected' | 'outcome'>;
  /** Called after each batch, with its outcomes (a progress bar). */
  onBatch?: (outcomes: readonly RetryOutcome[]) => void;
  /** The audit row could not be written after the retry failed. */
  onUnrecorded?: (err: unknown) => void;
}

/**
 * Retry `requests` (or, dry, decide them), batch by batch, each batch in its own transaction.
 * Resolves with every outcome, in order. A run that writes is audited: the new attempts it created
 * (their count, the first {@link AUDITED_IDS} ids), also when it fails part-way.
 */
export async function retryJobs(
  db: Kysely<Database>,
  requests: readonly RetryRequest[],
  run: RetryRun,
): Promise<RetryOutcome[]> {
  if (run.dryRun) return inBatches(db, requests, true, run.onBatch);
  const entry: AuditEntry = { ...run.audit, affected: 0 };
  return audited(
    db,
    entry,
    (e) => {
      const attempts: string[] = [];
      e.outcome = { selected: requests.length, attempts };
      return inBatches(db, requests, false, (done) => {
        for (const r of done) {
          if (r.next === null) continue;
          e.affected++;
          if (attempts.length < AUDITED_IDS) attempts.push(r.next.jobId);
        }
        run.onBatch?.(done);
      });
    },
    run.onUnrecorded,
  );
}

async function inBatches(
  db: Kysely<Database>,
  requests: readonly RetryRequest[],
  dryRun: boolean,
  onBatch: (outcomes: readonly RetryOutcome[]) => void = () => undefined,
): Promise<RetryOutcome[]> {
  const { applyRetries, previewRetries } = await import('../step/index.js');
  const outcomes: RetryOutcome[] = [];
  for (let start = 0; start < requests.length; start += RETRY_BATCH) {
    const batch = requests.slice(start, start + RETRY_BATCH);
    const done = await db
      .transaction()
      .execute((tx) => (dryRun ? previewRetries(tx, batch) : applyRetries(tx, batch)));
    outcomes.push(...done);
    onBatch(done);
  }
  return outcomes;
}

/** Why a retry of one job was refused, in one line. */
export function refusal(o: RetryOutcome): string {
  switch (o.reason ?? o.decision) {
    case 'unknown_job':
      return `no recognition_job with id ${o.jobId}`;
    case 'not_failed':
      return `job ${o.jobId} is ${o.status}: only a failed job (${FAILED_JOB_STATUSES.join(', ')}) is retried`;
    case 'file_not_current':
      return `job ${o.jobId} is not the current job of file ${o.fileId} (that is job ${o.fileCurrentJobId ?? 'none'}): retry that one if it failed`;
    default:
      return `job ${o.jobId} was not retried (${o.reason ?? o.decision})`;
  }
}
