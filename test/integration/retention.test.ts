/**
 * Retention against a real database: what a pass deletes and what it never deletes, two passes at
 * once, rows another transaction holds, the dry run, the daemon's loop (its walk, log line and
 * metrics), and the plans of the queries that must not grow with history.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type AddressInfo } from 'node:net';
import { sql } from 'kysely';
import { beforeEach, describe, expect, it } from 'vitest';
import type { FinalJobStatus, JobStatus } from '../../machines/index.js';
import { dbNow, openDb } from '../../src/db/database.js';
import { addFile, createJob, findRetryCandidates, listJobsQuery } from '../../src/db/jobs.js';
import { applyRetries } from '../../src/step/index.js';
import { deleteExpiredJobs, expiredJobsBatch, type FinishedKey } from '../../src/db/retention.js';
import {
  FULL_WALK_EVERY_MS,
  createRetention,
  runRetentionPass,
  type RetentionSettings,
} from '../../src/daemon/retention.js';
import { createMetrics } from '../../src/metrics.js';
import { runCli } from '../helpers/cliProcess.js';
import { insertJob, snapshotTables } from '../helpers/fixtures.js';
import { generateJobHistory, type JobHistoryOptions } from '../../workshop/localServers/jobHistory.js';
import { createLogSink } from '../helpers/logSink.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true });
const DAY = 86_400_000;
const SETTINGS: RetentionSettings = {
  succeededMs: 30 * DAY,
  failedMs: 90 * DAY,
  quarantineMs: 30 * DAY,
  batchSize: 2,
  maxBusyPercent: 100,
};

/** A second attempt for `fileId`, made its file's current job: the first is current no more. */
async function newAttempt(fileId: string): Promise<void> {
  const next = await t.db
    .insertInto('recognition_job')
    .values({ file_id: fileId, attempt: 2, target_service: 'tabular-parser' })
    .returning('id')
    .executeTakeFirstOrThrow();
  await t.db
    .updateTable('stored_file')
    .set({ current_recognition_job_id: next.id })
    .where('id', '=', fileId)
    .execute();
}

/** A generated history in the test's database, on a connection of its own (it is one transaction). */
async function history(opts: JobHistoryOptions) {
  const client = await t.pool.connect();
  try {
    return await generateJobHistory(client, opts);
  } finally {
    client.release();
  }
}

beforeEach(async () => {
  // Every test starts from empty tables: a pass takes whatever the database holds.
  await sql`TRUNCATE recognition_job_transition, inbox_quarantine, recognition_job, stored_file, s3_object`.execute(
    t.db,
  );
});

/**
 * A job in `status`, finished `daysAgo` days before the database clock (null: never finished),
 * with three transitions and, when it succeeded, a result object. Not `current`: its file has a
 * newer attempt (pending) that is the file's current job.
 */
async function job(status: JobStatus, daysAgo: number | null, { current }: { current: boolean }) {
  const now = await dbNow(t.db);
  const result = ['done', 'needs_check'].includes(status)
    ? await t.db
        .insertInto('s3_object')
        .values({
          bucket: 'arm-ka',
          key: `results/${randomUUID()}.json`,
          bucket_role: 'results',
          created_by: 'test',
        })
        .returning('id')
        .executeTakeFirstOrThrow()
    : undefined;
  const { jobId, fileId } = await insertJob(t.db, {
    status,
    finished_at: daysAgo === null ? null : new Date(now.getTime() - daysAgo * DAY),
    result_s3_object_id: result?.id ?? null,
    fileIsCurrent: current,
  });
  await t.db
    .insertInto('recognition_job_transition')
    .values(
      (['published', 'processing', status] as const).map((to, i) => ({
        job_id: jobId,
        from_status: (['pending', 'published', 'processing'] as const)[i]!,
        to_status: to,
        event: 'TEST',
        detail: '{}',
      })),
    )
    .execute();
  if (!current) await newAttempt(fileId);
  return { jobId, fileId, resultId: result?.id };
}

async function exists(jobId: string) {
  const j = await t.db.selectFrom('recognition_job').select('id').where('id', '=', jobId).executeTakeFirst();
  const { n } = await t.db
    .selectFrom('recognition_job_transition')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('job_id', '=', jobId)
    .executeTakeFirstOrThrow();
  return { job: j !== undefined, transitions: Number(n) };
}

