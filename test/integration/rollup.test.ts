/**
 * The console's rollup against real PostgreSQL: transitions written through the step by several
 * writers at once (locked and unlocked paths, the watchdog's), while two rollup loops run beside
 * them, end up in `recognition_transition_minute` exactly as a GROUP BY over
 * `recognition_job_transition` counts them, with the same latency sums; a delta whose transaction
 * has not committed is taken once it has; a second instance finds the rollup busy; old minutes
 * expire; and migration 0021's down removes all it made.
 */
import { randomUUID } from 'node:crypto';
import { sql, Migrator, type Kysely } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { JobEventInput } from '../../machines/index.js';
import { createRollup } from '../../src/daemon/rollup.js';
import { createDatabaseIfMissing, dropDatabase, migrateToLatest, openDb } from '../../src/db/database.js';
import { migrations } from '../../src/db/migrations/index.js';
import { LATENCY_BUCKET_BOUNDS_MS, rollUpTransitions } from '../../src/db/rollup.js';
import type { Database } from '../../src/db/schema.js';
import { withPgClient } from '../../src/db/pgTransaction.js';
import {
  applyEvent,
  applyEvents,
  applyPassedDeadlines,
  applyUnlocked,
  pgStepSql,
} from '../../src/step/index.js';
import { insertJob, RESULTS } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';
import { createLogSink } from '../helpers/logSink.js';
import { dbUrl } from '../helpers/pgUrls.js';

const t = useHarness({ database: { max: 12 } });

const ack = (jobId: string, service: { name: string; version: string }): JobEventInput => ({
  type: 'ENVELOPE_PROCESSING',
  msgId: `ack:${jobId}:1`,
  service,
});
const result = (
  jobId: string,
  fileId: string,
  service: { name: string; version: string },
  status: 'done' | 'needs_check' | 'error',
): JobEventInput => ({
  type: 'ENVELOPE_RESULT',
  msgId: `result:${jobId}:1`,
  status,
  service,
  ...(status === 'error'
    ? { error: { code: 'BROKEN', message: 'x' } }
    : {
        resultS3: { bucket: 'arm-ka', key: `results/${fileId}/${jobId}/result.json` },
        resultSchemaVersion: '1.0',
      }),
});

/** Roll up until nothing is left; the deltas taken. */
async function drainRollup(db: Kysely<Database>): Promise<number> {
  let total = 0;
  for (;;) {
    const batch = await rollUpTransitions(db);
    expect(batch.busy).toBe(false);
    total += batch.deltas;
    if (batch.deltas === 0) return total;
  }
}

interface Cell {
  minute: string;
  service: string;
  service_version: string;
  from_status: string;
  to_status: string;
  event: string;
  n: string;
  ack_n: string;
  ack_ms_sum: string;
  ack_ms_max: string | null;
  result_n: string;
  result_ms_sum: string;
  result_ms_max: string | null;
  ack_placed: string;
  result_placed: string;
}

/** The rollup's rows, with how many times their latency counts hold. */
async function rolledUp(): Promise<Cell[]> {
  const { rows } = await sql<Cell>`
    SELECT minute::text, service, service_version, from_status, to_status, event, n::text,
           ack_n::text, ack_ms_sum::text, ack_ms_max::text, result_n::text, result_ms_sum::text,
           result_ms_max::text,
           coalesce((SELECT sum(x) FROM unnest(ack_buckets) x), 0)::text AS ack_placed,
           coalesce((SELECT sum(x) FROM unnest(result_buckets) x), 0)::text AS result_placed
    FROM recognition_transition_minute
    ORDER BY minute, service, service_version, from_status, to_status, event`.execute(t.db);
  return rows;
}

/** The same figures counted from the transition log and the job rows. */
async function counted(): Promise<Cell[]> {
  const final = sql.join(['done', 'needs_check', 'error', 'timeout', 'dlq'].map((s) => sql.lit(s)));
  const { rows } = await sql<Cell>`
    WITH x AS (
      SELECT date_trunc('minute', t.at, 'UTC') AS minute, j.target_service AS service,
             coalesce(j.service_version, '') AS service_version, t.from_status, t.to_status, t.event,
             CASE WHEN t.to_status IN (${final}) AND t.from_status NOT IN (${final})
                  THEN round(extract(epoch FROM j.started_at - j.published_at) * 1000) END AS ack_ms,
             CASE WHEN t.to_status IN (${final}) AND t.from_status NOT IN (${final})
                  THEN round(extract(epoch FROM j.finished_at - j.published_at) * 1000) END AS result_ms
      FROM recognition_job_transition t JOIN recognition_job j ON j.id = t.job_id
    )
    SELECT minute::text, service, service_version, from_status, to_status, event, count(*)::text AS n,
           count(ack_ms)::text AS ack_n, coalesce(sum(ack_ms), 0)::text AS ack_ms_sum, max(ack_ms)::text AS ack_ms_max,
           count(result_ms)::text AS result_n, coalesce(sum(result_ms), 0)::text AS result_ms_sum,
           max(result_ms)::text AS result_ms_max,
           count(ack_ms)::text AS ack_placed, count(result_ms)::text AS result_placed
    FROM x GROUP BY minute, service, service_version, from_status, to_status, event
    ORDER BY minute, service, service_version, from_status, to_status, event`.execute(t.db);
  return rows;
}

