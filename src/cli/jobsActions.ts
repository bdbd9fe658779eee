/**
 * What the `jobs` commands do when they run (their options are registered in `./jobs.ts`):
 * create, show, history, list, retry and export. Imported by their actions only: it loads the database
 * client; the step (for retries), the progress bar, the inspector and the tracing API are loaded
 * by the commands that use them, when they do.
 */
import { FINAL_JOB_STATUSES, type FinalJobStatus } from '../../machines/statuses.js';
import type { Db } from '../db/database.js';
import { createJob, listJobs, loadJob, loadTransitions } from '../db/jobs.js';
import { loadFinishedJobs, type FinishedKey } from '../db/retention.js';
import { UsageError } from '../errors.js';
import type { RetryOutcome } from '../step/index.js';
import type { TraceCarrier } from '../tracing/tracing.js';
import { tracingStarted } from '../tracing/bootstrap.js';
import { plural, print, type InspectOptions } from './plumbing.js';
import { printRows, type Cell } from './rows.js';
import type { CreateOptions, ExportOptions, ListOptions, RetryOptions } from './jobs.js';
import { cliAudit, warnUnrecorded } from './auditActions.js';
import { refusal, RETRY_BATCH, retryJobs, retryRequests } from '../operator/retryJobs.js';
import { withDb } from './withDb.js';

/** A progress bar on stderr for a batch of `total` jobs, when stderr is a terminal and the batch is large. */
async function progressBar(total: number): Promise<{ increment(n: number): void; stop(): void }> {
  if (total <= RETRY_BATCH || !process.stderr.isTTY) return { increment: () => {}, stop: () => {} };
  const { default: cliProgress } = await import('cli-progress');
  const bar = new cliProgress.SingleBar(
    { format: ' retrying {bar} {value}/{total} jobs', stream: process.stderr, hideCursor: true, fps: 10 },
    cliProgress.Presets.shades_classic,
  );
  bar.start(total, 0);
  return { increment: (n) => bar.increment(n), stop: () => bar.stop() };
}

/** A retried job and its next attempt, as printed; a dry run's attempt has no id yet. */
function attemptRow(o: RetryOutcome, dryRun: boolean) {
  const next = o.next!;
  return {
    id: dryRun ? null : next.jobId,
    file_id: next.fileId,
    attempt: next.attempt,
    target_service: next.targetService,
    status: 'pending',
    retry_of: o.jobId,
    retried_status: o.status,
  };
}
type AttemptRow = ReturnType<typeof attemptRow>;

/** The columns every job table starts with. */
function jobColumns<
  R extends { id: Cell; file_id: Cell; attempt: Cell; target_service: Cell; status: Cell },
>(): Array<[string, (r: R) => Cell]> {
  return [
    ['ID', (r) => r.id],
    ['FILE', (r) => r.file_id],
    ['ATTEMPT', (r) => r.attempt],
    ['SERVICE', (r) => r.target_service],
    ['STATUS', (r) => r.status],
  ];
}

const ATTEMPT_COLUMNS: ReadonlyArray<[string, (r: AttemptRow) => Cell]> = [
  ...jobColumns<AttemptRow>(),
  ['RETRY OF', (r) => r.retry_of],
  ['WAS', (r) => r.retried_status],
];

/** The audit row of a retry, before it runs. */
function retryAudit(id: string | undefined, o: RetryOptions) {
  const selection: Record<string, unknown> =
    id !== undefined
      ? { job_id: id }
      : { status: o.status, service: o.service ?? null, since: o.since ?? null, limit: o.limit };
  if (o.toService !== undefined) selection['to_service'] = o.toService;
  return { ...cliAudit(o.note), action: 'jobs retry' as const, selection };
}

