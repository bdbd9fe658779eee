/**
 * The console's reads (src/db/overview.ts) on a small known history written through the step and
 * rolled up: open jobs, transitions and finished jobs per window, the quarantine per hour and held,
 * the rollup's lag, and per service version the shares, latencies (mean and p95 over the ladder)
 * and quarantine rate. The reads scan neither the job table nor the transition log.
 */
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { JobEventInput } from '../../machines/index.js';
import { openDb } from '../../src/db/database.js';
import { readOverview, readServices, type ServiceFigures } from '../../src/db/overview.js';
import { rollUpTransitions } from '../../src/db/rollup.js';
import { applyEvent, applyPassedDeadlines } from '../../src/step/index.js';
import { insertJob, RESULTS } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true });

const SERVICE = { name: 'svc-a', version: '1.0' };
const ack = (jobId: string): JobEventInput => ({
  type: 'ENVELOPE_PROCESSING',
  msgId: `ack:${jobId}:1`,
  service: SERVICE,
});
const result = (jobId: string, fileId: string, status: 'done' | 'needs_check' | 'error'): JobEventInput => ({
  type: 'ENVELOPE_RESULT',
  msgId: `result:${jobId}:1`,
  status,
  service: SERVICE,
  ...(status === 'error'
    ? { error: { code: 'BROKEN', message: 'x' } }
    : {
        resultS3: { bucket: 'arm-ka', key: `results/${fileId}/${jobId}/result.json` },
        resultSchemaVersion: '1.0',
      }),
});
const ago = (interval: string) => sql<Date>`now() - ${interval}::interval` as never;

/**
 * Publish to ack and to result, in ms, as the rollup rounds them, of svc-a's jobs of `version`
 * that finished in the last hour or day.
 */
async function latencies(version: string | null, window: 'hour' | 'day') {
  const { rows } = await sql<{ ack: string | null; result: string }>`
    SELECT round(extract(epoch FROM started_at - published_at) * 1000)::text AS ack,
           round(extract(epoch FROM finished_at - published_at) * 1000)::text AS result
    FROM recognition_job
    WHERE target_service = 'svc-a' AND service_version IS NOT DISTINCT FROM ${version}
      AND finished_at > now() - ${window === 'hour' ? '1 hour' : '1 day'}::interval`.execute(t.db);
  const acks = rows.filter((r) => r.ack !== null).map((r) => Number(r.ack));
  const results = rows.map((r) => Number(r.result));
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  return { ack: mean(acks), result: mean(results), results };
}

/**
 * The history: svc-a 1.0 (20 jobs acked and finished now, one of them published 200 s before its
 * ack, the others 2 s; one job finished 3 hours ago), svc-a without a version (one job timed out
 * now), svc-b with a pending and a published job; six quarantined messages.
 */