describe('the transition rollup', () => {
  it('counts every transition once, whatever the writers and rollups running beside each other', async () => {
    const services = [
      { name: 'svc-a', version: '1.0' },
      { name: 'svc-a', version: '2.0' },
      { name: 'svc-b', version: '7' },
    ];
    // 1. Jobs: published a while ago; every fifth past its reply deadline (the watchdog's).
    const jobs = [];
    for (let i = 0; i < 120; i++) {
      const service = services[i % services.length]!;
      const late = i % 5 === 0;
      const job = await insertJob(t.db, {
        status: 'published',
        target_service: service.name,
        published_at: sql<Date>`now() - ${`${(i % 7) * 3 + 1} seconds`}::interval` as never,
        ...(late ? { reply_deadline: sql<Date>`now() - interval '1 second'` as never } : {}),
      });
      jobs.push({ ...job, service, late });
    }
    // 2. Two rollup loops, as two instances would run them, with small batches.
    const logs = createLogSink({ level: 'warn' });
    const loops = [0, 1].map(() =>
      createRollup({ db: t.db, logger: logs.logger, intervalMs: 1, rollup: { batchSize: 7 } }),
    );
    for (const loop of loops) loop.start();
    // 3. Four writers at once: two on the locked path, two on the unlocked path in batches, and
    // the watchdog's sweeps.
    const open = jobs.filter((j) => !j.late);
    const lanes = [0, 1, 2, 3].map((w) => open.filter((_, k) => k % 4 === w));
    const statuses = ['done', 'needs_check', 'error'] as const;
    const locked = async (lane: typeof open) => {
      for (const [k, j] of lane.entries()) {
        await applyEvent(t.db, j.jobId, ack(j.jobId, j.service), RESULTS);
        await applyEvent(t.db, j.jobId, ack(j.jobId, j.service), RESULTS); // a duplicate: no transition
        await applyEvent(t.db, j.jobId, result(j.jobId, j.fileId, j.service, statuses[k % 3]!), RESULTS);
      }
    };
    const unlocked = async (lane: typeof open) => {
      for (let k = 0; k < lane.length; k += 5) {
        const batch = lane.slice(k, k + 5);
        for (const events of [
          batch.map((j) => ({ jobId: j.jobId, event: ack(j.jobId, j.service) })),
          batch.map((j, m) => ({
            jobId: j.jobId,
            event: result(j.jobId, j.fileId, j.service, statuses[(k + m) % 3]!),
          })),
        ]) {
          const out = await withPgClient(t.pool, (client) =>
            applyUnlocked(pgStepSql(client), events, RESULTS),
          );
          if (out === null) await t.db.transaction().execute((tx) => applyEvents(tx, events, RESULTS));
        }
      }
    };
    const watchdog = async () => {
      for (let k = 0; k < 30; k++)
        await t.db.transaction().execute((tx) => applyPassedDeadlines(tx, { limit: 3, from: 'oldest' }));
    };
    await Promise.all([
      locked(lanes[0]!),
      locked(lanes[1]!),
      unlocked(lanes[2]!),
      unlocked(lanes[3]!),
      watchdog(),
    ]);
    await Promise.all(loops.map((l) => l.stop()));
    expect(logs.lines.filter((l) => l.event === 'rollup_failed')).toEqual([]);
    // 4. What the loops left, rolled up; then the rollup equals the log, cell by cell.
    await drainRollup(t.db);
    const log = await counted();
    expect(log.reduce((a, c) => a + Number(c.n), 0)).toBe(96 * 2 + 24);
    expect(await rolledUp()).toEqual(log);
    expect(
      (await sql<{ n: string }>`SELECT count(*) AS n FROM recognition_transition_delta`.execute(t.db))
        .rows[0]!.n,
    ).toBe('0');
  });

  it('takes a delta whose transaction commits after a rollup, once it has committed', async () => {
    await drainRollup(t.db);
    const service = { name: 'svc-c', version: '1' };
    const job = await insertJob(t.db, { status: 'published', target_service: service.name });
    let wrote!: () => void;
    const written = new Promise<void>((r) => (wrote = r));
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const writer = t.db.transaction().execute(async (tx) => {
      await applyEvents(tx, [{ jobId: job.jobId, event: ack(job.jobId, service) }]);
      wrote();
      await released;
    });
    await written;
    // The rollup neither waits for the writer nor takes its delta.
    expect(await rollUpTransitions(t.db)).toEqual({ deltas: 0, expired: 0, busy: false });
    release();
    await writer;
    expect(await rollUpTransitions(t.db)).toEqual({ deltas: 1, expired: 0, busy: false });
    expect(await rolledUp()).toEqual(await counted());
  });

  it('is busy, and does nothing, while another instance rolls up', async () => {
    const job = await insertJob(t.db, { status: 'published', target_service: 'svc-c' });
    await applyEvent(t.db, job.jobId, ack(job.jobId, { name: 'svc-c', version: '1' }));
    await t.db.transaction().execute(async (tx) => {
      await sql`SELECT pg_advisory_xact_lock(8242557565904123248)`.execute(tx);
      expect(await rollUpTransitions(t.db)).toEqual({ deltas: 0, expired: 0, busy: true });
    });
    expect(await rollUpTransitions(t.db)).toMatchObject({ deltas: 1, busy: false });
  });

  it('expires the minutes older than its retention, a batch at a time', async () => {
    const job = await insertJob(t.db, { status: 'published', target_service: 'svc-d' });
    // Two transitions written in the past minutes, as a late commit would (the trigger copies
    // what the insert carries).
    await t.db
      .insertInto('recognition_job_transition')
      .values(
        [10, 20].map((days) => ({
          job_id: job.jobId,
          from_status: 'published' as const,
          to_status: 'processing' as const,
          event: 'TEST',
          detail: '{}',
          at: sql<Date>`now() - ${`${days} days`}::interval` as never,
        })),
      )
      .execute();
    const before = (await rolledUp()).length;
    expect(await rollUpTransitions(t.db, { batchSize: 1 })).toMatchObject({ deltas: 1, expired: 1 });
    expect(await rollUpTransitions(t.db, { batchSize: 1 })).toMatchObject({ deltas: 1, expired: 1 });
    expect(await rollUpTransitions(t.db, { batchSize: 1 })).toMatchObject({ deltas: 0, expired: 0 });
    expect((await rolledUp()).length).toBe(before);
  });

  it('counts over the ladder of src/db/rollup.ts', async () => {
    const { rows } = await sql<{ places: number }>`
      SELECT DISTINCT cardinality(ack_buckets) AS places FROM recognition_transition_minute
      WHERE ack_buckets IS NOT NULL`.execute(t.db);
    expect(rows).toEqual([{ places: LATENCY_BUCKET_BOUNDS_MS.length + 1 }]);
  });
});

