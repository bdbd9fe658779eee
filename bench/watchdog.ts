/**
 * The watchdog against its ceiling (bench/README.md, "Watchdog"): on `rows` jobs, `rounds` times
 * `due` overdue jobs swept by the daemon's watchdog, then as many by {@link RAW_SWEEP_SQL}, each after
 * a vacuum and a checkpoint; in a process of its own (`watchdog.js <json>`, a JSON line on stdout).
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import type pg from 'pg';
import { inPgTransaction } from '../src/db/pgTransaction.js';
import { openDb } from '../src/db/database.js';
import { createLogger } from '../src/logger.js';
import { createMetrics } from '../src/metrics.js';
import { createWatchdog } from '../src/daemon/watchdog.js';
import { applyV8Flags } from '../src/process/v8Flags.js';
import { benchPool, checkpoint, configFor, vacuumAnalyze } from './env.js';
import { insertOpenJobs, newJobs, truncateAll } from '../workshop/benchFixtures.js';

/** One timed sweep: the daemon's, or the raw SQL statement's (whose batch size is null). */
export type SweepResult = { rows: number; due: number; seconds: number; batchSize: number | null };
/** What the section measures: the daemon's sweeps and the raw ones, in turns. */
export type WatchdogResult = Record<'sweeps' | 'rawSweeps', SweepResult[]>;
/** The section's process: `keep` sweeps among the rows there (a history), `daemonOnly` times no raw sweep. */
type WatchdogArgs = Record<'databaseUrl' | 'natsUrl', string> &
  Record<'rows' | 'due' | 'rounds', number> & { keep?: boolean; daemonOnly?: boolean };

/** Jobs in flight (published, deadline a day ahead): they sit in the watchdog's partial index. */
const IN_FLIGHT = 20_000;

/** Seed `rows` jobs: `IN_FLIGHT` published, the rest done. */
async function seed(pool: pg.Pool, rows: number): Promise<void> {
  await truncateAll(pool);
  await inPgTransaction(pool, async (client: pg.PoolClient) => {
    await client.query('SET LOCAL session_replication_role = replica');
    await client.query(
      `CREATE TEMP TABLE seed ON COMMIT DROP AS
       SELECT g, recognition_uuid_v7() AS job_id, recognition_uuid_v7() AS file_id,
              CASE WHEN g <= $2 THEN 'published' ELSE 'done' END AS status
       FROM generate_series(1, $1::integer) g`,
      [rows, IN_FLIGHT],
    );
    await client.query(`INSERT INTO s3_object (bucket, key, bucket_role, created_by)
       SELECT 'arm-ka', 'uploads/' || file_id || '.xlsx', 'uploads', 'bench' FROM seed ORDER BY g`);
    // Identities restarted at 1, so upload g has id g.
    await client.query(`INSERT INTO stored_file (id, s3_object_id, original_name, status, current_recognition_job_id)
       SELECT file_id, g, 'report.xlsx', CASE status WHEN 'published' THEN 'QUEUED' ELSE 'PROCESSING' END, job_id FROM seed`);
    await client.query(
      `INSERT INTO recognition_job (id, file_id, attempt, target_service, status, service_name, service_version,
                                    publish_attempts, next_publish_at, published_at, reply_deadline, started_at,
                                    finished_at, result_msg_id)
       SELECT job_id, file_id, 1, 'tabular-parser', status,
              CASE WHEN status = 'done' THEN 'tabular-parser' END, CASE WHEN status = 'done' THEN '2.3.1' END,
              1, NULL, now() - interval '20 minutes', now() + interval '1 day',
              CASE WHEN status = 'done' THEN now() - interval '19 minutes' END,
              CASE WHEN status = 'done' THEN now() - interval '18 minutes' END,
              CASE WHEN status = 'done' THEN 'result:' || job_id || ':1' END
       FROM seed`,
    );
  });
}

/** Add `due` new overdue jobs (a silent service's), then vacuum, analyse and checkpoint. */
async function makeDue(pool: pg.Pool, due: number): Promise<void> {
  await inPgTransaction(pool, (client: pg.PoolClient) => insertOpenJobs(client, newJobs(due), 'overdue'));
  await vacuumAnalyze(pool).then(() => checkpoint(pool));
}

/** The watchdog's changes in one statement: what `DEADLINE_PASSED` sets, oldest deadline first. */
export const RAW_SWEEP_SQL = `
  WITH due AS (
    SELECT j.id, j.file_id, j.status FROM recognition_job j
    WHERE j.status IN ('published', 'processing') AND j.reply_deadline < now()
    ORDER BY j.reply_deadline LIMIT $1 FOR UPDATE OF j
  ),
  job AS (
    UPDATE recognition_job j
    SET status = 'timeout', finished_at = now(), error_code = 'TIMEOUT',
        error_message = 'no result before reply_deadline', updated_at = now()
    FROM due WHERE j.id = due.id
  ),
  file AS (
    UPDATE stored_file f SET status = 'ERROR', error_code = 'TIMEOUT', updated_at = now()
    FROM due WHERE f.id = due.file_id AND f.current_recognition_job_id = due.id
  )
  INSERT INTO recognition_job_transition (job_id, from_status, to_status, event)
  SELECT id, status, 'timeout', 'DEADLINE_PASSED' FROM due`;