/** Expired, not current, final jobs and their transitions, counted without retention's code. */
async function expiredNotCurrent(settings: RetentionSettings) {
  const { rows } = await sql<{ jobs: number; transitions: number }>`
    SELECT count(DISTINCT j.id)::int AS jobs, count(t.id)::int AS transitions
    FROM recognition_job j
    LEFT JOIN stored_file f ON f.id = j.file_id
    LEFT JOIN recognition_job_transition t ON t.job_id = j.id
    WHERE f.current_recognition_job_id IS DISTINCT FROM j.id
      AND ((j.status IN ('done', 'needs_check') AND j.finished_at < now() - ${settings.succeededMs} * interval '1 ms')
        OR (j.status IN ('error', 'timeout', 'dlq') AND j.finished_at < now() - ${settings.failedMs} * interval '1 ms'))`.execute(
    t.db,
  );
  return rows[0]!;
}

describe('a pass', () => {
  it.each<[string, JobStatus, number | null, boolean, Partial<RetentionSettings>]>([
    ['a done job 40 days old (succeeded: 30d)', 'done', 40, false, {}],
    ['a needs_check job 40 days old', 'needs_check', 40, false, {}],
    ['an error job 100 days old (failed: 90d)', 'error', 100, false, {}],
    ['a timeout job 100 days old', 'timeout', 100, false, {}],
    ['a dlq job 100 days old', 'dlq', 100, false, {}],
  ])(
    'deletes %s, with its transitions; its file and its objects stay',
    async (_what, status, days, current, s) => {
      const { jobId, fileId, resultId } = await job(status, days, { current });
      const objects = await t.db.selectFrom('s3_object').selectAll().orderBy('id').execute();
      const r = await runRetentionPass(t.db, { settings: { ...SETTINGS, ...s } });
      expect(await exists(jobId)).toEqual({ job: false, transitions: 0 });
      const cls = ['done', 'needs_check'].includes(status) ? 'succeeded' : 'failed';
      expect(r[cls]).toEqual({ jobs: 1, transitions: 3 });
      expect(r.busy).toBe(false);
      // The file, its upload and the result the job pointed at are another part's: they stay.
      expect(
        await t.db.selectFrom('stored_file').select('id').where('id', '=', fileId).executeTakeFirst(),
      ).toBeDefined();
      expect(await t.db.selectFrom('s3_object').selectAll().orderBy('id').execute()).toEqual(objects);
      if (resultId) expect(objects.map((o) => o.id)).toContain(resultId);
    },
  );

  it.each<[string, JobStatus, number | null, boolean, Partial<RetentionSettings>]>([
    ["a done job 400 days old that is its file's current job", 'done', 400, true, {}],
    ["an error job 400 days old that is its file's current job", 'error', 400, true, {}],
    ['a done job 20 days old (succeeded: 30d)', 'done', 20, false, {}],
    ['an error job 40 days old (failed: 90d)', 'error', 40, false, {}],
    ['a processing job, even with an old finished_at', 'processing', 400, false, {}],
    ['a published job', 'published', null, false, {}],
    ['a pending job', 'pending', null, false, {}],
    ['a done job 400 days old when RETENTION_SUCCEEDED is 0', 'done', 400, false, { succeededMs: 0 }],
    ['a dlq job 400 days old when RETENTION_FAILED is 0', 'dlq', 400, false, { failedMs: 0 }],
  ])('never deletes %s', async (_what, status, days, current, s) => {
    const { jobId } = await job(status, days, { current });
    const before = await snapshotTables(t.db);
    const r = await runRetentionPass(t.db, { settings: { ...SETTINGS, ...s } });
    expect(await exists(jobId)).toEqual({ job: true, transitions: 3 });
    expect(r.succeeded).toEqual({ jobs: 0, transitions: 0 });
    expect(r.failed).toEqual({ jobs: 0, transitions: 0 });
    expect(await snapshotTables(t.db)).toEqual(before);
  });

  it('deletes quarantined messages older than RETENTION_QUARANTINE, keeps the younger ones', async () => {
    const at = async (daysAgo: number) =>
      t.db
        .insertInto('inbox_quarantine')
        .values({
          subject: 'recognition.result',
          reason: 'INVALID_JSON',
          payload: Buffer.from('{'),
          headers: '{}',
          received_at: new Date((await dbNow(t.db)).getTime() - daysAgo * DAY),
        })
        .returning('id')
        .executeTakeFirstOrThrow();
    const old = await Promise.all([at(31), at(40), at(400)]);
    const young = await Promise.all([at(1), at(29)]);
    const r = await runRetentionPass(t.db, { settings: SETTINGS });
    expect(r.quarantine).toEqual({ messages: 3 });
    const left = await t.db.selectFrom('inbox_quarantine').select('id').orderBy('id').execute();
    expect(left.map((x) => x.id).sort()).toEqual(young.map((x) => x.id).sort());
    expect(old.every((o) => !left.some((l) => l.id === o.id))).toBe(true);
    expect((await runRetentionPass(t.db, { settings: { ...SETTINGS, quarantineMs: 0 } })).quarantine).toEqual(
      {
        messages: 0,
      },
    );
  });

  it('a dry run deletes nothing and reports what the pass then deletes', async () => {
    await history({ files: 400, retryEvery: 2, days: 120 });
    await job('done', 40, { current: false });
    await job('needs_check', 400, { current: false });
    const settings = { ...SETTINGS, failedMs: 30 * DAY, batchSize: 25 };
    const expected = await expiredNotCurrent(settings);
    expect(expected.jobs).toBeGreaterThan(100);

    const before = await snapshotTables(t.db);
    const dry = await runRetentionPass(t.db, { settings, dryRun: true });
    expect(await snapshotTables(t.db)).toEqual(before);
    expect(dry.dryRun).toBe(true);

    const real = await runRetentionPass(t.db, { settings });
    expect({ succeeded: real.succeeded, failed: real.failed }).toEqual({
      succeeded: dry.succeeded,
      failed: dry.failed,
    });
    expect(real.succeeded.jobs + real.failed.jobs).toBe(expected.jobs);
    expect(real.succeeded.transitions + real.failed.transitions).toBe(expected.transitions);
    expect(await expiredNotCurrent(settings)).toEqual({ jobs: 0, transitions: 0 });
  });
});