async function retryCommand(db: Db, id: string | undefined, o: RetryOptions): Promise<void> {
  // Either an id or --status: checked when the command line is parsed (./jobs.ts).
  const bulk = o.status !== undefined;
  const requests = await retryRequests(
    db.db,
    id !== undefined
      ? { jobId: id }
      : { filter: { statuses: o.status!, service: o.service, finishedSince: o.since, limit: o.limit } },
    o.toService,
  );
  const bar = await progressBar(requests.length);
  let outcomes: RetryOutcome[];
  try {
    outcomes = await retryJobs(db.db, requests, {
      dryRun: o.dryRun === true,
      audit: retryAudit(id, o),
      onBatch: (done) => bar.increment(done.length),
      onUnrecorded: warnUnrecorded,
    });
  } finally {
    bar.stop();
  }
  const retried = outcomes.filter((r) => r.next !== null);
  if (id !== undefined && retried.length === 0) throw new UsageError(refusal(outcomes[0]!));
  printRows(
    retried.map((r) => attemptRow(r, o.dryRun === true)),
    ATTEMPT_COLUMNS,
    o,
  );
  const skipped = outcomes.filter((r) => r.next === null);
  for (const s of skipped.slice(0, 5)) process.stderr.write(`skipped: ${refusal(s)}\n`);
  if (skipped.length > 5) process.stderr.write(`skipped: … and ${skipped.length - 5} more\n`);
  if (bulk) {
    const verb = o.dryRun ? 'would retry' : 'retried';
    process.stderr.write(
      `${verb} ${retried.length} of ${requests.length} selected job(s)${skipped.length ? `; ${skipped.length} skipped` : ''}${requests.length === o.limit ? ` (--limit ${o.limit} reached: run again for more)` : ''}\n`,
    );
  } else if (o.dryRun) {
    process.stderr.write('dry run: nothing written\n');
  }
}

/** `jobs create`: a pending job for a file, created inside a span when tracing is on. */
export async function createAction(o: CreateOptions): Promise<void> {
  let parent: TraceCarrier | undefined;
  if (o.traceparent) {
    const { checkedCarrier } = await import('../tracing/carrier.js');
    try {
      parent = checkedCarrier(o.traceparent, o.tracestate);
    } catch (err) {
      throw new UsageError((err as Error).message);
    }
  } else if (o.tracestate) throw new UsageError('--tracestate needs --traceparent');
  // With tracing on, the job's creation is a span (child of --traceparent) and the row stores
  // its context; with tracing off, the row stores --traceparent as given. The tracing API is
  // loaded only when the SDK runs.
  const spans = tracingStarted() ? await import('../tracing/jobSpans.js') : undefined;
  const traced = spans?.startJobCreateTrace({ parent, fileId: o.file, targetService: o.service });
  const create = () =>
    withDb(({ db }) =>
      createJob(db, {
        fileId: o.file,
        targetService: o.service,
        traceContext: traced ? traced.carrier : parent,
      }),
    );
  const job = traced
    ? await (await import('../tracing/tracing.js')).runTraced(traced, create)
    : await create();
  traced?.end(job.id);
  print(job);
}

/** `jobs show`: a job, its file and its result object. */
export async function showAction(id: string): Promise<void> {
  const view = await withDb(({ db }) => loadJob(db, id));
  if (!view) throw new UsageError(`no recognition_job with id ${id}`);
  print(view);
}

/** `jobs history`: a job's transitions; with `--inspect`, replayed into the inspector. */
export async function historyAction(id: string, o: InspectOptions): Promise<void> {
  const { rows, status } = await withDb(async ({ db }) => {
    const view = await loadJob(db, id);
    if (!view) throw new UsageError(`no recognition_job with id ${id}`);
    return { rows: await loadTransitions(db, id), status: view.job.status };
  });
  print(rows);
  if (o.inspect) {
    const { historyRun } = await import('../statecharts/history.js');
    const { sendToInspector } = await import('./inspect.js');
    await sendToInspector(historyRun(id, rows, status), o, (line) => process.stderr.write(line + '\n'));
  }
}

/** `jobs list`: the jobs the filters select, newest first. */
export async function listAction(o: ListOptions): Promise<void> {
  const rows = await withDb(({ db }) =>
    listJobs(db, {
      statuses: o.status,
      service: o.service,
      fileId: o.file,
      createdSince: o.createdSince,
      finishedSince: o.finishedSince,
      limit: o.limit,
    }),
  );
  printRows(
    rows,
    [
      ...jobColumns<(typeof rows)[number]>(),
      ['ERROR', (r) => r.error_code],
      ['CREATED', (r) => r.created_at],
      ['FINISHED', (r) => r.finished_at],
    ],
    o,
  );
}

/** `jobs retry`: one failed job, or failed jobs in bulk. */
export async function retryAction(id: string | undefined, o: RetryOptions): Promise<void> {
  await withDb((db) => retryCommand(db, id, o));
}

/** Jobs read per page by `jobs export`. */
const EXPORT_PAGE = 1_000;

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
export async function exportAction(o: ExportOptions): Promise<void> {
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
          EXPORT_PAGE,
        );
        for (const job of page.jobs) {
          if (!(await out.write(JSON.stringify(job) + '\n'))) return undefined;
          jobs += 1;
          transitions += job.transitions.length;
        }
        if (page.jobs.length < EXPORT_PAGE) break;
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
