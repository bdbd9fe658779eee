/**
 * The watchdog against real PostgreSQL: the seed's timeout scenario (docs/lifecycle.md, "Timeouts and dead letters"), cooperation of
 * several instances, surviving a database outage, and a 100 000-job backlog among 1 000 000 rows
 * drained in one sweep through the partial index.
 */
import { sql, type RawBuilder } from 'kysely';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { openDb } from '../../src/db/database.js';
import { duePublishQuery } from '../../src/daemon/publisherRound.js';
import { applyEvent, applyPassedDeadlines } from '../../src/step/index.js';
import { createWatchdog, dueDeadlinesQuery, type Watchdog } from '../../src/daemon/watchdog.js';
import { createMetrics } from '../../src/metrics.js';
import { insertJob, loadAll, snapshotTables } from '../helpers/fixtures.js';
import { createLogSink } from '../helpers/logSink.js';
import { serverUrl } from '../helpers/pgUrls.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcpProxy.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true });

/** A short interval, so "within one interval" is a bound a test can wait for. */
const INTERVAL_MS = 200;
/** How long a test waits for what one interval should achieve: generous, for loaded machines. */
const BOUND_MS = 5_000;

const running: Watchdog[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((w) => w.stop()));
});

function startWatchdog(opts: { db?: typeof t.db; intervalMs?: number; batchSize?: number } = {}) {
  const logs = createLogSink();
  const metrics = createMetrics({}, { defaultMetrics: false });
  const watchdog = createWatchdog({
    db: opts.db ?? t.db,
    logger: logs.logger,
    metrics,
    intervalMs: opts.intervalMs ?? INTERVAL_MS,
    batchSize: opts.batchSize ?? 1000,
  });
  running.push(watchdog);
  watchdog.start();
  return { watchdog, logs, metrics };
}

/** A column value computed by the database; insertJob hands column values to the insert as they are. */
const dbTime = (expr: RawBuilder<Date>) => expr as unknown as Date;
const overdue = dbTime(sql`now() - interval '1 second'`);

async function statusOf(jobId: string): Promise<string> {
  const row = await t.db
    .selectFrom('recognition_job')
    .select('status')
    .where('id', '=', jobId)
    .executeTakeFirstOrThrow();
  return row.status;
}

