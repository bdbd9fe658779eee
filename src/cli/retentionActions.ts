/**
 * The actions of `retention run`, `jobs export` and `quarantine purge`, imported by their commands
 * when they run (the registrations stay light). Counts go to stdout as one JSON document (export:
 * the jobs as JSON lines, its counts on stderr), and a one-line summary to stderr.
 */
import { FINAL_JOB_STATUSES, type FinalJobStatus, type QuarantineReason } from '../../machines/index.js';
import type { Since } from '../db/jobs.js';
import { countQuarantined, deleteQuarantined, loadFinishedJobs, type FinishedKey } from '../db/retention.js';
import { runRetentionPass, retentionSettings } from '../daemon/retention.js';
import { formatSpan } from '../duration.js';
import { withDb } from './withDb.js';

/** Jobs read per page by `jobs export`, and messages deleted per transaction by `quarantine purge`. */
const PAGE = 1_000;

function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + '\n');
}

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** `retention run [--dry-run]`: one pass now, from the oldest expired job; counts per class. */
export async function retentionRun(o: { dryRun?: boolean }): Promise<void> {
  const dryRun = o.dryRun === true;
  const { result, settings } = await withDb(async (db, cfg) => {
    const settings = retentionSettings(cfg);
    return { settings, result: await runRetentionPass(db.db, { settings, dryRun }) };
  });
  const kept = (ms: number) => (ms === 0 ? 'forever' : formatSpan(ms));
  printJson({
    dry_run: dryRun,
    busy: result.busy,
    succeeded: { retention: kept(settings.succeededMs), ...result.succeeded },
    failed: { retention: kept(settings.failedMs), ...result.failed },
    quarantine: { retention: kept(settings.quarantineMs), ...result.quarantine },
    duration_ms: result.durationMs,
    rested_ms: result.restedMs,
  });
  if (result.busy) {
    process.stderr.write('another instance is running a retention pass: nothing deleted; run again later\n');
    return;
  }
  const jobs = result.succeeded.jobs + result.failed.jobs;
  process.stderr.write(
    `${dryRun ? 'would delete' : 'deleted'} ${plural(jobs, 'job')} (${result.succeeded.jobs} succeeded, ${result.failed.jobs} failed) with ${plural(result.succeeded.transitions + result.failed.transitions, 'transition')}, and ${plural(result.quarantine.messages, 'quarantined message')}\n`,
  );
}

/** What `jobs export` takes. */
export interface ExportOptions {
  finishedBefore: Since;
  finishedSince?: Since | undefined;
  status?: FinalJobStatus[] | undefined;
}

/**
 * Lines to a stream that may close early: waits while the stream's buffer is full, and stops
 * quietly when the reader has gone (EPIPE), so that `jobs export | head` ends without an error.
 */
function lineWriter(stream: NodeJS.WritableStream) {
  let failure: NodeJS.ErrnoException | undefined;
  // Kept for the rest of the process: an error of a closed pipe can come after the last write.
  stream.on('error', (err: NodeJS.ErrnoException) => {
    failure ??= err;
  });
  return {
    /** Write `text`; resolves false once the stream can take no more. */
    async write(text: string): Promise<boolean> {
      if (failure) return false;
      if (!stream.write(text)) {
        await new Promise<void>((resolve) => {
          const done = () => {
            stream.off('drain', done);
            stream.off('error', done);
            resolve();
          };
          stream.on('drain', done);
          stream.on('error', done);
        });
      }
      return failure === undefined;
    },
    /** Throws the stream's error unless it was only the reader going away. */
    check(): void {
      if (failure && failure.code !== 'EPIPE') throw failure;
    },
  };
}

/**
 * `jobs export --finished-before T [--finished-since T] [--status …]`: the finished jobs of those
 * statuses, status by status in (finished_at, id) order, as JSON lines, each with its result
 * object's address and its transitions. Page by page (keyset), so memory stays flat whatever the
 * history.
 */
export async function jobsExport(o: ExportOptions): Promise<void> {
  const statuses: readonly FinalJobStatus[] = o.status?.length ? o.status : FINAL_JOB_STATUSES;
  const out = lineWriter(process.stdout);
  const counts = await withDb(async ({ db }) => {
    let jobs = 0;
    let transitions = 0;
    for (const status of statuses) {
      let after: FinishedKey | null = null;
      for (;;) {
        const page = await loadFinishedJobs(
          db,
          { status, finishedBefore: o.finishedBefore, finishedSince: o.finishedSince },
          after,
          PAGE,
        );
        for (const job of page.jobs) {
          if (!(await out.write(JSON.stringify(job) + '\n'))) return undefined;
          jobs += 1;
          transitions += job.transitions.length;
        }
        if (page.jobs.length < PAGE) break;
        after = page.last;
      }
    }
    return { jobs, transitions };
  });
  out.check();
  if (counts)
    process.stderr.write(
      `exported ${plural(counts.jobs, 'job')} with ${plural(counts.transitions, 'transition')}\n`,
    );
}

/** What `quarantine purge` takes. */
export interface PurgeOptions {
  olderThan: Since;
  reason?: QuarantineReason | undefined;
  dryRun?: boolean | undefined;
}

/**
 * `quarantine purge --older-than D [--reason R] [--dry-run]`: delete the quarantined messages
 * received before D (of reason R), oldest first, in transactions of {@link PAGE}.
 */
export async function quarantinePurge(o: PurgeOptions): Promise<void> {
  const dryRun = o.dryRun === true;
  const which = { receivedBefore: o.olderThan, reason: o.reason };
  const messages = await withDb(async ({ db }) => {
    if (dryRun) return countQuarantined(db, which);
    let total = 0;
    for (;;) {
      const deleted = await db.transaction().execute((tx) => deleteQuarantined(tx, which, PAGE));
      total += deleted;
      if (deleted < PAGE) return total;
    }
  });
  printJson({ dry_run: dryRun, reason: o.reason ?? null, messages });
  process.stderr.write(
    `${dryRun ? 'would delete' : 'deleted'} ${plural(messages, 'quarantined message')}${o.reason ? ` (${o.reason})` : ''}\n`,
  );
}