/** Jobs timed out and files in ERROR (TIMEOUT) so far: a sweep adds as many of each. */
async function timedOut(pool: pg.Pool): Promise<Record<'jobs' | 'files', number>> {
  const { rows } = await pool.query<{ jobs: number; files: number }>(
    `SELECT (SELECT count(*) FROM recognition_job WHERE status = 'timeout')::int AS jobs,
            (SELECT count(*) FROM stored_file WHERE status = 'ERROR' AND error_code = 'TIMEOUT')::int AS files`,
  );
  return rows[0]!;
}

/** The section: seed, then `rounds` × (the daemon's sweep, the raw SQL sweep) of `due` jobs. */
export async function measureWatchdog(a: WatchdogArgs, log: (line: string) => void): Promise<WatchdogResult> {
  const pool = benchPool(a.databaseUrl, 'bench');
  const cfg = configFor(a.databaseUrl, a.natsUrl)({ LOG_LEVEL: 'warn' });
  const db = openDb(cfg.DATABASE_URL, { max: cfg.DB_POOL_SIZE, applicationName: 'bench-watchdog' });
  const logger = createLogger({ level: cfg.LOG_LEVEL, destination: pino.destination({ dest: '/dev/null' }) });
  const metrics = createMetrics({}, { defaultMetrics: false });
  const [intervalMs, batchSize] = [cfg.WATCHDOG_INTERVAL_MS, cfg.WATCHDOG_BATCH_SIZE];
  const tuning = { intervalMs, batchSize, concurrency: cfg.WATCHDOG_CONCURRENCY };
  const watchdog = createWatchdog({ db: db.db, pool: db.pool, logger, metrics, ...tuning });
  const result: WatchdogResult = { sweeps: [], rawSweeps: [] };
  /** Time `sweep` on `due` freshly due rows and check what it did. */
  async function timed(raw: boolean, sweep: () => Promise<number>): Promise<void> {
    await makeDue(pool, a.due);
    const before = await timedOut(pool);
    // The sweep's connections open first, as a running daemon's are.
    const clients = await Promise.all(Array.from({ length: tuning.concurrency }, () => db.pool.connect()));
    clients.forEach((c) => c.release());
    const started = performance.now();
    const n = await sweep();
    const seconds = (performance.now() - started) / 1000;
    const after = await timedOut(pool);
    if (n !== a.due || after.jobs !== before.jobs + a.due || after.files !== before.files + a.due)
      throw new Error(`a sweep timed out ${n} of ${a.due} due jobs`);
    const sweepResult = { rows: a.rows, due: a.due, seconds, batchSize: raw ? null : batchSize };
    (raw ? result.rawSweeps : result.sweeps).push(sweepResult);
    log(`  ${raw ? 'raw SQL sweep' : "daemon's sweep"}: ${seconds.toFixed(2)} s`);
  }
  try {
    if (!a.keep) await seed(pool, a.rows);
    // Untimed: the watchdog's connections opened, its statements prepared, the JIT warm.
    await makeDue(pool, Math.min(1_000, a.due));
    await watchdog.sweep();
    const raw = await pool.connect();
    try {
      for (let round = 1; round <= a.rounds; round++) {
        log(`  round ${round} of ${a.rounds}: ${a.due} due among ${a.rows} rows`);
        await timed(false, () => watchdog.sweep());
        if (!a.daemonOnly)
          await timed(true, async () => (await raw.query(RAW_SWEEP_SQL, [a.due])).rowCount ?? 0);
      }
    } finally {
      raw.release();
    }
    return result;
  } finally {
    await watchdog.stop();
    await db.close();
    await pool.end();
  }
}

/** Run the section in a process of its own; its progress on this process's stderr. */
export function measureWatchdogInChild(a: WatchdogArgs): WatchdogResult {
  const args = [fileURLToPath(import.meta.url), JSON.stringify(a)];
  const r = spawnSync(process.execPath, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  if (r.status !== 0) throw new Error(`the watchdog section failed (${r.status}); its output is above`);
  return JSON.parse(r.stdout) as WatchdogResult;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  // The sweep runs in this process as it runs in the daemon's: with its V8 settings.
  applyV8Flags();
  const log = (l: string) => process.stderr.write(l + '\n');
  process.stdout.write(
    JSON.stringify(await measureWatchdog(JSON.parse(process.argv[2]!) as WatchdogArgs, log)) + '\n',
  );
}