async function writeHistory() {
  await sql`TRUNCATE recognition_transition_delta, recognition_transition_minute, inbox_quarantine,
                     recognition_job_transition, recognition_job, stored_file, s3_object CASCADE`.execute(
    t.db,
  );
  const jobs = [];
  for (let i = 0; i < 20; i++) {
    const job = await insertJob(t.db, {
      status: 'published',
      target_service: 'svc-a',
      published_at: ago(i === 0 ? '200 seconds' : '1500 milliseconds'),
    });
    jobs.push(job);
    await applyEvent(t.db, job.jobId, ack(job.jobId), RESULTS);
    const status = i < 14 ? 'done' : i < 18 ? 'needs_check' : 'error';
    await applyEvent(t.db, job.jobId, result(job.jobId, job.fileId, status), RESULTS);
  }
  await insertJob(t.db, {
    status: 'published',
    target_service: 'svc-a',
    published_at: ago('1500 milliseconds'),
    reply_deadline: ago('1 second'),
  });
  await t.db.transaction().execute((tx) => applyPassedDeadlines(tx, { limit: 10 }));
  // Three hours ago: its transitions as the trigger copied them then.
  const old = await insertJob(t.db, {
    status: 'done',
    target_service: 'svc-a',
    service_name: 'svc-a',
    service_version: '1.0',
    published_at: ago('3 hours 5 seconds'),
    started_at: ago('3 hours 4 seconds'),
    finished_at: ago('3 hours'),
  });
  await t.db
    .insertInto('recognition_job_transition')
    .values(
      (
        [
          ['published', 'processing', 'ENVELOPE_PROCESSING', '3 hours 4 seconds'],
          ['processing', 'done', 'ENVELOPE_RESULT', '3 hours'],
        ] as const
      ).map(([from, to, event, when]) => ({
        job_id: old.jobId,
        from_status: from,
        to_status: to,
        event,
        detail: '{}',
        at: ago(when),
      })),
    )
    .execute();
  await insertJob(t.db, { status: 'pending', target_service: 'svc-b' });
  await insertJob(t.db, { status: 'published', target_service: 'svc-b' });
  const quarantined = (jobId: string | null, receivedAgo: string, replayed = false) => ({
    subject: 'recognition.result',
    reason: 'SCHEMA_INVALID' as const,
    payload: Buffer.from('{}'),
    headers: '{}',
    job_id: jobId,
    received_at: ago(receivedAgo),
    replayed_at: replayed ? (sql<Date>`now()` as never) : null,
  });
  await t.db
    .insertInto('inbox_quarantine')
    .values([
      quarantined(jobs[0]!.jobId, '0 seconds'),
      quarantined(jobs[0]!.jobId, '0 seconds'),
      quarantined('not-a-job-id', '0 seconds'),
      quarantined(null, '2 hours'),
      quarantined(null, '30 hours'),
      quarantined(jobs[1]!.jobId, '0 seconds', true),
    ])
    .execute();
}

const shares = (s: Partial<ServiceFigures['shares']>) => ({
  done: 0,
  needs_check: 0,
  error: 0,
  timeout: 0,
  dlq: 0,
  ...s,
});