describe('its share of the time', () => {
  it('rests after each batch as RETENTION_MAX_BUSY_PERCENT asks, and deletes the same', async () => {
    await history({ files: 200, retryEvery: 2, days: 120 });
    const settings = { ...SETTINGS, failedMs: 30 * DAY, batchSize: 20, maxBusyPercent: 10 };
    const expected = await expiredNotCurrent(settings);
    expect(expected.jobs).toBeGreaterThan(40);
    const r = await runRetentionPass(t.db, { settings });
    expect(r.failed.jobs + r.succeeded.jobs).toBe(expected.jobs);
    // Every batch rests nine times as long as it took, so the rests fill most of the pass.
    expect(r.restedMs).toBeGreaterThan(0);
    expect(r.restedMs).toBeLessThanOrEqual(r.durationMs);
    expect(r.restedMs / r.durationMs).toBeGreaterThan(0.5);
    const flatOut = await runRetentionPass(t.db, { settings: { ...settings, maxBusyPercent: 100 } });
    expect(flatOut.restedMs).toBe(0);
  });
});

describe('several at once', () => {
  const settings = { ...SETTINGS, failedMs: 30 * DAY, batchSize: 20 };

  it('two passes on two connections delete each row once, without errors', async () => {
    await history({ files: 600, retryEvery: 2, days: 120 });
    const expected = await expiredNotCurrent(settings);
    expect(expected.jobs).toBeGreaterThan(100);
    const [a, b] = [openDb(t.url, { max: 2 }), openDb(t.url, { max: 2 })];
    try {
      const results = await Promise.all([
        runRetentionPass(a.db, { settings }),
        runRetentionPass(b.db, { settings }),
      ]);
      const jobs = results.reduce((n, r) => n + r.succeeded.jobs + r.failed.jobs, 0);
      const transitions = results.reduce((n, r) => n + r.succeeded.transitions + r.failed.transitions, 0);
      expect({ jobs, transitions }).toEqual(expected);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
    expect(await expiredNotCurrent(settings)).toEqual({ jobs: 0, transitions: 0 });
  });

  it('two walks without the lock still delete each row once (SKIP LOCKED)', async () => {
    await history({ files: 600, retryEvery: 2, days: 120, seed: 'walks' });
    const expected = await expiredNotCurrent(settings);
    const walk = async (db: typeof t.db, status: FinalJobStatus) => {
      const total = { jobs: 0, transitions: 0 };
      let after: FinishedKey | null = null;
      for (;;) {
        const batch = await db
          .transaction()
          .execute((tx) =>
            deleteExpiredJobs(tx, { status, retentionMs: settings.failedMs, after, limit: 20 }),
          );
        total.jobs += batch.jobs;
        total.transitions += batch.transitions;
        after = batch.last;
        if (batch.scanned < 20) return total;
      }
    };
    const [a, b] = [openDb(t.url, { max: 2 }), openDb(t.url, { max: 2 })];
    try {
      const results = await Promise.all(
        (['error', 'timeout'] as const).flatMap((status) => [walk(a.db, status), walk(b.db, status)]),
      );
      expect({
        jobs: results.reduce((n, r) => n + r.jobs, 0),
        transitions: results.reduce((n, r) => n + r.transitions, 0),
      }).toEqual(expected);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('a pass never waits for a row another transaction holds; a later walk from the start takes it', async () => {
    const held = await job('error', 100, { current: false });
    const other = await job('error', 100, { current: false });
    const holder = await t.pool.connect();
    const sink = createLogSink({ level: 'info' });
    const metrics = createMetrics({}, { defaultMetrics: false });
    let clock = Date.now();
    const loop = createRetention({
      db: t.db,
      logger: sink.logger,
      metrics,
      settings: SETTINGS,
      intervalMs: 3_600_000,
      now: () => clock,
    });
    try {
      // The inbox holds the job (a late result for it being looked at).
      await holder.query('BEGIN');
      await holder.query('SELECT id FROM recognition_job WHERE id = $1 FOR UPDATE', [held.jobId]);
      // The pass ends while the row is still held: it did not wait for it.
      const first = await loop.pass();
      expect(first.failed).toEqual({ jobs: 1, transitions: 3 });
      expect(await exists(held.jobId)).toEqual({ job: true, transitions: 3 });
      expect(await exists(other.jobId)).toEqual({ job: false, transitions: 0 });
      await holder.query('COMMIT');

      // The next pass continues the walk past the held job: nothing new has expired.
      const second = await loop.pass();
      expect(second).toMatchObject({ fullWalk: false, failed: { jobs: 0, transitions: 0 } });
      expect(await exists(held.jobId)).toMatchObject({ job: true });

      // A day later the walk starts from the oldest job again and takes it.
      clock += FULL_WALK_EVERY_MS;
      const third = await loop.pass();
      expect(third).toMatchObject({ fullWalk: true, failed: { jobs: 1, transitions: 3 } });
      expect(await exists(held.jobId)).toEqual({ job: false, transitions: 0 });
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      holder.release();
      await loop.stop();
    }

    // One log line per pass, with its counts; progress and totals as metrics.
    const passes = sink.lines.filter((l) => l['event'] === 'retention_pass');
    expect(passes.map((l) => [l['outcome'], l['full_walk'], l['failed_jobs'], l['transitions']])).toEqual([
      ['done', true, 1, 3],
      ['done', false, 0, 0],
      ['done', true, 1, 3],
    ]);
    expect(passes.every((l) => typeof l['duration_ms'] === 'number')).toBe(true);
    const text = await metrics.registry.metrics();
    expect(text).toContain('recognition_retention_deleted_total{table="recognition_job"} 2');
    expect(text).toContain('recognition_retention_deleted_total{table="recognition_job_transition"} 6');
    expect(text).toContain('recognition_retention_deleted_total{table="inbox_quarantine"} 0');
    expect(text).toContain('recognition_retention_passes_total{outcome="done"} 3');
    expect(text).toMatch(/recognition_retention_last_pass_timestamp_seconds [1-9]/);
    expect(text).toContain('recognition_retention_pass_duration_seconds_count 3');
  });

  it('exports when its last successful pass ended; a failed pass is counted and leaves that time', async () => {
    const metrics = createMetrics({}, { defaultMetrics: false });
    const sample = async (name: string, labels = '') => {
      const text = await metrics.registry.metrics();
      const m = new RegExp(`^${name}${labels.replace(/[{}]/g, '\\$&')} (\\S+)$`, 'm').exec(text);
      expect(m, `${name}${labels} in\n${text}`).not.toBeNull();
      return Number(m![1]);
    };
    const loop = createRetention({
      db: t.db,
      logger: createLogSink({ level: 'silent' }).logger,
      metrics,
      settings: SETTINGS,
      intervalMs: 600_000,
    });
    // A database that refuses connections: every pass of this loop fails.
    const closed = await new Promise<number>((resolve) => {
      const server = createServer().listen(0, '127.0.0.1', () => {
        const { port } = server.address() as AddressInfo;
        server.close(() => resolve(port));
      });
    });
    const refused = openDb(`postgres://postgres@127.0.0.1:${closed}/none`, {
      connectionTimeoutMillis: 2_000,
    });
    const failing = createRetention({
      db: refused.db,
      logger: createLogSink({ level: 'silent' }).logger,
      metrics,
      settings: SETTINGS,
      intervalMs: 600_000,
    });
    try {
      expect(await sample('recognition_retention_interval_seconds')).toBe(600);
      expect(await sample('recognition_retention_last_success_timestamp_seconds')).toBe(0);
      const expired = await job('timeout', 100, { current: false });

      const before = Date.now() / 1000;
      expect((await loop.pass()).failed).toEqual({ jobs: 1, transitions: 3 });
      const after = Date.now() / 1000;
      expect(await exists(expired.jobId)).toEqual({ job: false, transitions: 0 });
      const success = await sample('recognition_retention_last_success_timestamp_seconds');
      expect(success).toBeGreaterThanOrEqual(before);
      expect(success).toBeLessThanOrEqual(after);
      expect(await sample('recognition_retention_passes_total', '{outcome="done"}')).toBe(1);
      expect(await sample('recognition_retention_passes_total', '{outcome="failed"}')).toBe(0);

      await expect(failing.pass()).rejects.toThrow(/ECONNREFUSED/);
      expect(await sample('recognition_retention_passes_total', '{outcome="failed"}')).toBe(1);
      expect(await sample('recognition_retention_last_success_timestamp_seconds')).toBe(success);

      // The next successful pass moves it on.
      await new Promise((r) => setTimeout(r, 20));
      await loop.pass();
      expect(await sample('recognition_retention_last_success_timestamp_seconds')).toBeGreaterThan(success);
      expect(await sample('recognition_retention_passes_total', '{outcome="done"}')).toBe(2);
    } finally {
      await loop.stop();
      await failing.stop();
      await refused.close();
    }
  });

  it('a job that stops being current after it expired goes at the next walk from the start', async () => {
    const { jobId, fileId } = await job('done', 40, { current: true });
    let clock = Date.now();
    const loop = createRetention({
      db: t.db,
      logger: createLogSink({ level: 'silent' }).logger,
      settings: SETTINGS,
      intervalMs: 3_600_000,
      now: () => clock,
    });
    expect((await loop.pass()).succeeded.jobs).toBe(0);
    // A new attempt for the file: the old job is no longer current.
    await newAttempt(fileId);
    expect((await loop.pass()).succeeded.jobs).toBe(0);
    clock += FULL_WALK_EVERY_MS;
    expect((await loop.pass()).succeeded).toEqual({ jobs: 1, transitions: 3 });
    expect(await exists(jobId)).toEqual({ job: false, transitions: 0 });
    await loop.stop();
  });

  it('a pass that finds the lock taken does nothing and says so', async () => {
    const { jobId } = await job('error', 100, { current: false });
    const other = await t.pool.connect();
    try {
      await other.query(`SELECT pg_advisory_lock('8242557523088207476'::bigint)`);
      const r = await runRetentionPass(t.db, { settings: SETTINGS });
      expect(r).toMatchObject({ busy: true, failed: { jobs: 0, transitions: 0 } });
      expect(await exists(jobId)).toMatchObject({ job: true });
    } finally {
      await other.query(`SELECT pg_advisory_unlock_all()`);
      other.release();
    }
    expect((await runRetentionPass(t.db, { settings: SETTINGS })).failed.jobs).toBe(1);
  });
});

/** Every node of an EXPLAIN (FORMAT JSON) plan. */
type PlanNode = {
  'Node Type': string;
  'Index Name'?: string;
  'Relation Name'?: string;
  'Scan Direction'?: string;
  Plans?: PlanNode[];
};
function nodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodes)];
}
/**
 * The plan of `compiled`, with reading a whole table priced out (`enable_seqscan = off`): on a
 * history small enough for a test, reading a small table whole is the cheaper plan, so the test
 * asks whether an index serves the query at all — the plan the planner picks on a large history
 * (docs/performance.md, "History and its indexes").
 */
async function explain(compiled: { sql: string; parameters: readonly unknown[] }): Promise<PlanNode[]> {
  const client = await t.pool.connect();
  try {
    await client.query('BEGIN; SET LOCAL enable_seqscan = off');
    const { rows } = await client.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(
      `EXPLAIN (FORMAT JSON) ${compiled.sql}`,
      [...compiled.parameters],
    );
    return nodes(rows[0]!['QUERY PLAN'][0]!.Plan);
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
}
/**
 * The plan of the statement that `compiled` runs inside a function (retention's deletions run in
 * `SECURITY DEFINER` functions, whose body EXPLAIN does not show), as auto_explain reports it when
 * the call runs, in a transaction rolled back after; a whole table priced out as above.
 */
async function explainNested(
  compiled: { sql: string; parameters: readonly unknown[] },
  bodyMarker: string,
): Promise<PlanNode[]> {
  const client = await t.pool.connect();
  const notices: string[] = [];
  const onNotice = (n: { message?: string | undefined }) => notices.push(n.message ?? '');
  client.on('notice', onNotice);
  try {
    await client.query(`BEGIN; LOAD 'auto_explain'; SET LOCAL enable_seqscan = off;
      SET LOCAL auto_explain.log_min_duration = 0; SET LOCAL auto_explain.log_nested_statements = on;
      SET LOCAL auto_explain.log_format = json; SET LOCAL auto_explain.log_level = notice`);
    await client.query(compiled.sql, [...compiled.parameters]);
    const plans = notices
      .map((m) => JSON.parse(m.slice(m.indexOf('{'))) as { 'Query Text': string; Plan: PlanNode })
      .filter((p) => p['Query Text'].includes(bodyMarker));
    expect(plans.length, notices.join('\n')).toBe(1);
    return nodes(plans[0]!.Plan);
  } finally {
    client.off('notice', onNotice);
    await client.query('ROLLBACK');
    client.release();
  }
}
const seqScans = (all: PlanNode[]) =>
  all.filter((n) => n['Node Type'] === 'Seq Scan').map((n) => n['Relation Name']);
const indexes = (all: PlanNode[]) => [...new Set(all.map((n) => n['Index Name']).filter(Boolean))];

describe('on a generated history', () => {
  it('the operator queries and a retention batch read indexes, never a whole table', async () => {
    const counts = await history({ files: 20_000, days: 120 });
    expect(counts.jobs).toBeGreaterThan(20_000);
    await sql`VACUUM ANALYZE recognition_job, stored_file, recognition_job_transition`.execute(t.db);

    const errors = await explain(listJobsQuery(t.db, { statuses: ['error'], limit: 50 }).compile());
    expect(seqScans(errors)).toEqual([]);
    expect(indexes(errors)).toEqual(['recognition_job_final_created_idx']);
    // Newest first, one status at a time: each final status read backwards along its index.
    for (const filter of [{ limit: 100 }, { statuses: ['done', 'timeout'] as JobStatus[], limit: 100 }]) {
      const plan = await explain(listJobsQuery(t.db, filter).compile());
      expect(seqScans(plan), JSON.stringify(filter)).toEqual([]);
      const backwards = plan.filter((n) => n['Scan Direction'] === 'Backward');
      expect(new Set(backwards.map((n) => n['Index Name']))).toEqual(
        new Set(['recognition_job_final_created_idx']),
      );
    }
    // Finished since: a range of either index, never the table.
    expect(
      seqScans(await explain(listJobsQuery(t.db, { finishedSince: { agoMs: DAY }, limit: 100 }).compile())),
    ).toEqual([]);
    const batch = await explainNested(
      expiredJobsBatch({ status: 'done', retentionMs: 30 * DAY, limit: 1000 }).compile(t.db),
      'gone_transitions',
    );
    expect(seqScans(batch)).toEqual([]);
    expect(indexes(batch)).toEqual(
      expect.arrayContaining(['recognition_job_finished_idx', 'stored_file_current_recognition_job_id_idx']),
    );
    // The due indexes of the hot paths are what they were.
    const { rows } = await sql<{ indexname: string; indexdef: string }>`
      SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'recognition_job' ORDER BY indexname`.execute(
      t.db,
    );
    expect(rows.map((r) => r.indexname)).toEqual([
      'recognition_job_file_attempt_key',
      'recognition_job_final_created_idx',
      'recognition_job_finished_idx',
      'recognition_job_next_publish_due_idx',
      'recognition_job_pkey',
      'recognition_job_reply_deadline_due_idx',
    ]);
    expect((await findRetryCandidates(t.db, { statuses: ['error'], limit: 10 })).length).toBe(10);
  });
});

describe('time-ordered ids', () => {
  /** The version nibble of a UUID's text. */
  const version = (id: string) => id[14];

  it('files, jobs and retried attempts get UUIDv7 ids that sort by creation', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const file = await addFile(t.db, {
        bucket: 'arm-ka',
        key: `uploads/ids-${randomUUID()}.xlsx`,
        name: 'a.xlsx',
      });
      const job = await createJob(t.db, { fileId: file.id, targetService: 'tabular-parser' });
      expect([version(file.id), version(job.id)]).toEqual(['7', '7']);
      ids.push(job.id);
      await new Promise((r) => setTimeout(r, 2));
    }
    expect([...ids].sort()).toEqual(ids);
    const failed = await insertJob(t.db, { status: 'error', finished_at: new Date() });
    const [outcome] = await t.db.transaction().execute((tx) => applyRetries(tx, [{ jobId: failed.jobId }]));
    expect(outcome!.decision).toBe('applied');
    expect(version(outcome!.next!.jobId)).toBe('7');
  });

  it('a generated history has them too, in the order of its creation times', async () => {
    await history({ files: 2_000, days: 10, seed: 'ids' });
    const { rows } = await sql<{ jobs: number; v7: number; out_of_order: number }>`
      SELECT count(*)::int AS jobs,
             count(*) FILTER (WHERE substr(id::text, 15, 1) = '7')::int AS v7,
             count(*) FILTER (WHERE id < prev)::int AS out_of_order
      FROM (SELECT id, lag(id) OVER (ORDER BY created_at) AS prev FROM recognition_job
            WHERE id IN (SELECT current_recognition_job_id FROM stored_file WHERE original_name LIKE 'report-%')) AS j`.execute(
      t.db,
    );
    expect(rows[0]).toEqual({ jobs: 2_000, v7: 2_000, out_of_order: 0 });
  });
});

