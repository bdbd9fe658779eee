/**
 * The watchdog at scale: `rows` jobs (default 1 000 000), of which `due` are `processing` with a
 * passed `reply_deadline`; one real sweep (`createWatchdog(...).sweep()`, the daemon's batch size,
 * through the step: lock, DEADLINE_PASSED, job row, file to ERROR, transition) times them all out.
 * Then idle sweeps (nothing due) at the same size: the median of several.
 *
 * Each repeated (target-size) sweep is followed by its ceiling, on as many newly due rows and the
 * same preparation: {@link RAW_SWEEP_SQL}, PostgreSQL alone making the same changes in one
 * statement (no round trips, no daemon). It says what the machine's database can do, so the
 * daemon's time can be read against it, as the raw consumer does for the inbox.
 *
 * The table is shaped like a production one: most jobs finished (`done`), a band in flight
 * (`published` with a future deadline, which the partial index holds too), and the due ones.
 * Seeding is set-based SQL with triggers off (`session_replication_role = replica`); the second
 * scenario turns finished rows back into due ones the same way, then the table is vacuumed and
 * analysed as autovacuum would have.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import type pg from 'pg';
import { inPgTransaction } from '../src/db/pgTransaction.js';
import { openDb } from '../src/db/database.js';
import { createLogger } from '../src/logger.js';
import { createMetrics } from '../src/metrics.js';
import { createWatchdog } from '../src/daemon/watchdog.js';
import { checkpoint, truncateAll, type BenchEnv } from './env.js';

/** What the watchdog section needs of the bench's environment. */
export type WatchdogEnv = Pick<BenchEnv, 'pool' | 'config'>;
import { backendPids, startCpuSplit, totalCpuMs, type CpuSplit } from './processCpu.js';

/** One timed sweep with due jobs. */
export interface SweepResult {
  rows: number;
  due: number;
  timedOut: number;
  seconds: number;
  perSecond: number;
  batchSize: number;
  /** WAL the sweep wrote (after the checkpoint taken before it: full-page images included). */
  walBytes: number;
  /** CPU per timed-out job: this process (the watchdog) and its PostgreSQL backends. */
  cpu: CpuSplit;
}

/** The ceiling: one SQL statement timing out `due` jobs, the same changes as the step's. */
export interface RawSweepResult {
  due: number;
  seconds: number;
  walBytes: number;
  /** CPU of its backend per job, µs (null where /proc cannot be read). */
  postgresUs: number | null;
}

/** Idle sweeps (nothing due). */
export interface IdleResult {
  rows: number;
  sweeps: number;
  medianMs: number;
  minMs: number;
  maxMs: number;
}

/** What the watchdog section measures. */
export interface WatchdogResult {
  sweeps: SweepResult[];
  rawSweeps: RawSweepResult[];
  idle: IdleResult;
}

/** Jobs in flight (published, deadline ahead): they sit in the watchdog's partial index. */
const IN_FLIGHT = 20_000;

/** Seed `rows` jobs: the first `due` ones due, then `IN_FLIGHT` published, the rest done. */
export async function seedWatchdogTable(pool: pg.Pool, rows: number, due: number): Promise<void> {
  await truncateAll(pool);
  await inPgTransaction(pool, async (client: pg.PoolClient) => {
    await client.query('SET LOCAL session_replication_role = replica');
    await client.query(
      `CREATE TEMP TABLE seed ON COMMIT DROP AS
       SELECT g, gen_random_uuid() AS job_id, gen_random_uuid() AS file_id,
              CASE WHEN g <= $2 THEN 'processing' WHEN g <= $2 + $3 THEN 'published' ELSE 'done' END AS status
       FROM generate_series(1, $1::integer) g`,
      [rows, due, IN_FLIGHT],
    );
    await client.query(
      `INSERT INTO s3_object (bucket, key, bucket_role, created_by)
       SELECT 'arm-ka', 'uploads/' || file_id || '.xlsx', 'uploads', 'bench' FROM seed ORDER BY g`,
    );
    // Identities restarted at 1, so upload g has id g.
    await client.query(
      `INSERT INTO stored_file (id, s3_object_id, original_name, status, current_recognition_job_id)
       SELECT file_id, g, 'report.xlsx', CASE status WHEN 'published' THEN 'QUEUED' ELSE 'PROCESSING' END, job_id FROM seed`,
    );
    await client.query(
      `INSERT INTO recognition_job (id, file_id, attempt, target_service, status, service_name, service_version,
                                    publish_attempts, next_publish_at, published_at, reply_deadline, started_at,
                                    finished_at, result_msg_id)
       SELECT job_id, file_id, 1, 'tabular-parser', status,
              CASE WHEN status <> 'published' THEN 'tabular-parser' END, CASE WHEN status <> 'published' THEN '2.3.1' END,
              1, NULL,
              now() - interval '20 minutes',
              CASE WHEN status = 'processing' THEN now() - interval '1 minute' - g * interval '1 millisecond'
                   ELSE now() + interval '10 minutes' END,
              CASE WHEN status <> 'published' THEN now() - interval '19 minutes' END,
              CASE WHEN status = 'done' THEN now() - interval '18 minutes' END,
              CASE WHEN status = 'done' THEN 'result:' || job_id || ':1' END
       FROM seed`,
    );
  });
  await pool.query('VACUUM ANALYZE s3_object, stored_file, recognition_job, recognition_job_transition');
}

