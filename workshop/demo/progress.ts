/**
 * The demo's live progress: how many jobs are final, read from the database (`select status,
 * count(*) … group by status`) every 200 ms until every job is final, the bound passes or the
 * newcomer interrupts. A cli-progress bar on a terminal, plain lines at most once a second
 * otherwise. It only reads: the daemon and the service move the jobs.
 */
import cliProgress from 'cli-progress';
import { FINAL_JOB_STATUSES, JOB_STATUSES, type JobStatus } from '../../machines/index.js';
import type { Db } from '../../src/db/database.js';

/** Where the demo writes: a terminal gets the bar. */
export type DemoOut = NodeJS.WritableStream & { isTTY?: boolean };

/** How often the progress is read from the database. */
const PROGRESS_POLL_MS = 200;
/** Plain progress lines (not a terminal) come at most this often. */
const PLAIN_LINE_EVERY_MS = 1_000;

/** `select status, count(*) from recognition_job group by status`. */
export async function countByStatus(db: Db): Promise<Map<JobStatus, number>> {
  const rows = await db.db
    .selectFrom('recognition_job')
    .select(['status', (eb) => eb.fn.countAll<string>().as('count')])
    .groupBy('status')
    .execute();
  return new Map(rows.map((r) => [r.status as JobStatus, Number(r.count)]));
}

const finalCount = (counts: Map<JobStatus, number>) =>
  FINAL_JOB_STATUSES.reduce((s, st) => s + (counts.get(st) ?? 0), 0);

/** Every status but `dlq`, which the demo's service cannot cause, unless some job is there. */
function statusLine(counts: Map<JobStatus, number>): string {
  return JOB_STATUSES.filter((s) => s !== 'dlq' || (counts.get(s) ?? 0) > 0)
    .map((s) => `${s} ${counts.get(s) ?? 0}`)
    .join(' · ');
}

interface Progress {
  /** Show `counts`; plain lines are throttled unless `force`. */
  update(counts: Map<JobStatus, number>, force?: boolean): void;
  stop(): void;
}

/** The live display: a cli-progress bar on a terminal, plain periodic lines otherwise. */
function createProgress(out: DemoOut, total: number): Progress {
  const started = Date.now();
  const rate = (done: number) => (done / Math.max(0.001, (Date.now() - started) / 1000)).toFixed(1);
  if (out.isTTY) {
    const bar = new cliProgress.SingleBar(
      {
        format: ' {bar} {value}/{total} final · {rate} jobs/s | {statuses}',
        stream: out as NodeJS.WriteStream,
        hideCursor: true,
        barsize: 24,
        fps: 10,
      },
      cliProgress.Presets.shades_classic,
    );
    bar.start(total, 0, { statuses: '', rate: '0.0' });
    return {
      update(counts: Map<JobStatus, number>) {
        const done = finalCount(counts);
        bar.update(done, { statuses: statusLine(counts), rate: rate(done) });
      },
      stop: () => bar.stop(),
    };
  }
  let lastLine = 0;
  let last = '';
  return {
    update(counts: Map<JobStatus, number>, force = false) {
      const done = finalCount(counts);
      const state = statusLine(counts);
      if (state === last || (!force && Date.now() - lastLine < PLAIN_LINE_EVERY_MS)) return;
      lastLine = Date.now();
      last = state;
      const at = ((Date.now() - started) / 1000).toFixed(1).padStart(5);
      out.write(`  [${at} s] ${done}/${total} final · ${rate(done)} jobs/s | ${state}\n`);
    },
    stop: () => undefined,
  };
}

/**
 * Show the progress of `total` jobs until every one is final (true), or `deadline` (epoch ms)
 * passes or `signal` aborts (false). `failed` is asked on every round: what it returns is thrown
 * (the jobs, created meanwhile, could not all be).
 */
export async function watchUntilFinal(o: {
  db: Db;
  out: DemoOut;
  total: number;
  deadline: number;
  signal: AbortSignal | undefined;
  failed: () => unknown;
}): Promise<boolean> {
  const progress = createProgress(o.out, o.total);
  let counts = new Map<JobStatus, number>();
  let allFinal = false;
  try {
    while (!o.signal?.aborted) {
      const failure = o.failed();
      if (failure) throw failure;
      counts = await countByStatus(o.db);
      progress.update(counts);
      if (finalCount(counts) >= o.total) {
        allFinal = true;
        break;
      }
      if (Date.now() > o.deadline) break;
      await new Promise((r) => setTimeout(r, PROGRESS_POLL_MS));
    }
    progress.update(counts, true);
  } finally {
    progress.stop();
  }
  return allFinal;
}