describe('the commands', () => {
  const env = () => ({ DATABASE_URL: t.url });
  const json = (lines: string[]) => JSON.parse(lines.join('\n')) as Record<string, unknown>;

  it('jobs export --finished-before holds every job the following retention pass deletes, with its transitions', async () => {
    // More than one page of exported jobs (1 000), of several statuses.
    await history({ files: 1_500, retryEvery: 3, days: 120 });
    const deletable = await Promise.all([
      job('done', 40, { current: false }),
      job('dlq', 100, { current: false }),
    ]);
    await job('done', 400, { current: true });
    await job('error', 5, { current: false });
    const transitionsBefore = await t.db
      .selectFrom('recognition_job_transition')
      .selectAll()
      .orderBy('id')
      .execute();
    const idsBefore = new Set(
      (await t.db.selectFrom('recognition_job').select('id').execute()).map((r) => r.id),
    );

    const exported = await runCli(['jobs', 'export', '--finished-before', '30d'], env(), 60_000);
    expect(exported.code, exported.output).toBe(0);
    const archive = new Map(
      exported.stdout.map((l) => {
        const j = JSON.parse(l) as {
          id: string;
          status: string;
          finished_at: string;
          transitions: Array<{ id: string }>;
        };
        return [j.id, j] as const;
      }),
    );
    expect(exported.stderr).toEqual([expect.stringMatching(/^exported \d+ jobs with \d+ transitions$/)]);
    const now = await dbNow(t.db);
    for (const j of archive.values()) {
      expect(['done', 'needs_check', 'error', 'timeout', 'dlq']).toContain(j.status);
      expect(new Date(j.finished_at).getTime()).toBeLessThan(now.getTime() - 30 * DAY);
    }

    const dry = await runCli(['retention', 'run', '--dry-run'], { ...env(), RETENTION_FAILED: '30d' });
    expect(dry.code, dry.output).toBe(0);
    const run = await runCli(['retention', 'run'], { ...env(), RETENTION_FAILED: '30d' });
    expect(run.code, run.output).toBe(0);
    const counts = json(run.stdout) as {
      succeeded: { retention: string; jobs: number; transitions: number };
      failed: { retention: string; jobs: number; transitions: number };
    };
    expect(counts).toMatchObject({
      dry_run: false,
      busy: false,
      succeeded: { retention: '30d' },
      failed: { retention: '30d' },
    });
    expect(json(dry.stdout)).toMatchObject({
      dry_run: true,
      succeeded: counts.succeeded,
      failed: counts.failed,
    });
    expect(run.stderr).toEqual([
      expect.stringMatching(/^deleted \d+ jobs \(\d+ succeeded, \d+ failed\) with \d+ transitions/),
    ]);

    const idsAfter = new Set(
      (await t.db.selectFrom('recognition_job').select('id').execute()).map((r) => r.id),
    );
    const deleted = [...idsBefore].filter((id) => !idsAfter.has(id));
    expect(deleted.length).toBe(counts.succeeded.jobs + counts.failed.jobs);
    expect(deleted).toEqual(expect.arrayContaining(deletable.map((d) => d.jobId)));
    expect(deleted.length).toBeGreaterThan(100);
    for (const id of deleted) {
      const archived = archive.get(id);
      expect(archived, `job ${id} was deleted but not exported`).toBeDefined();
      expect(archived!.transitions.map((x) => x.id)).toEqual(
        transitionsBefore.filter((x) => x.job_id === id).map((x) => x.id),
      );
    }
  });

  it('jobs export stops quietly when its reader does (exit 0, nothing on stderr)', async () => {
    await history({ files: 1_500, days: 120 });
    // The command through a pipe whose reader takes one line and leaves.
    const r = await runCli(['jobs', 'export', '--finished-before', '1m'], env(), {
      wrapper: ['bash', '-c', 'set -o pipefail; "$@" | head -n 1 >/dev/null', 'bash'],
      timeoutMs: 60_000,
    });
    expect(r.code, r.output).toBe(0);
    expect(r.stderr).toEqual([]);
  });

  it('quarantine purge deletes by age and reason; --dry-run only counts', async () => {
    const now = await dbNow(t.db);
    const add = (reason: 'INVALID_JSON' | 'UNKNOWN_JOB', daysAgo: number) =>
      t.db
        .insertInto('inbox_quarantine')
        .values({
          subject: 'recognition.result',
          reason,
          payload: Buffer.from('{}'),
          headers: '{}',
          received_at: new Date(now.getTime() - daysAgo * DAY),
        })
        .returning('id')
        .executeTakeFirstOrThrow();
    await add('INVALID_JSON', 40);
    await add('UNKNOWN_JOB', 40);
    await add('UNKNOWN_JOB', 41);
    const young = await add('UNKNOWN_JOB', 5);
    const count = async () =>
      Number((await sql<{ n: string }>`SELECT count(*) AS n FROM inbox_quarantine`.execute(t.db)).rows[0]!.n);

    const dry = await runCli(
      ['quarantine', 'purge', '--older-than', '30d', '--reason', 'UNKNOWN_JOB', '--dry-run'],
      env(),
    );
    expect(dry.code, dry.output).toBe(0);
    expect(json(dry.stdout)).toEqual({ dry_run: true, reason: 'UNKNOWN_JOB', messages: 2 });
    expect(dry.stderr).toEqual(['would delete 2 quarantined messages (UNKNOWN_JOB)']);
    expect(await count()).toBe(4);

    const byReason = await runCli(
      ['quarantine', 'purge', '--older-than', '30d', '--reason', 'UNKNOWN_JOB'],
      env(),
    );
    expect(json(byReason.stdout)).toEqual({ dry_run: false, reason: 'UNKNOWN_JOB', messages: 2 });
    expect(await count()).toBe(2);
    const all = await runCli(['quarantine', 'purge', '--older-than', '30d'], env());
    expect(json(all.stdout)).toEqual({ dry_run: false, reason: null, messages: 1 });
    expect((await t.db.selectFrom('inbox_quarantine').select('id').execute()).map((r) => r.id)).toEqual([
      young.id,
    ]);
  });

  it.each([
    [
      ['retention', 'run'],
      { RETENTION_FAILED: '1y' },
      /^recognition-core: RETENTION_FAILED must be a span .* or 0 to keep forever \(got "1y"\)$/,
    ],
    [
      ['retention', 'run'],
      { RETENTION_SUCCEEDED: '0d' },
      /^recognition-core: RETENTION_SUCCEEDED must be a span/,
    ],
    [
      ['retention', 'run'],
      { RETENTION_QUARANTINE: '30' },
      /^recognition-core: RETENTION_QUARANTINE must be a span/,
    ],
    [
      ['retention', 'run'],
      { RETENTION_INTERVAL_MS: '-1' },
      /^recognition-core: RETENTION_INTERVAL_MS must be at least 0/,
    ],
    [
      ['retention', 'run'],
      { RETENTION_BATCH_SIZE: '0' },
      /^recognition-core: RETENTION_BATCH_SIZE must be at least 1/,
    ],
    [['quarantine', 'purge'], {}, /required option '--older-than <when>'/],
    [['quarantine', 'purge', '--older-than', 'soon'], {}, /span back from now/],
    [['jobs', 'export'], {}, /required option '--finished-before <when>'/],
    [
      ['jobs', 'export', '--finished-before', '1d', '--status', 'pending'],
      {},
      /must be one or more of done, needs_check, error, timeout, dlq/,
    ],
  ])('%j with %j: exit 2, one line, nothing deleted', async (args, extra, message) => {
    await job('error', 400, { current: false });
    const before = await snapshotTables(t.db);
    const r = await runCli(args, { ...env(), ...extra });
    expect(r.code, r.output).toBe(2);
    expect(r.stdout).toEqual([]);
    const lines = r.stderr.filter((l) => l.trim() && !l.includes('--help'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(message);
    expect(await snapshotTables(t.db)).toEqual(before);
  });
});