/** Make `due` more jobs due by turning finished (`done`) ones back into overdue `processing` ones. */
export async function makeDue(pool: pg.Pool, due: number): Promise<void> {
  await inPgTransaction(pool, async (client: pg.PoolClient) => {
    await client.query('SET LOCAL session_replication_role = replica');
    await client.query(
      `WITH picked AS (SELECT id, file_id FROM recognition_job WHERE status = 'done' ORDER BY id LIMIT $1),
       jobs AS (
         UPDATE recognition_job j SET status = 'processing', finished_at = NULL, result_msg_id = NULL,
                reply_deadline = now() - interval '1 minute'
         FROM picked WHERE j.id = picked.id
       )
       UPDATE stored_file f SET status = 'PROCESSING', error_code = NULL FROM picked WHERE f.id = picked.file_id`,
      [due],
    );
  });
  await pool.query('VACUUM ANALYZE stored_file, recognition_job');
}

/**
 * The watchdog's work in one statement, nothing else: lock the due jobs (oldest deadline first, as
 * the step does), set what `DEADLINE_PASSED` sets (status, finished_at, error code and message),
 * turn each current file to ERROR (TIMEOUT), log each transition. No round trips, no JSON, no
 * machine: what PostgreSQL alone takes for these changes on this machine.
 */