describe('timeout while waiting for a result', () => {
  it('a processing job whose deadline passed is timeout, TIMEOUT, finished_at set; its file ERROR (TIMEOUT)', async () => {
    const { logs, metrics } = startWatchdog();
    const { jobId } = await insertJob(t.db, { status: 'processing', reply_deadline: overdue });
    const before = await loadAll(t.db, jobId);

    await vi.waitFor(async () => expect(await statusOf(jobId)).toBe('timeout'), {
      timeout: BOUND_MS,
      interval: 20,
    });

    const after = await loadAll(t.db, jobId);
    expect(after.job.finished_at).toBeInstanceOf(Date);
    expect(after.job).toEqual({
      ...before.job,
      status: 'timeout',
      error_code: 'TIMEOUT',
      error_message: 'no result before reply_deadline',
      finished_at: after.job.finished_at,
      updated_at: after.job.updated_at,
    });
    expect(after.job.finished_at!.getTime()).toBeGreaterThan(before.job.reply_deadline!.getTime());
    expect(after.file).toEqual({
      ...before.file,
      status: 'ERROR',
      error_code: 'TIMEOUT',
      updated_at: after.file.updated_at,
    });
    expect(after.transitions).toMatchObject([
      {
        job_id: jobId,
        from_status: 'processing',
        to_status: 'timeout',
        event: 'DEADLINE_PASSED',
        msg_id: null,
      },
    ]);
    // One info line for the decision, with its fields.
    expect(logs.lines.filter((l) => l.job_id === jobId)).toEqual([
      expect.objectContaining({
        level: 'info',
        loop: 'watchdog',
        event: 'DEADLINE_PASSED',
        from: 'processing',
        to: 'timeout',
      }),
    ]);
    expect((await metrics.watchdogTimeouts.get()).values[0]?.value).toBe(1);
  });

  it('a published job (never acked) times out the same way', async () => {
    startWatchdog();
    const { jobId } = await insertJob(t.db, { status: 'published', reply_deadline: overdue });
    await vi.waitFor(async () => expect(await statusOf(jobId)).toBe('timeout'), {
      timeout: BOUND_MS,
      interval: 20,
    });
    const { job, file, transitions } = await loadAll(t.db, jobId);
    expect(job).toMatchObject({ status: 'timeout', error_code: 'TIMEOUT' });
    expect(job.finished_at).toBeInstanceOf(Date);
    expect(file).toMatchObject({ status: 'ERROR', error_code: 'TIMEOUT' });
    expect(transitions.map((r) => [r.from_status, r.to_status, r.event])).toEqual([
      ['published', 'timeout', 'DEADLINE_PASSED'],
    ]);
  });

  it('a result arriving after the timeout changes nothing', async () => {
    startWatchdog();
    const { jobId, fileId } = await insertJob(t.db, { status: 'processing', reply_deadline: overdue });
    await vi.waitFor(async () => expect(await statusOf(jobId)).toBe('timeout'), {
      timeout: BOUND_MS,
      interval: 20,
    });
    const before = await snapshotTables(t.db);
    const outcome = await applyEvent(t.db, jobId, {
      type: 'ENVELOPE_RESULT',
      msgId: `result:${jobId}:1`,
      status: 'done',
      service: { name: 'tabular-parser', version: '2.3.1' },
      resultS3: { bucket: 'arm-ka', key: `results/${fileId}/${jobId}/result.json` },
    });
    expect(outcome).toMatchObject({
      decision: 'late',
      from: 'timeout',
      to: 'timeout',
      reason: 'result_after_final',
    });
    expect(await snapshotTables(t.db)).toEqual(before);
  });

  it('a job whose file now belongs to another job times out without touching the file; a job not yet due stays', async () => {
    const { watchdog } = startWatchdog();
    const stale = await insertJob(t.db, {
      status: 'processing',
      reply_deadline: overdue,
      fileIsCurrent: false,
    });
    const notDue = await insertJob(t.db, {
      status: 'processing',
      reply_deadline: dbTime(sql`now() + interval '10 minutes'`),
    });
    const staleBefore = await loadAll(t.db, stale.jobId);
    const notDueBefore = await loadAll(t.db, notDue.jobId);

    await vi.waitFor(async () => expect(await statusOf(stale.jobId)).toBe('timeout'), {
      timeout: BOUND_MS,
      interval: 20,
    });
    // And one more full sweep after that, so the not-due job had every chance to be picked.
    await watchdog.sweep();

    const staleAfter = await loadAll(t.db, stale.jobId);
    expect(staleAfter.job).toMatchObject({ status: 'timeout', error_code: 'TIMEOUT' });
    expect(staleAfter.file).toEqual(staleBefore.file);
    expect(await loadAll(t.db, notDue.jobId)).toEqual(notDueBefore);
  });

  it('a job the inbox finished first is left alone (final statuses are never overwritten)', async () => {
    const { jobId } = await insertJob(t.db, {
      status: 'done',
      reply_deadline: overdue,
      finished_at: dbTime(sql`now()`),
    });
    const before = await snapshotTables(t.db);
    const { watchdog } = startWatchdog();
    await watchdog.sweep();
    expect(await snapshotTables(t.db)).toEqual(before);
    expect(await statusOf(jobId)).toBe('done');
  });
});