describe("the console's figures", () => {
  it('read a known history exactly', async () => {
    await writeHistory();
    const before = await readOverview(t.db);
    expect(before.rollupBehindMs).toBeGreaterThanOrEqual(0);
    expect(before.transitions).toEqual([]);
    for (;;) if ((await rollUpTransitions(t.db)).deltas === 0) break;

    const o = await readOverview(t.db);
    expect(o.at).toBeInstanceOf(Date);
    expect(o.rollupBehindMs).toBeNull();
    expect(o.open).toEqual([
      { service: 'svc-b', status: 'pending', count: 1 },
      { service: 'svc-b', status: 'published', count: 1 },
    ]);
    expect(o.transitions).toEqual([
      { from: 'processing', to: 'done', event: 'ENVELOPE_RESULT', lastHour: 14, lastDay: 15 },
      { from: 'processing', to: 'error', event: 'ENVELOPE_RESULT', lastHour: 2, lastDay: 2 },
      { from: 'processing', to: 'needs_check', event: 'ENVELOPE_RESULT', lastHour: 4, lastDay: 4 },
      { from: 'published', to: 'processing', event: 'ENVELOPE_PROCESSING', lastHour: 20, lastDay: 21 },
      { from: 'published', to: 'timeout', event: 'DEADLINE_PASSED', lastHour: 1, lastDay: 1 },
    ]);
    expect(o.finished).toEqual([
      { service: 'svc-a', status: 'done', lastHour: 14, lastDay: 15 },
      { service: 'svc-a', status: 'error', lastHour: 2, lastDay: 2 },
      { service: 'svc-a', status: 'needs_check', lastHour: 4, lastDay: 4 },
      { service: 'svc-a', status: 'timeout', lastHour: 1, lastDay: 1 },
    ]);
    // Per hour as the database truncates the messages' times, the oldest hour 23 before the current.
    const hours = await sql<{ hour: Date; n: string }>`
      SELECT date_trunc('hour', received_at, 'UTC') AS hour, count(*)::text AS n FROM inbox_quarantine
      WHERE received_at >= date_trunc('hour', now(), 'UTC') - interval '23 hours' GROUP BY 1`.execute(t.db);
    expect(o.quarantine.perHour).toHaveLength(24);
    expect(o.quarantine.perHour.at(-1)!.hour.getTime()).toBe(
      Math.floor(o.at.getTime() / 3_600_000) * 3_600_000,
    );
    expect(o.quarantine.perHour.filter((h) => h.count > 0)).toEqual(
      hours.rows
        .map((h) => ({ hour: h.hour, count: Number(h.n) }))
        .sort((a, b) => a.hour.getTime() - b.hour.getTime()),
    );
    expect(o.quarantine.perHour.reduce((a, h) => a + h.count, 0)).toBe(5);
    expect(o.quarantine.held).toBe(5);

    const hour = await latencies('1.0', 'hour');
    const day = await latencies('1.0', 'day');
    const unversioned = await latencies(null, 'day');
    expect([hour.results.length, day.results.length, unversioned.results.length]).toEqual([20, 21, 1]);
    const services = await readServices(t.db);
    const none = { mean: null, p95: null };
    // In each window: the quarantined messages of no known job, the timed-out job without a
    // version, and svc-a 1.0.
    const expected = (window: 'hour' | 'day', f: { quarantined: number; v: ServiceFigures }) => [
      {
        service: '',
        version: '',
        window,
        finished: 0,
        shares: shares({}),
        ackMs: none,
        resultMs: none,
        quarantined: f.quarantined,
        quarantineRate: null,
      },
      {
        service: 'svc-a',
        version: '',
        window,
        finished: 1,
        shares: shares({ timeout: 1 }),
        ackMs: none,
        resultMs: { mean: unversioned.result, p95: unversioned.result },
        quarantined: 0,
        quarantineRate: 0,
      },
      f.v,
    ];
    expect(services).toEqual([
      ...expected('hour', {
        quarantined: 1,
        v: {
          service: 'svc-a',
          version: '1.0',
          window: 'hour',
          finished: 20,
          shares: shares({ done: 14 / 20, needs_check: 4 / 20, error: 2 / 20 }),
          // 19 of 20 times in [1 000, 2 500) ms: the p95 is that place's upper edge.
          ackMs: { mean: hour.ack, p95: 2_500 },
          resultMs: { mean: hour.result, p95: 2_500 },
          quarantined: 3,
          quarantineRate: 3 / 20,
        },
      }),
      ...expected('day', {
        quarantined: 2,
        v: {
          service: 'svc-a',
          version: '1.0',
          window: 'day',
          finished: 21,
          shares: shares({ done: 15 / 21, needs_check: 4 / 21, error: 2 / 21 }),
          // The job of 3 hours ago: ack 1 000 ms, result 5 000 ms, the 20th result of 21.
          ackMs: { mean: day.ack, p95: 2_500 },
          resultMs: { mean: day.result, p95: 10_000 },
          quarantined: 3,
          quarantineRate: 3 / 21,
        },
      }),
    ]);
  });

  it('scan neither the job table nor the transition log', async () => {
    const reader = openDb(t.url, { max: 1, applicationName: 'overview-scans' });
    try {
      // The counts of this connection's own scans, flushed at the end of each of its transactions.
      const scans = async () => {
        await sql`SELECT pg_stat_force_next_flush()`.execute(reader.db);
        await sql`SELECT 1`.execute(reader.db);
        const { rows } = await sql<{ relname: string; seq_scan: string }>`
          SELECT relname, seq_scan::text FROM pg_stat_user_tables, pg_stat_clear_snapshot()
          WHERE relname IN ('recognition_job', 'recognition_job_transition') ORDER BY relname`.execute(
          reader.db,
        );
        return rows;
      };
      const before = await scans();
      await readOverview(reader.db);
      await readServices(reader.db);
      expect(await scans()).toEqual(before);
      // The check sees a scan when there is one.
      await sql`SELECT count(*) FROM recognition_job`.execute(reader.db);
      expect(await scans()).not.toEqual(before);
    } finally {
      await reader.close();
    }
  });
});