export const RAW_SWEEP_SQL = `
  WITH due AS (
    SELECT j.id, j.file_id, j.status FROM recognition_job j
    WHERE j.status IN ('published', 'processing') AND j.reply_deadline < now()
    ORDER BY j.reply_deadline
    LIMIT $1
    FOR UPDATE OF j
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

/** Run {@link RAW_SWEEP_SQL} for `due` jobs on one connection; CPU of its backend measured. */
async function rawSweep(pool: pg.Pool, due: number): Promise<Omit<RawSweepResult, 'walBytes'>> {
  const client = await pool.connect();
  try {
    const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    const cpu0 = totalCpuMs([pid]);
    const started = performance.now();
    const res = await client.query(RAW_SWEEP_SQL, [due]);
    const seconds = (performance.now() - started) / 1000;
    const cpu1 = totalCpuMs([pid]);
    if (res.rowCount !== due) throw new Error(`raw sweep: ${res.rowCount} transitions, want ${due}`);
    return { due, seconds, postgresUs: cpu0 === null || cpu1 === null ? null : ((cpu1 - cpu0) * 1000) / due };
  } finally {
    client.release();
  }
}

/** CPU ms of the backends of `applicationName` so far (per pid, summed). */
async function backendCpuMs(env: WatchdogEnv, applicationName: string): Promise<number | null> {
  return totalCpuMs(await backendPids(env.pool, applicationName));
}

async function count(pool: pg.Pool, sql: string): Promise<number> {
  const { rows } = await pool.query<{ n: string }>(sql);
  return Number(rows[0]!.n);
}

/**
 * Both scenarios and the idle sweeps on one table of `rows` jobs: `dues[0]` due, swept; then
 * `dues[1]` made due, swept; then `idleSweeps` sweeps with nothing due.
 */
export async function measureWatchdog(
  env: WatchdogEnv,
  rows: number,
  dues: readonly number[],
  idleSweeps: number,
  log: (line: string) => void,
): Promise<WatchdogResult> {
  const cfg = env.config({ LOG_LEVEL: 'warn' });
  const dir = mkdtempSync(join(tmpdir(), 'bench-log-'));
  const dest = pino.destination({ dest: join(dir, 'daemon.log'), sync: true });
  const logger = createLogger({ level: cfg.LOG_LEVEL, destination: dest });
  const db = openDb(cfg.DATABASE_URL, { max: cfg.DB_POOL_SIZE, applicationName: 'bench-watchdog' });
  const watchdog = createWatchdog({
    db: db.db,
    pool: db.pool,
    logger,
    metrics: createMetrics({}, { defaultMetrics: false }),
    intervalMs: cfg.WATCHDOG_INTERVAL_MS,
    batchSize: cfg.WATCHDOG_BATCH_SIZE,
    concurrency: cfg.WATCHDOG_CONCURRENCY,
  });
  const sweeps: SweepResult[] = [];
  const rawSweeps: RawSweepResult[] = [];
  const lsn = async () =>
    (await env.pool.query<{ l: string }>('SELECT pg_current_wal_lsn()::text AS l')).rows[0]!.l;
  const walSince = async (lsn0: string) =>
    Number(
      (
        await env.pool.query<{ b: string }>(`SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1)::bigint AS b`, [
          lsn0,
        ])
      ).rows[0]!.b,
    );
  /** `due` more rows due; then every sweep starts from the same condition as the first. */
  async function prepare(due: number, first: boolean): Promise<void> {
    const t0 = performance.now();
    if (first) await seedWatchdogTable(env.pool, rows, due);
    else {
      await makeDue(env.pool, due);
      // The previous sweep's and makeDue's dead row versions vacuumed away (as autovacuum
      // would), statistics fresh.
      await env.pool.query(
        'VACUUM ANALYZE s3_object, stored_file, recognition_job, recognition_job_transition',
      );
    }
    await checkpoint(env.pool);
    log(
      `  ${first ? 'seeded' : 'made due'}: ${rows} rows, ${due} due (${((performance.now() - t0) / 1000).toFixed(1)} s)`,
    );
  }
  try {
    for (const [i, due] of dues.entries()) {
      await prepare(due, i === 0);
      const lsn0 = await lsn();
      // Open the sweep's connections first (a running daemon has them; the pool closes idle ones
      // while the table is prepared), so their CPU is counted as a difference over the sweep.
      const clients = await Promise.all(
        Array.from({ length: cfg.WATCHDOG_CONCURRENCY }, () => db.pool.connect()),
      );
      clients.forEach((c) => c.release());
      const pg0 = await backendCpuMs(env, 'bench-watchdog');
      const split = startCpuSplit(null);
      const started = performance.now();
      const timedOut = await watchdog.sweep();
      const seconds = (performance.now() - started) / 1000;
      const walBytes = await walSince(lsn0);
      log(`  daemon's sweep: ${seconds.toFixed(2)} s, WAL ${(walBytes / 2 ** 20).toFixed(0)} MiB`);
      const cpu = split.end([], due);
      const pg1 = await backendCpuMs(env, 'bench-watchdog');
      cpu.postgresUs = pg0 === null || pg1 === null ? null : ((pg1 - pg0) * 1000) / due;
      const files = await count(
        env.pool,
        `SELECT count(*) AS n FROM stored_file WHERE status = 'ERROR' AND error_code = 'TIMEOUT'`,
      );
      const jobs = await count(
        env.pool,
        `SELECT count(*) AS n FROM recognition_job WHERE status = 'timeout'`,
      );
      const expected =
        dues.slice(0, i + 1).reduce((a, b) => a + b, 0) + rawSweeps.reduce((a, r) => a + r.due, 0);
      if (timedOut !== due || files !== expected || jobs !== expected) {
        throw new Error(
          `watchdog sweep: timed out ${timedOut} of ${due}; ${jobs} jobs timeout, ${files} files ERROR (want ${expected})`,
        );
      }
      sweeps.push({
        rows,
        due,
        timedOut,
        seconds,
        perSecond: due / seconds,
        batchSize: cfg.WATCHDOG_BATCH_SIZE,
        walBytes,
        cpu,
      });
      // The repeated (target) sweeps take turns with their ceiling, on as many newly due rows.
      if (i > 0) {
        await prepare(due, false);
        const rawLsn0 = await lsn();
        const raw = await rawSweep(env.pool, due);
        const rawWal = await walSince(rawLsn0);
        log(`  raw SQL sweep: ${raw.seconds.toFixed(2)} s, WAL ${(rawWal / 2 ** 20).toFixed(0)} MiB`);
        rawSweeps.push({ ...raw, walBytes: rawWal });
      }
    }
    await env.pool.query('VACUUM ANALYZE stored_file, recognition_job');
    const times: number[] = [];
    for (let i = 0; i < idleSweeps + 3; i++) {
      const started = performance.now();
      const n = await watchdog.sweep();
      const ms = performance.now() - started;
      if (n !== 0) throw new Error(`idle sweep timed out ${n} jobs`);
      if (i >= 3) times.push(ms); // the first ones warm the connection and the plan
    }
    times.sort((a, b) => a - b);
    return {
      sweeps,
      rawSweeps,
      idle: {
        rows,
        sweeps: times.length,
        medianMs: times[Math.floor(times.length / 2)]!,
        minMs: times[0]!,
        maxMs: times[times.length - 1]!,
      },
    };
  } finally {
    await watchdog.stop();
    await db.close();
    dest.end();
    rmSync(dir, { recursive: true, force: true });
  }
}
