/**
 * The `grown` section (bench/README.md, "Grown"): the inbox, the watchdog and the admin queries on
 * the empty database and on one with a generated history, in turns; the inbox once more while the
 * product's retention pass deletes the history's expired fifth.
 */
import { sql } from 'kysely';
import type { FinalJobStatus } from '../machines/index.js';
import { runRetentionPass } from '../src/daemon/retention.js';
import type { FinishedKey } from '../src/db/retention.js';
import { openDb } from '../src/db/database.js';
import { listJobs, loadJob, loadTransitions } from '../src/db/jobs.js';
import { fillFreeSpaceCrumbs, generateJobHistory } from '../workshop/localServers/jobHistory.js';
import { checkpoint, percentile, sleep, timeRuns, vacuumAnalyze, withBenchEnv, withDb } from './env.js';
import type { BenchEnv } from './env.js';
import { measureInbox, warnInbox, type Compared } from './throughput.js';
import { measureWatchdogInChild } from './watchdog.js';

/** The section's figures (admin p95 in ms, bytes on disk per job of the history). */
export type GrownResult = Awaited<ReturnType<typeof measureGrown>>;
type Options = Record<'randomIds' | 'fillCrumbs', boolean>;

/**
 * Generate about `jobs` jobs in `env`'s database (its runs keep them), vacuumed and analysed as a
 * long-lived table is, `fillCrumbs` filling the free space a first vacuum lists on old pages.
 */
export async function growHistory(env: BenchEnv, jobs: number, o: Options, log: (line: string) => void) {
  const [started, client] = [performance.now(), await env.pool.connect()];
  try {
    const files = Math.round(jobs * 0.8);
    const c = await generateJobHistory(client, { files, retryEvery: 4, randomFileIds: o.randomIds });
    await vacuumAnalyze(env.pool);
    const crumbs = o.fillCrumbs ? await fillFreeSpaceCrumbs(client) : 0;
    if (o.fillCrumbs) await vacuumAnalyze(env.pool);
    await checkpoint(env.pool);
    const seconds = (performance.now() - started) / 1000;
    const { rows } = await env.pool.query<Record<string, string>>(`
      SELECT pg_table_size('recognition_job') AS "jobTable", pg_indexes_size('recognition_job') AS "jobIndexes",
             pg_total_relation_size('recognition_job_transition') AS "transitionsWithIndexes"`);
    const all = c.jobs + crumbs;
    const bytesPerJob = Object.fromEntries(Object.entries(rows[0]!).map(([k, v]) => [k, Number(v) / all]));
    env.history = true;
    const history = { jobs: all, transitions: c.transitions + crumbs, expired: c.jobs - c.files, crumbs };
    log(`  generated: ${JSON.stringify({ ...history, seconds, bytesPerJob })}`);
    return { ...history, seconds, bytesPerJob };
  } finally {
    client.release();
  }
}

/** p95 of the admin commands' queries over `runs` runs (random jobs, after an untimed one), ms. */
const adminP95 = ({ databaseUrl }: BenchEnv, runs = 200) =>
  withDb(databaseUrl, 'bench-admin', async (db) => {
    const { rows: ids } = await sql<{ id: string }>`
      SELECT id FROM recognition_job ORDER BY random() LIMIT ${runs}`.execute(db);
    const queries = {
      'jobs list --status error --limit 50': () => listJobs(db, { statuses: ['error'], limit: 50 }),
      'jobs show': (id: string) => loadJob(db, id),
      'jobs history': async (id: string) => [await loadJob(db, id), await loadTransitions(db, id)],
    };
    const p95: Record<string, number> = {};
    for (const [name, query] of Object.entries(queries))
      p95[name] = percentile(await timeRuns(runs, (i) => query(ids[i % ids.length]!.id)), 95);
    return p95;
  });

/** How often the inbox's waits on retention's locks are sampled: a wait seen at `a` lasted < `a` + this. */
const LOCK_WAIT_SAMPLE_MS = 50;

/** The daemon's connections' waits on a lock a retention connection holds, with their age so far. */
const LOCK_WAITS_SQL = `
  SELECT l.pid || ' ' || l.waitstart AS wait, (extract(epoch FROM clock_timestamp() - l.waitstart) * 1000)::float8 AS ms
  FROM pg_locks l JOIN pg_stat_activity a USING (pid)
  WHERE NOT l.granted AND l.waitstart IS NOT NULL AND a.application_name = 'recognition-core'
    AND EXISTS (SELECT 1 FROM pg_stat_activity r
                WHERE r.pid = ANY (pg_blocking_pids(l.pid)) AND r.application_name = 'bench-retention')`;