describe('migration 0021', () => {
  it('goes down, leaving nothing of its own, and up again', async () => {
    const url = dbUrl(`rc_test_${process.pid}_down_${randomUUID().slice(0, 8)}`);
    await createDatabaseIfMissing(url);
    const db = openDb(url, { max: 1 });
    try {
      await migrateToLatest(db.db);
      const made = async () =>
        (
          await sql<{ name: string }>`
            SELECT relname AS name FROM pg_class
            WHERE relnamespace = 'public'::regnamespace
              AND (relname LIKE 'recognition_transition_%' OR relname = 'inbox_quarantine_held_idx')
            UNION ALL SELECT proname FROM pg_proc
            WHERE pronamespace = 'public'::regnamespace
              AND proname IN ('recognition_add_counts', 'recognition_expire_transition_minutes',
                              'recognition_roll_up_transitions', 'recognition_sum_counts',
                              'recognition_transition_append_delta')
            UNION ALL SELECT tgname FROM pg_trigger WHERE tgname LIKE 'recognition_transition_%'
            ORDER BY 1`.execute(db.db)
        ).rows.map((r) => r.name);
      expect(await made()).toEqual([
        'inbox_quarantine_held_idx',
        'recognition_add_counts',
        'recognition_expire_transition_minutes',
        'recognition_roll_up_transitions',
        'recognition_sum_counts',
        'recognition_transition_append_delta',
        'recognition_transition_append_delta',
        'recognition_transition_delta',
        'recognition_transition_minute',
        'recognition_transition_minute_pkey',
      ]);
      const migrator = new Migrator({ db: db.db, provider: { getMigrations: async () => migrations } });
      const down = await migrator.migrateDown();
      expect(down.error).toBeUndefined();
      expect(down.results).toMatchObject([{ migrationName: '0021_transition_rollup', status: 'Success' }]);
      expect(await made()).toEqual([]);
      await migrateToLatest(db.db);
      expect((await made()).length).toBe(10);
    } finally {
      await db.close();
      await dropDatabase(url);
    }
  });
});