describe('the two ends of the due jobs', () => {
  it("a batch is taken from the oldest or from the newest passed deadline (a sweep's second worker starts at the newest)", async () => {
    const ago = (minutes: number) => dbTime(sql`now() - make_interval(mins => ${minutes})`);
    const oldest = await insertJob(t.db, { status: 'processing', reply_deadline: ago(3) });
    const middle = await insertJob(t.db, { status: 'processing', reply_deadline: ago(2) });
    const newest = await insertJob(t.db, { status: 'published', reply_deadline: ago(1) });
    // Not due for as long as this file runs: a later test counts every due job.
    await insertJob(t.db, { status: 'processing', reply_deadline: dbTime(sql`now() + interval '1 day'`) });

    const fromNewest = await t.db
      .transaction()
      .execute((tx) => applyPassedDeadlines(tx, { limit: 1, from: 'newest' }));
    expect(fromNewest.map((o) => [o.jobId, o.decision])).toEqual([[newest.jobId, 'applied']]);
    const fromOldest = await t.db
      .transaction()
      .execute((tx) => applyPassedDeadlines(tx, { limit: 1, from: 'oldest' }));
    expect(fromOldest.map((o) => [o.jobId, o.decision])).toEqual([[oldest.jobId, 'applied']]);
    expect(await statusOf(middle.jobId)).toBe('processing');
    expect(await statusOf(newest.jobId)).toBe('timeout');
    expect(await statusOf(oldest.jobId)).toBe('timeout');
    // Either end then reaches the one left in the middle (and nothing not yet due).
    const rest = await t.db
      .transaction()
      .execute((tx) => applyPassedDeadlines(tx, { limit: 10, from: 'newest' }));
    expect(rest.map((o) => [o.jobId, o.decision])).toEqual([[middle.jobId, 'applied']]);
  });
});

describe('several instances and failures', () => {
  it('four watchdogs sweeping 2 000 due jobs at once (two with concurrent batches on prepared statements) time each out exactly once', async () => {
    const { rows } = await sql<{ id: string }>`
      WITH o AS (
        INSERT INTO s3_object (bucket, key, bucket_role, created_by)
        SELECT 'arm-ka', 'race/' || g || '-' || gen_random_uuid(), 'uploads', 'race' FROM generate_series(1, 2000) g
        RETURNING id),
      f AS (INSERT INTO stored_file (s3_object_id, original_name, status) SELECT id, 'race.xlsx', 'PROCESSING' FROM o RETURNING id)
      INSERT INTO recognition_job (file_id, attempt, target_service, status, publish_attempts, next_publish_at, published_at, reply_deadline)
      SELECT id, 1, 'tabular-parser', 'processing', 1, NULL, now() - interval '1 hour', now() - interval '1 minute' FROM f
      RETURNING id`.execute(t.db);
    await sql`UPDATE stored_file f SET current_recognition_job_id = j.id FROM recognition_job j
              WHERE j.file_id = f.id AND f.original_name = 'race.xlsx'`.execute(t.db);
    const ids = rows.map((r) => r.id);

    const sink = createLogSink({ level: 'warn' });
    // The daemon's fast path (a pool, prepared statements, batches in flight at once) next to
    // the plain Kysely one.
    const fast = openDb(t.url, { max: 8 });
    const watchdogs = Array.from({ length: 4 }, (_, i) =>
      i % 2 === 0
        ? createWatchdog({ db: t.db, logger: sink.logger, intervalMs: INTERVAL_MS, batchSize: 50 })
        : createWatchdog({
            db: fast.db,
            pool: fast.pool,
            concurrency: 3,
            logger: sink.logger,
            intervalMs: INTERVAL_MS,
            batchSize: 50,
          }),
    );
    const counts = await Promise.all(watchdogs.map((w) => w.sweep())).finally(() => fast.close());

    expect(counts.reduce((a, b) => a + b, 0)).toBe(2000);
    const { rows: tally } = await sql<{ jobs: number; transitions: number }>`
      SELECT (SELECT count(*)::int FROM recognition_job WHERE id = ANY(${ids}::uuid[]) AND status = 'timeout') AS jobs,
             (SELECT count(*)::int FROM recognition_job_transition WHERE job_id = ANY(${ids}::uuid[])) AS transitions`.execute(
      t.db,
    );
    expect(tally[0]).toEqual({ jobs: 2000, transitions: 2000 });
  });

  it('a sweep that fails (database unreachable) is logged and retried at the next tick; the loop lives on', async () => {
    const pgServer = new URL(serverUrl());
    const proxy: TcpProxy = await startTcpProxy({
      host: pgServer.hostname,
      port: Number(pgServer.port || 5432),
    });
    const url = new URL(t.url);
    url.host = `127.0.0.1:${proxy.port}`;
    const viaProxy = openDb(url.toString(), {
      max: 2,
      connectionTimeoutMillis: 1_000,
      onIdleError: () => undefined,
    });
    try {
      proxy.cut();
      const { logs } = startWatchdog({ db: viaProxy.db });
      await vi.waitFor(
        () =>
          expect(logs.lines.filter((l) => l.event === 'watchdog_sweep_failed').length).toBeGreaterThanOrEqual(
            2,
          ),
        { timeout: BOUND_MS, interval: 20 },
      );
      expect(logs.lines.find((l) => l.event === 'watchdog_sweep_failed')).toMatchObject({ level: 'error' });

      const { jobId } = await insertJob(t.db, { status: 'processing', reply_deadline: overdue });
      proxy.restore();
      await vi.waitFor(async () => expect(await statusOf(jobId)).toBe('timeout'), {
        timeout: BOUND_MS,
        interval: 20,
      });
    } finally {
      await Promise.all(running.splice(0).map((w) => w.stop()));
      await viaProxy.close();
      await proxy.close();
    }
  });

  it('stop() waits for the sweep in flight', async () => {
    const { jobId } = await insertJob(t.db, { status: 'processing', reply_deadline: overdue });
    const { watchdog } = startWatchdog({ intervalMs: 60_000 });
    let settled = false;
    void watchdog.sweep().then(() => {
      settled = true;
    });
    await watchdog.stop();
    expect(settled).toBe(true);
    expect(await statusOf(jobId)).toBe('timeout');
  });
});