/**
 * The product's retention pass over the history (failed jobs kept 30 minutes, the rest forever), in
 * segments sharing the walk's position: `timed` runs one beside an inbox run's clock, sampling the
 * inbox's waits on its locks and vacuuming what it deleted after; `finish` runs the rest untimed.
 */
function retentionBeside(env: BenchEnv) {
  const deleted = { deletedJobs: 0, deletedBesideInbox: 0, secondsBesideInbox: 0, seconds: 0 };
  const result = { ...deleted, lockWaits: 0, longestLockWaitMs: 0 };
  const bound = { lockWaitBoundMs: LOCK_WAIT_SAMPLE_MS };
  const { db, close } = openDb(env.databaseUrl, { max: 1, applicationName: 'bench-retention' });
  const positions = new Map<FinalJobStatus, FinishedKey>();
  const { RETENTION_BATCH_SIZE: batchSize, RETENTION_MAX_BUSY_PERCENT: maxBusyPercent } = env.config();
  const settings = { succeededMs: 0, failedMs: 1_800_000, quarantineMs: 0, batchSize, maxBusyPercent };
  const segment = async (control: { halted: boolean }, maxBusyPercent = settings.maxBusyPercent) => {
    const r = await runRetentionPass(db, { settings: { ...settings, maxBusyPercent }, control, positions });
    result.deletedJobs += r.failed.jobs;
    result.seconds += r.durationMs / 1e3;
    return r;
  };
  let ended = () => Promise.resolve();
  const started = () => {
    const [control, waits] = [{ halted: false }, new Map<string, number>([['', 0]])];
    const pass = segment(control);
    const sampling = (async () => {
      for (; !control.halted; await sleep(LOCK_WAIT_SAMPLE_MS))
        for (const w of (await env.pool.query<{ wait: string; ms: number }>(LOCK_WAITS_SQL)).rows)
          waits.set(w.wait, Math.max(waits.get(w.wait) ?? 0, w.ms));
    })();
    ended = async () => {
      control.halted = true;
      const [r] = await Promise.all([pass, sampling]);
      result.deletedBesideInbox += r.failed.jobs;
      result.secondsBesideInbox += r.durationMs / 1e3;
      result.lockWaits += waits.size - 1;
      result.longestLockWaitMs = Math.max(result.longestLockWaitMs, ...waits.values());
      // Every wait was shorter than this: the longest seen plus a period, or one period.
      bound.lockWaitBoundMs = result.longestLockWaitMs + LOCK_WAIT_SAMPLE_MS;
      await env.pool.query('VACUUM recognition_job, recognition_job_transition');
    };
    return Promise.resolve();
  };
  const finish = async () => {
    // The rest of the pass, untimed and flat out: it only has to be over before the watchdog's runs.
    await segment({ halted: false }, 100).finally(close);
    return { ...result, ...bound };
  };
  return { timed: { started, ended: () => ended() }, finish };
}

/** The section; `compared` takes the inbox runs in turns over the rounds, as other sections do. */
export async function measureGrown(
  env: BenchEnv,
  o: { jobs: number; batched: number; warmup: number; watchdogDue: number; rounds: number },
  compared: Compared,
  log: (line: string) => void,
) {
  return withBenchEnv(async (grownEnv) => {
    const history = await growHistory(grownEnv, o.jobs, { randomIds: false, fillCrumbs: true }, log);
    await measureInbox(env, { name: 'warm-up', logLevel: 'warn' }, o.warmup);
    const retention = retentionBeside(grownEnv);
    const deleting = `the same, a retention pass deleting its ${history.expired} expired jobs`;
    const [empty, grown, duringRetention] = await compared([
      warnInbox(env, o.batched, 'empty database'),
      warnInbox(grownEnv, o.batched, `a history of ${history.jobs} jobs`),
      warnInbox(grownEnv, o.batched, deleting, { timed: retention.timed }),
    ]);
    const retained = await retention.finish();
    log(`  retention beside it: ${JSON.stringify(retained)}`);
    // After the inbox runs: the empty database holds their jobs.
    const admin = { empty: await adminP95(env), grown: await adminP95(grownEnv) };
    log(`  admin p95, ms: ${JSON.stringify(admin)}`);
    // Each sweep adds its due jobs; the empty database holds the watchdog section's 20 000 in flight.
    const args = { due: o.watchdogDue, rounds: o.rounds, daemonOnly: true };
    const sweep = ({ databaseUrl, nats }: BenchEnv, keep: boolean, rows = 21_000) =>
      measureWatchdogInChild({ ...args, databaseUrl, natsUrl: nats.url, keep, rows });
    const watchdog = { empty: sweep(env, false), grown: sweep(grownEnv, true, history.jobs) };
    const inboxes = { empty: empty!, grown: grown!, duringRetention: duringRetention! };
    return { history, admin, inbox: inboxes, retention: retained, watchdog };
  });
}