/** Every index the plan reads, wherever it sits in the tree. */
function indexesOf(plan: unknown): string[] {
  const out: string[] = [];
  const walk = (node: unknown) => {
    if (Array.isArray(node)) return node.forEach(walk);
    if (node && typeof node === 'object') {
      for (const [k, v] of Object.entries(node)) {
        if (k === 'Index Name' && typeof v === 'string') out.push(v);
        else walk(v);
      }
    }
  };
  walk(plan);
  return out;
}

describe('backlog: 100 000 due jobs among 1 000 000 rows', () => {
  it('EXPLAIN shows the partial indexes, and one sweep drains the backlog', async () => {
    const timings: Record<string, number> = {};
    const time = async <T>(label: string, f: () => Promise<T>): Promise<T> => {
      const s = performance.now();
      try {
        return await f();
      } finally {
        timings[label] = Math.round(performance.now() - s);
      }
    };

    // 100 000 files with 10 jobs each: attempts 1-6 done, 7 timeout, 8 published (not due),
    // 9 pending (next_publish_at in an hour), 10 the file's current job, due (published or processing).
    // Ids are sequential (in uuid form) so the inserts append to the indexes instead of splitting pages.
    await time('insert', async () => {
      await sql`
        INSERT INTO s3_object (bucket, key, bucket_role, created_by)
        SELECT 'arm-ka', 'backlog/' || g || '.xlsx', 'uploads', 'backlog' FROM generate_series(1, 100000) g`.execute(
        t.db,
      );
      await sql`
        INSERT INTO stored_file (id, s3_object_id, original_name, status)
        SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(row_number() OVER (ORDER BY id)), 12, '0'))::uuid,
               id, 'backlog.xlsx', 'PROCESSING'
        FROM s3_object WHERE created_by = 'backlog'`.execute(t.db);
      await sql`
        INSERT INTO recognition_job (id, file_id, attempt, target_service, status, publish_attempts, next_publish_at,
                                     published_at, reply_deadline, started_at, finished_at)
        SELECT ('00000000-0000-4000-9000-' || lpad(to_hex(f.n * 16 + a), 12, '0'))::uuid, f.id, a, 'tabular-parser',
               CASE WHEN a <= 6 THEN 'done' WHEN a = 7 THEN 'timeout' WHEN a = 8 THEN 'published' WHEN a = 9 THEN 'pending'
                    WHEN f.n % 2 = 0 THEN 'published' ELSE 'processing' END,
               CASE WHEN a = 9 THEN 0 ELSE 1 END,
               CASE WHEN a = 9 THEN now() + interval '1 hour' END,
               CASE WHEN a <> 9 THEN now() - interval '2 hours' END,
               CASE WHEN a = 8 THEN now() + interval '1 hour'
                    WHEN a = 9 THEN NULL
                    ELSE now() - interval '1 hour' + f.n * interval '1 millisecond' END,
               CASE WHEN a = 10 AND f.n % 2 = 1 THEN now() - interval '90 minutes' END,
               CASE WHEN a <= 7 THEN now() - interval '30 minutes' END
        FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM stored_file WHERE original_name = 'backlog.xlsx') f
        CROSS JOIN generate_series(1, 10) a
        ORDER BY f.n, a`.execute(t.db);
      await sql`
        UPDATE stored_file f SET current_recognition_job_id = j.id
        FROM recognition_job j
        WHERE j.file_id = f.id AND j.attempt = 10 AND f.original_name = 'backlog.xlsx'`.execute(t.db);
    });
    await time('analyze', () => sql`ANALYZE s3_object, stored_file, recognition_job`.execute(t.db));
    const { rows: counted } = await sql<{
      n: number;
    }>`SELECT count(*)::int AS n FROM recognition_job`.execute(t.db);
    expect(counted[0]!.n).toBeGreaterThanOrEqual(1_000_000);

    // The real queries, explained.
    const { rows: wPlan } = await sql<{
      'QUERY PLAN': unknown;
    }>`EXPLAIN (FORMAT JSON) ${dueDeadlinesQuery(1000)}`.execute(t.db);
    expect(indexesOf(wPlan)).toContain('recognition_job_reply_deadline_due_idx');
    const { rows: pPlan } = await sql<{
      'QUERY PLAN': unknown;
    }>`EXPLAIN (FORMAT JSON) ${duePublishQuery(100)}`.execute(t.db);
    expect(indexesOf(pPlan)).toContain('recognition_job_next_publish_due_idx');

    // One sweep drains it all.
    const sink = createLogSink({ level: 'warn' });
    const metrics = createMetrics({}, { defaultMetrics: false });
    // As the daemon runs it: prepared statements on a pool, two batches in flight.
    const fast = openDb(t.url, { max: 4 });
    const watchdog = createWatchdog({
      db: fast.db,
      pool: fast.pool,
      concurrency: 2,
      logger: sink.logger,
      metrics,
      intervalMs: 30_000,
      batchSize: 1000,
    });
    const timedOut = await time('sweep', () => watchdog.sweep()).finally(() => fast.close());
    expect(timedOut).toBe(100_000);

    const { rows: after } = await sql<{ status: string; n: number }>`
      SELECT j.status, count(*)::int AS n FROM recognition_job j JOIN stored_file f ON f.id = j.file_id
      WHERE f.original_name = 'backlog.xlsx' GROUP BY j.status ORDER BY j.status`.execute(t.db);
    expect(Object.fromEntries(after.map((r) => [r.status, r.n]))).toEqual({
      done: 600_000,
      pending: 100_000,
      published: 100_000, // attempt 8: not due
      timeout: 200_000, // attempt 7 before, attempt 10 now
    });
    const { rows: files } = await sql<{ status: string; error_code: string | null; n: number }>`
      SELECT status, error_code, count(*)::int AS n FROM stored_file WHERE original_name = 'backlog.xlsx'
      GROUP BY status, error_code`.execute(t.db);
    expect(files).toEqual([{ status: 'ERROR', error_code: 'TIMEOUT', n: 100_000 }]);
    const { rows: due } = await dueDeadlinesQuery(1000).execute(t.db);
    expect(due).toEqual([]);
    expect((await metrics.watchdogTimeouts.get()).values[0]?.value).toBe(100_000);
    expect(
      (await metrics.watchdogSweepDuration.get()).values.find((v) => v.metricName?.endsWith('_count'))?.value,
    ).toBe(1);

    process.stderr.write(`watchdog backlog timings (ms): ${JSON.stringify(timings)}\n`);
  }, 180_000);
});
