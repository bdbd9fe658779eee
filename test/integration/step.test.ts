/**
 * The step against real PostgreSQL: the rules of docs/lifecycle.md, each with a full comparison of the
 * rows before and after — on both of its paths: locked (a transaction: lock, write, commit) and
 * unlocked (each event decided for the state its job is assumed to be in, then the same write,
 * which applies only where every job still is so; handing back to the locked path as the inbox
 * does when it cannot finish).
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { JobEventInput } from '../../machines/index.js';
import { applyInboxBatchTx, decodeItem } from '../../src/daemon/inboxBatch.js';
import { withPgClient } from '../../src/db/pgTransaction.js';
import { arrayLiteral, type ArrayElement } from '../../src/step/arrayLiteral.js';
import {
  applyEvents,
  applyUnlocked,
  pgStepSql,
  applyEvent,
  type Statement,
  type StepItem,
  type StepOutcome,
  type StepSql,
  WRITE,
} from '../../src/step/index.js';
import { LOCK, REGISTERED_OBJECTS } from '../../src/step/statements.js';
import { UNNEST_FUNCTION, WRITE_PARAMETERS, WRITE_PARTS } from '../../src/step/write.js';
import { insertJob, loadAll, RESULTS, snapshotTables } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true });

/**
 * The unlocked path for `items`, on the pool. `afterQuery` and `beforeQuery`, when given, run
 * after each of its statements that succeeds and before each is sent (with the statement's name):
 * where a test watches or interferes.
 */
function unlockedBatch(
  items: StepItem[],
  afterQuery?: (name: string) => Promise<unknown> | void,
  beforeQuery?: (name: string) => Promise<unknown> | void,
): Promise<StepOutcome[] | null> {
  const watched = (sql: StepSql): StepSql => ({
    async query<R>(statement: Statement, values: readonly unknown[]) {
      await beforeQuery?.(statement.name);
      const rows = await sql.query<R>(statement, values);
      await afterQuery?.(statement.name);
      return rows;
    },
  });
  return withPgClient(t.pool, (client) => applyUnlocked(watched(pgStepSql(client)), items, RESULTS));
}

/** The unlocked path for one event ({@link unlockedBatch}). */
async function unlocked(
  jobId: string,
  event: JobEventInput,
  afterQuery?: (name: string) => Promise<unknown> | void,
  beforeQuery?: (name: string) => Promise<unknown> | void,
): Promise<StepOutcome | undefined> {
  return (await unlockedBatch([{ jobId, event }], afterQuery, beforeQuery))?.[0];
}

const paths = {
  locked: (jobId: string, event: JobEventInput) => applyEvent(t.db, jobId, event, RESULTS),
  unlocked: async (jobId: string, event: JobEventInput) =>
    (await unlocked(jobId, event)) ?? applyEvent(t.db, jobId, event, RESULTS),
};
const service = { name: 'tabular-parser', version: '2.3.1' };

const ack = (jobId: string): JobEventInput => ({
  type: 'ENVELOPE_PROCESSING',
  msgId: `ack:${jobId}:1`,
  service,
});
const done = (jobId: string, fileId: string, n = 1): JobEventInput => ({
  type: 'ENVELOPE_RESULT',
  msgId: `result:${jobId}:${n}`,
  status: 'done',
  service,
  resultS3: { bucket: 'arm-ka', key: `results/${fileId}/${jobId}/result.json` },
  resultSchemaVersion: '1.0',
  metrics: { pages: 3, duration_ms: 1234 },
});

describe.each(['locked', 'unlocked'] as const)('%s path', (path) => {
  const run = paths[path];

  describe("a service's ack", () => {
    it('moves a published job to processing and its file to PROCESSING', async () => {
      const { jobId } = await insertJob(t.db, { status: 'published' });
      const before = await loadAll(t.db, jobId);
      const outcome = await run(jobId, ack(jobId));
      const after = await loadAll(t.db, jobId);

      expect(outcome).toMatchObject({ decision: 'applied', from: 'published', to: 'processing' });
      expect(after.job.started_at).toBeInstanceOf(Date);
      expect(after.job).toEqual({
        ...before.job,
        status: 'processing',
        started_at: after.job.started_at,
        service_name: 'tabular-parser',
        service_version: '2.3.1',
        updated_at: after.job.updated_at,
      });
      expect(after.file).toEqual({ ...before.file, status: 'PROCESSING', updated_at: after.file.updated_at });
      expect(after.transitions).toMatchObject([
        {
          job_id: jobId,
          from_status: 'published',
          to_status: 'processing',
          event: 'ENVELOPE_PROCESSING',
          msg_id: `ack:${jobId}:1`,
        },
      ]);
    });

    it('ignores a repeated ack for a job already processing: no row changes', async () => {
      const { jobId } = await insertJob(t.db, { status: 'processing' });
      const before = await snapshotTables(t.db);
      const outcome = await run(jobId, ack(jobId));
      expect(outcome).toMatchObject({
        decision: 'duplicate',
        from: 'processing',
        to: 'processing',
        reason: 'repeated_ack',
      });
      expect(await snapshotTables(t.db)).toEqual(before);
    });

    it.each(['pending', 'done', 'needs_check', 'error', 'timeout', 'dlq'] as const)(
      'ignores an ack for a job in %s: no row changes',
      async (status) => {
        const { jobId } = await insertJob(t.db, { status });
        const before = await snapshotTables(t.db);
        const outcome = await run(jobId, ack(jobId));
        expect(outcome).toMatchObject({
          decision: 'ignored',
          from: status,
          to: status,
          reason: 'ack_not_accepted',
        });
        expect(await snapshotTables(t.db)).toEqual(before);
      },
    );
  });

  describe('results, applied idempotently', () => {
    it('success: job done with every column, a new s3_object, file stays PROCESSING', async () => {
      const { jobId, fileId } = await insertJob(t.db, { status: 'processing' });
      const before = await loadAll(t.db, jobId);
      const objectsBefore = await t.db.selectFrom('s3_object').selectAll().execute();

      const outcome = await run(jobId, done(jobId, fileId));
      const after = await loadAll(t.db, jobId);
      const objects = await t.db.selectFrom('s3_object').selectAll().orderBy('id').execute();

      expect(outcome).toMatchObject({ decision: 'applied', from: 'processing', to: 'done' });
      expect(objects).toHaveLength(objectsBefore.length + 1);
      const created = objects.at(-1)!;
      expect(created).toMatchObject({
        bucket: 'arm-ka',
        key: `results/${fileId}/${jobId}/result.json`,
        bucket_role: 'results',
        created_by: 'tabular-parser',
      });
      expect(after.job.finished_at).toBeInstanceOf(Date);
      expect(after.job).toEqual({
        ...before.job,
        status: 'done',
        service_name: 'tabular-parser',
        service_version: '2.3.1',
        finished_at: after.job.finished_at,
        metrics: { pages: 3, duration_ms: 1234 },
        error_code: null,
        error_message: null,
        result_schema_version: '1.0',
        result_s3_object_id: created.id,
        result_msg_id: `result:${jobId}:1`,
        updated_at: after.job.updated_at,
      });
      expect(after.file).toEqual(before.file);
      expect(after.transitions.map((r) => [r.from_status, r.to_status, r.event, r.msg_id])).toEqual([
        ['processing', 'done', 'ENVELOPE_RESULT', `result:${jobId}:1`],
      ]);
    });

    it('redelivery of the same message changes no row in any table', async () => {
      const { jobId, fileId } = await insertJob(t.db, { status: 'processing' });
      await run(jobId, done(jobId, fileId));
      const before = await snapshotTables(t.db);
      const outcome = await run(jobId, done(jobId, fileId));
      expect(outcome).toMatchObject({
        decision: 'duplicate',
        from: 'done',
        to: 'done',
        reason: 'same_msg_id',
      });
      expect(await snapshotTables(t.db)).toEqual(before);
    });

    it('service error: job error with the code and message, no result object, file ERROR', async () => {
      const { jobId } = await insertJob(t.db, { status: 'processing' });
      const before = await loadAll(t.db, jobId);
      const objectsBefore = await t.db.selectFrom('s3_object').select('id').execute();
      const outcome = await run(jobId, {
        type: 'ENVELOPE_RESULT',
        msgId: `result:${jobId}:1`,
        status: 'error',
        service,
        error: { code: 'UNSUPPORTED_FORMAT', message: 'the file is not a spreadsheet' },
      });
      const after = await loadAll(t.db, jobId);
      expect(outcome).toMatchObject({ decision: 'applied', from: 'processing', to: 'error' });
      expect(after.job).toEqual({
        ...before.job,
        status: 'error',
        service_name: 'tabular-parser',
        service_version: '2.3.1',
        finished_at: after.job.finished_at,
        error_code: 'UNSUPPORTED_FORMAT',
        error_message: 'the file is not a spreadsheet',
        result_s3_object_id: null,
        result_msg_id: `result:${jobId}:1`,
        updated_at: after.job.updated_at,
      });
      expect(after.job.finished_at).toBeInstanceOf(Date);
      expect(after.file).toEqual({
        ...before.file,
        status: 'ERROR',
        error_code: 'UNSUPPORTED_FORMAT',
        updated_at: after.file.updated_at,
      });
      expect(await t.db.selectFrom('s3_object').select('id').execute()).toHaveLength(objectsBefore.length);
    });

    it('a result after timeout changes nothing and is reported late', async () => {
      const { jobId, fileId } = await insertJob(t.db, { status: 'timeout', error_code: 'TIMEOUT' });
      const before = await snapshotTables(t.db);
      const outcome = await run(jobId, done(jobId, fileId));
      expect(outcome).toMatchObject({
        decision: 'late',
        from: 'timeout',
        to: 'timeout',
        reason: 'result_after_final',
      });
      expect(await snapshotTables(t.db)).toEqual(before);
    });

    it('a result for a job still published is applied (the ack was lost), and the file moves to PROCESSING', async () => {
      const { jobId, fileId } = await insertJob(t.db, { status: 'published' });
      const before = await loadAll(t.db, jobId);
      expect(before.file.status).toBe('QUEUED');
      const outcome = await run(jobId, done(jobId, fileId));
      const after = await loadAll(t.db, jobId);
      expect(outcome).toMatchObject({ decision: 'applied', from: 'published', to: 'done' });
      expect(after.job.status).toBe('done');
      expect(after.file.status).toBe('PROCESSING');
    });

    it('a file whose current job is another job is never touched', async () => {
      const { jobId, fileId } = await insertJob(t.db, { status: 'processing', fileIsCurrent: false });
      const fileBefore = await t.db
        .selectFrom('stored_file')
        .selectAll()
        .where('id', '=', fileId)
        .executeTakeFirstOrThrow();
      const outcome = await run(jobId, {
        type: 'ENVELOPE_RESULT',
        msgId: `result:${jobId}:1`,
        status: 'error',
        service,
        error: { code: 'BROKEN', message: 'x' },
      });
      expect(outcome).toMatchObject({ decision: 'applied', to: 'error' });
      const fileAfter = await t.db
        .selectFrom('stored_file')
        .selectAll()
        .where('id', '=', fileId)
        .executeTakeFirstOrThrow();
      expect(fileAfter).toEqual(fileBefore);
    });

    it('an unknown job is reported as such and nothing is written', async () => {
      const before = await snapshotTables(t.db);
      const jobId = randomUUID();
      const outcome = await run(jobId, ack(jobId));
      expect(outcome).toMatchObject({ jobId, decision: 'unknown_job', from: null, to: null });
      expect(await snapshotTables(t.db)).toEqual(before);
    });
  });

  describe('concurrency', () => {
    it('50 concurrent steps with 50 different results for one job: exactly one applied', async () => {
      const { jobId, fileId } = await insertJob(t.db, { status: 'processing' });
      const objectsBefore = (await t.db.selectFrom('s3_object').select('id').execute()).length;
      const outcomes = await Promise.all(
        Array.from({ length: 50 }, (_, n) => run(jobId, done(jobId, fileId, n + 1))),
      );
      const applied = outcomes.filter((o) => o.decision === 'applied');
      expect(applied).toHaveLength(1);
      expect(outcomes.filter((o) => o.decision === 'late')).toHaveLength(49);
      const { job, transitions } = await loadAll(t.db, jobId);
      expect(transitions).toHaveLength(1);
      expect(job.status).toBe('done');
      expect((await t.db.selectFrom('s3_object').select('id').execute()).length).toBe(objectsBefore + 1);
    });

    it('50 concurrent deliveries of the same message: exactly one effect', async () => {
      const { jobId, fileId } = await insertJob(t.db, { status: 'processing' });
      const objectsBefore = (await t.db.selectFrom('s3_object').select('id').execute()).length;
      const outcomes = await Promise.all(Array.from({ length: 50 }, () => run(jobId, done(jobId, fileId))));
      expect(outcomes.filter((o) => o.decision === 'applied')).toHaveLength(1);
      expect(outcomes.filter((o) => o.decision === 'duplicate')).toHaveLength(49);
      const { transitions } = await loadAll(t.db, jobId);
      expect(transitions).toHaveLength(1);
      expect((await t.db.selectFrom('s3_object').select('id').execute()).length).toBe(objectsBefore + 1);
    });
  });
});

/**
 * A transaction of its own that has changed the job (`change`, run in it) and commits only once
 * another backend waits for a lock: the unlocked path's write, sent meanwhile, waits for the job
 * and then finds it in a version its snapshot does not see. Resolves when it has committed.
 */
async function changeWhileWaitedFor(
  change: (client: pg.PoolClient) => Promise<unknown>,
): Promise<() => Promise<void>> {
  const holder = await t.pool.connect();
  await holder.query('BEGIN');
  await change(holder);
  const pid = (await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
  const committed = (async () => {
    try {
      for (;;) {
        const { rows } = await t.pool.query<{ n: string }>(
          `SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND $1 = ANY (pg_blocking_pids(pid))`,
          [pid],
        );
        if (Number(rows[0]!.n) > 0) break;
        await new Promise((r) => setTimeout(r, 5));
      }
      await holder.query('COMMIT');
    } finally {
      holder.release();
    }
  })();
  return () => committed;
}

describe('the unlocked path when another transaction changes the job while its write waits for it', () => {
  it('the write aborts as a whole and is sent again: the decision stands on the new row', async () => {
    const { jobId, fileId } = await insertJob(t.db, { status: 'published' });
    const objectsBefore = (await t.db.selectFrom('s3_object').select('id').execute()).length;
    // Another writer applies the ack and commits once the result's write waits for the job.
    const committed = await changeWhileWaitedFor((client) =>
      applyEvents(pgStepSql(client), [{ jobId, event: ack(jobId) }]),
    );
    const names: string[] = [];
    const outcome = await unlocked(jobId, done(jobId, fileId), undefined, (name) => void names.push(name));
    await committed();

    expect(names).toEqual([WRITE.name, WRITE.name]);
    // Applied on the row the ack left: processing → done, not published → done.
    expect(outcome).toMatchObject({ decision: 'applied', from: 'processing', to: 'done', fileId });
    const { job, file, transitions } = await loadAll(t.db, jobId);
    expect(job.status).toBe('done');
    expect(file.status).toBe('PROCESSING');
    // Nothing of the aborted write remains: one object, and exactly the two transitions.
    expect((await t.db.selectFrom('s3_object').select('id').execute()).length).toBe(objectsBefore + 1);
    expect(transitions.map((r) => [r.from_status, r.to_status])).toEqual([
      ['published', 'processing'],
      ['processing', 'done'],
    ]);
  });

  it('hands the work back, having written nothing, when the job keeps changing', async () => {
    const { jobId, fileId } = await insertJob(t.db, { status: 'processing' });
    const commits: Array<() => Promise<void>> = [];
    // Before every write, another transaction changes the row (a no-op update still makes a new
    // version) and commits once the write waits for it.
    const interfere = async () => {
      commits.push(
        await changeWhileWaitedFor((client) =>
          client.query(`UPDATE recognition_job SET service_version = '2.3.1' WHERE id = $1`, [jobId]),
        ),
      );
    };
    const before = await snapshotTables(t.db);
    expect(await unlocked(jobId, done(jobId, fileId), undefined, interfere)).toBeUndefined();
    await Promise.all(commits.map((c) => c()));
    expect(commits).toHaveLength(3);
    const after = await snapshotTables(t.db);
    // Only the interfering updates show.
    expect({ ...after, jobs: undefined }).toEqual({ ...before, jobs: undefined });
    expect((await loadAll(t.db, jobId)).job.status).toBe('processing');
  });
});

describe('the unlocked path, a batch of several jobs', () => {
  it('one job changed while the write waits for it: nothing of the batch is written, then all is', async () => {
    const jobs = await Promise.all([1, 2, 3].map(() => insertJob(t.db, { status: 'published' })));
    const changed = jobs[1]!;
    // Another writer acks the middle job and commits once the batch's write waits for it; the
    // first write must abort as a whole, the other two jobs included.
    const committed = await changeWhileWaitedFor((client) =>
      applyEvents(pgStepSql(client), [{ jobId: changed.jobId, event: ack(changed.jobId) }]),
    );
    const names: string[] = [];
    const outcomes = await unlockedBatch(
      jobs.map((j) => ({ jobId: j.jobId, event: done(j.jobId, j.fileId) })),
      undefined,
      (name) => void names.push(name),
    );
    await committed();
    expect(names).toEqual([WRITE.name, WRITE.name]);
    expect(outcomes!.map((o) => [o.decision, o.from, o.to])).toEqual([
      ['applied', 'published', 'done'],
      ['applied', 'processing', 'done'],
      ['applied', 'published', 'done'],
    ]);
    for (const j of jobs) {
      const { job, transitions } = await loadAll(t.db, j.jobId);
      expect(job.status).toBe('done');
      // Exactly one result transition per job: nothing of the aborted write remains.
      expect(transitions.filter((r) => r.to_status === 'done')).toHaveLength(1);
    }
  });

  it("stores each transition's detail as the machine made it, the batch's shared details sent once", async () => {
    const jobs = await Promise.all([1, 2, 3, 4].map(() => insertJob(t.db, { status: 'processing' })));
    const acked = await insertJob(t.db, { status: 'published' });
    const failed = (jobId: string): JobEventInput => ({
      type: 'ENVELOPE_RESULT',
      msgId: `result:${jobId}:1`,
      status: 'error',
      service,
      error: { code: 'UNSUPPORTED_FORMAT', message: 'xls 95 is not supported' },
    });
    const items = [
      { jobId: jobs[0]!.jobId, event: done(jobs[0]!.jobId, jobs[0]!.fileId) },
      { jobId: jobs[1]!.jobId, event: failed(jobs[1]!.jobId) },
      { jobId: acked.jobId, event: ack(acked.jobId) },
      { jobId: jobs[2]!.jobId, event: done(jobs[2]!.jobId, jobs[2]!.fileId) },
      { jobId: jobs[3]!.jobId, event: failed(jobs[3]!.jobId) },
    ];
    expect((await unlockedBatch(items))!.map((o) => o.decision)).toEqual(Array(5).fill('applied'));
    const detailOf = async (jobId: string) => (await loadAll(t.db, jobId)).transitions.at(-1)!.detail;
    const doneDetail = { status: 'done', service: service.name };
    const errorDetail = { status: 'error', service: service.name, error_code: 'UNSUPPORTED_FORMAT' };
    expect(await Promise.all(items.map((i) => detailOf(i.jobId)))).toEqual([
      doneDetail,
      errorDetail,
      { service: service.name },
      doneDetail,
      errorDetail,
    ]);
  });

  it.each([
    ['a job that does not exist', async () => ({ jobId: randomUUID(), event: ack(randomUUID()) })],
    [
      "a result from a service other than the job's",
      async () => {
        const j = await insertJob(t.db, { status: 'processing' });
        return {
          jobId: j.jobId,
          event: { ...done(j.jobId, j.fileId), service: { name: 'other-parser', version: '1.0.0' } },
        };
      },
    ],
    [
      'a result already applied (a duplicate)',
      async () => {
        const j = await insertJob(t.db, { status: 'processing' });
        await applyEvent(t.db, j.jobId, done(j.jobId, j.fileId), RESULTS);
        return { jobId: j.jobId, event: done(j.jobId, j.fileId) };
      },
    ],
    [
      'a repeated ack (the job is processing already)',
      async () => {
        const j = await insertJob(t.db, { status: 'processing' });
        return { jobId: j.jobId, event: ack(j.jobId) };
      },
    ],
    [
      'a result of a job whose file points at another job',
      async () => {
        const j = await insertJob(t.db, { status: 'processing', fileIsCurrent: false });
        return { jobId: j.jobId, event: done(j.jobId, j.fileId) };
      },
    ],
  ] as Array<[string, () => Promise<StepItem>]>)(
    'hands back a batch with %s, having sent one write that wrote nothing',
    async (_, other) => {
      const { jobId, fileId } = await insertJob(t.db, { status: 'processing' });
      const item = await other();
      const before = await snapshotTables(t.db);
      const names: string[] = [];
      const outcomes = await unlockedBatch(
        [{ jobId, event: done(jobId, fileId) }, item],
        (name) => void names.push(name),
      );
      expect(outcomes).toBeNull();
      expect(names).toEqual([WRITE.name]);
      expect(await snapshotTables(t.db)).toEqual(before);
    },
  );

  it("writes the times it assigns as the database's clock at the write, to the millisecond", async () => {
    const published = await insertJob(t.db, { status: 'published' });
    const processing = await insertJob(t.db, { status: 'processing' });
    const outcomes = await unlockedBatch([
      { jobId: published.jobId, event: ack(published.jobId) },
      { jobId: processing.jobId, event: done(processing.jobId, processing.fileId) },
    ]);
    expect(outcomes!.map((o) => o.decision)).toEqual(['applied', 'applied']);
    const { rows } = await t.pool.query<{ exact: boolean }>(
      `SELECT COALESCE(finished_at, started_at) = date_trunc('milliseconds', updated_at) AS exact
       FROM recognition_job WHERE id = ANY($1::uuid[])`,
      [[published.jobId, processing.jobId]],
    );
    // started_at of the ack, finished_at of the result: the statement's transaction clock (which
    // `updated_at` holds), truncated to the millisecond.
    expect(rows.map((r) => r.exact)).toEqual([true, true]);
  });

  it('hands back a batch with two events of one job, or an event without an unlocked decision, sending nothing', async () => {
    const { jobId, fileId } = await insertJob(t.db, { status: 'published' });
    const names: string[] = [];
    const twice = [
      { jobId, event: ack(jobId) },
      { jobId, event: done(jobId, fileId) },
    ];
    expect(await unlockedBatch(twice, (name) => void names.push(name))).toBeNull();
    const deadline = [{ jobId, event: { type: 'DEADLINE_PASSED' } as JobEventInput }];
    expect(await unlockedBatch(deadline, (name) => void names.push(name))).toBeNull();
    expect(names).toEqual([]);
  });

  it('concurrent batches of the same jobs in every order, unlocked and locked: no deadlock, each result applied once', async () => {
    const jobs = await Promise.all(
      Array.from({ length: 8 }, () => insertJob(t.db, { status: 'processing' })),
    );
    const items = jobs.map((j) => ({ jobId: j.jobId, event: done(j.jobId, j.fileId) }));
    const orders = [items, [...items].reverse(), [...items.slice(4), ...items.slice(0, 4)]];
    const runs = await Promise.all(
      orders.flatMap((order) => [
        unlockedBatch(order).then(
          (o) => o ?? t.db.transaction().execute((tx) => applyEvents(tx, order, RESULTS)),
        ),
        t.db.transaction().execute((tx) => applyEvents(tx, order, RESULTS)),
      ]),
    );
    // Every batch decided every item: one of the six applied each result, the others saw it done.
    for (const [i, j] of jobs.entries()) {
      const decisions = runs.map((outcomes) => outcomes.find((o) => o.jobId === j.jobId)!.decision);
      expect(
        decisions.filter((d) => d === 'applied'),
        `job ${i}`,
      ).toHaveLength(1);
      expect(
        decisions.filter((d) => d === 'duplicate'),
        `job ${i}`,
      ).toHaveLength(5);
      const { job, transitions } = await loadAll(t.db, j.jobId);
      expect(job.status).toBe('done');
      expect(transitions).toHaveLength(1);
    }
  });
});

describe('the unlocked path and a transaction holding the job (the publisher, mid-publish)', () => {
  it('waits for it, then decides on what it committed: the ack that overtook `published` is applied', async () => {
    const { jobId } = await insertJob(t.db, { status: 'pending' });
    // The publisher's transaction: the job locked and moved to published, not yet committed.
    const publisher = await t.pool.connect();
    try {
      await publisher.query('BEGIN');
      await applyEvents(pgStepSql(publisher), [
        { jobId, event: { type: 'PUBLISHED', replyTimeoutMs: 600_000 } },
      ]);
      // The service's ack arrives meanwhile.
      let settled = false;
      const acked = unlocked(jobId, ack(jobId)).finally(() => (settled = true));
      await new Promise((r) => setTimeout(r, 300));
      expect(settled).toBe(false);
      await publisher.query('COMMIT');
      expect(await acked).toMatchObject({ decision: 'applied', from: 'published', to: 'processing' });
    } finally {
      publisher.release();
    }
    const { job, transitions } = await loadAll(t.db, jobId);
    expect(job.status).toBe('processing');
    expect(transitions.map((r) => [r.from_status, r.to_status])).toEqual([
      ['pending', 'published'],
      ['published', 'processing'],
    ]);
  });
});

describe('a batch larger than one write (the locked path writes it in chunks)', () => {
  it('a job changed by the first chunk and again by the second is found where the first write left it', async () => {
    // 251 events: the first job's ack, 249 other jobs' acks, then the first job's result — the
    // 251st event, in the second chunk of 250. The first chunk's write gives the job a new row
    // version elsewhere, so the address and version its lock read are no longer the job's: the
    // second chunk's write uses those the first returned.
    const first = await insertJob(t.db, { status: 'published' });
    const others = await Promise.all(
      Array.from({ length: 249 }, () => insertJob(t.db, { status: 'published' })),
    );
    const outcomes = await t.db
      .transaction()
      .execute((tx) =>
        applyEvents(
          tx,
          [
            { jobId: first.jobId, event: ack(first.jobId) },
            ...others.map((o) => ({ jobId: o.jobId, event: ack(o.jobId) })),
            { jobId: first.jobId, event: done(first.jobId, first.fileId) },
          ],
          RESULTS,
        ),
      );
    expect(outcomes.map((o) => o.decision)).toEqual(Array(251).fill('applied'));
    const after = await loadAll(t.db, first.jobId);
    expect(after.job.status).toBe('done');
    expect(after.job.started_at).not.toBeNull();
    expect(after.transitions.map((tr) => `${tr.from_status}>${tr.to_status}`)).toEqual([
      'published>processing',
      'processing>done',
    ]);
    for (const o of others) expect((await loadAll(t.db, o.jobId)).job.status).toBe('processing');
  });
});

/**
 * Tables of a few thousand analysed rows, for tests of plans: on a handful of rows every plan
 * costs the same (a sequential scan is as good as any), and PostgreSQL picks any of them.
 */
async function fillTables(client: pg.PoolClient): Promise<void> {
  await client.query({
    text: `
    WITH o AS (
      INSERT INTO s3_object (bucket, key, bucket_role, created_by)
      VALUES ('arm-ka', 'uploads/' || gen_random_uuid() || '.xlsx', 'uploads', 'test')
      RETURNING id
    ),
    f AS (
      INSERT INTO stored_file (s3_object_id, original_name, status)
      SELECT o.id, 'filler.xlsx', 'PROCESSING' FROM o, generate_series(1, 5000)
      RETURNING id
    )
    INSERT INTO recognition_job (file_id, attempt, target_service, status, publish_attempts, published_at, reply_deadline)
    SELECT id, 1, 'tabular-parser', 'processing', 1, now(), now() + interval '1 hour' FROM f`,
  });
  await client.query({ text: 'ANALYZE stored_file, recognition_job' });
}

describe("the write's array literals", () => {
  it('read back by PostgreSQL as the values they were built from, for every type the write uses', async () => {
    const awkward = [
      '',
      'NULL',
      'null',
      'a,b',
      '{x}',
      ' lead',
      'trail ',
      'q"uote',
      'back\\slash',
      'tab\tnl\n',
      'ünï',
      null,
    ];
    const cases: Array<[string, ArrayElement[], string]> = [
      ['text', awkward, 'v::text'],
      [
        'jsonb',
        [
          JSON.stringify({ a: 'q"uote\\', b: [1, { c: null }] }),
          null,
          '"s"',
          JSON.stringify({ ws: 'tab\tnl\n\r', ctl: '\u0001', u: 'ünï \u2028', lit: '{x},"y" NULL' }),
        ],
        'v::text',
      ],
      ['tid', ['(0,1)', '(4294967295,65535)', null], 'v::text'],
      [
        'timestamptz',
        [new Date('2025-03-01T10:00:00.123Z').toISOString(), null],
        'to_char(v AT TIME ZONE \'UTC\', \'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"\')',
      ],
      ['uuid', [randomUUID(), null], 'v::text'],
      ['bigint', [9007199254740991, '42', null], 'v::text'],
      ['integer', [0, -5, null], 'v::text'],
      ['xid', ['123', null], 'v::text'],
    ];
    for (const [type, values, asText] of cases) {
      const { rows } = await t.pool.query<{ v: string | null }>(
        `SELECT ${asText} AS v FROM unnest($1::${type}[]) WITH ORDINALITY AS u(v, n) ORDER BY n`,
        [arrayLiteral(type, values)],
      );
      // A document as the value it parses to: jsonb keeps its keys in an order of its own.
      const expected = values.map((v) =>
        v === null ? null : type === 'jsonb' ? (JSON.parse(String(v)) as unknown) : String(v),
      );
      const got = rows.map((r) => (r.v !== null && type === 'jsonb' ? (JSON.parse(r.v) as unknown) : r.v));
      expect(got, type).toEqual(expected);
    }
  });
});

describe("the write's plan (generic, as the hot paths run it)", () => {
  interface PlanNode {
    'Node Type': string;
    'Relation Name'?: string;
    'CTE Name'?: string;
    'Function Name'?: string;
    'Plan Rows': number;
    'Parent Relationship'?: string;
    'Index Name'?: string;
    'Index Cond'?: string;
    Plans?: PlanNode[];
  }
  const nodes = (n: PlanNode): PlanNode[] => [n, ...(n.Plans ?? []).flatMap(nodes)];
  /**
   * Each parameter's SQL type, in order: the parts' arrays, the transition details, the count of
   * jobs, whether to return them, the expectations to check (ids, statuses, target services, the
   * files the result objects' keys name).
   */
  const types = [
    ...WRITE_PARTS.flatMap((part) =>
      Object.values(WRITE_PARAMETERS[part] as Record<string, string>).map((t) => `${t}[]`),
    ),
    'jsonb[]',
    'integer',
    'boolean',
    'uuid[]',
    'integer[]',
    'text[]',
    'text[]',
  ];

  /**
   * The generic plan of the write for `n` processing jobs, each with a result object and a file
   * change: on the locked paths, given their rows' addresses and versions (read under lock); on
   * the unlocked path (`expected`), given their ids and what their decisions expect of them.
   */
  let prepared = 0;
  async function planFor(n: number, path: 'locked' | 'expected' = 'locked'): Promise<PlanNode[]> {
    await withPgClient(t.pool, fillTables);
    const jobs = await Promise.all(
      Array.from({ length: n }, () => insertJob(t.db, { status: 'processing' })),
    );
    const plan = await withPgClient(t.pool, async (client: pg.PoolClient) => {
      await client.query('BEGIN');
      try {
        await client.query('SET LOCAL plan_cache_mode = force_generic_plan');
        const { rows } = await client.query<{ id: string; file_id: string; ctid: string; xmin: string }>(
          `SELECT j.id, j.file_id, j.ctid::text AS ctid, j.xmin::text AS xmin
           FROM recognition_job j WHERE j.id = ANY($1::uuid[]) FOR UPDATE`,
          [jobs.map((j) => j.jobId)],
        );
        const column = <T>(f: (r: (typeof rows)[number]) => T) => rows.map(f);
        const none = () => rows.map(() => null);
        // The jobs' columns the plan depends on; every other column is null.
        const jobValues: Record<string, unknown[]> = {
          ...(path === 'locked' ? { ctid: column((r) => r.ctid), version: column((r) => r.xmin) } : {}),
          status: column(() => 'done'),
          result_bucket: column(() => 'arm-ka'),
          result_key: column((r) => `results/${r.id}.json`),
        };
        const jobColumns = Object.keys(WRITE_PARAMETERS.jobs).map((c) => jobValues[c] ?? none());
        const values: unknown[] = [
          column(() => 'arm-ka'),
          column((r) => `results/${r.id}.json`),
          column(() => 'tabular-parser'),
          ...jobColumns,
          // Each file change names its job by its place among the job rows.
          rows.map((_, i) => i + 1),
          column(() => 'DONE'),
          none(),
          ...Object.keys(WRITE_PARAMETERS.transitions).map(() => []),
          null,
          rows.length,
          path === 'expected',
          ...(path === 'locked'
            ? [null, null, null, null]
            : [
                column((r) => r.id),
                column(() => 0b110),
                column(() => 'tabular-parser'),
                column((r) => r.file_id),
              ]),
        ];
        // A name of its own: a prepared statement outlives the transaction, on a pooled connection.
        const name = `plan_check_${++prepared}`;
        await client.query({ text: `PREPARE ${name}(${types.join(', ')}) AS ${WRITE.text}` });
        // EXECUTE takes no bind parameters: the arrays go in as literals.
        const lit = (v: unknown, type: string) =>
          Array.isArray(v)
            ? `ARRAY[${v.map((e) => (e === null ? 'NULL' : client.escapeLiteral(String(e)))).join(', ')}]::${type}`
            : String(v);
        const explained = await client.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(
          `EXPLAIN (FORMAT JSON) EXECUTE ${name}(${values.map((v, i) => lit(v, types[i]!)).join(', ')})`,
        );
        if (process.env['SHOW_PLAN']) {
          const text = await client.query(
            `EXPLAIN EXECUTE ${name}(${values.map((v, i) => lit(v, types[i]!)).join(', ')})`,
          );
          console.log(text.rows.map((r) => r['QUERY PLAN']).join('\n'));
        }
        return explained.rows[0]!['QUERY PLAN'][0]!.Plan;
      } finally {
        await client.query('ROLLBACK');
      }
    });
    return nodes(plan);
  }
  /** The joins that read `input` directly or through a Hash. */
  const joinsOver = (all: PlanNode[], input: (n: PlanNode) => boolean) =>
    all
      .filter((n) => n['Node Type'] !== 'Hash')
      .filter((n) =>
        (n.Plans ?? []).some((c) => input(c) || (c['Node Type'] === 'Hash' && (c.Plans ?? []).some(input))),
      )
      .map((n) => n['Node Type']);
  const tidScanOf = (relation: string) => (n: PlanNode) =>
    n['Node Type'] === 'Tid Scan' && n['Relation Name'] === relation;

  it.each(['locked', 'expected'] as const)(
    '%s: finds each job at its row address and hashes the result objects, whatever the batch',
    async (path) => {
      const all = await planFor(3, path);
      // The update joins its rows by a hash.
      expect(joinsOver(all, tidScanOf('recognition_job'))).toEqual(['Hash Join']);
      // The unlocked path's jobs are looked up by their ids and locked in id order (a sort under
      // the row locks) before anything is written; the locked paths send none.
      const lockRows = all.filter((n) => n['Node Type'] === 'LockRows');
      const lockedFrom = (n: PlanNode) => (n.Plans ?? []).filter((c) => c['Parent Relationship'] === 'Outer');
      expect(lockRows.map((n) => lockedFrom(n).map((c) => c['Node Type']))).toEqual([['Sort']]);
      const jobLookups = all.filter((n) => n['Relation Name'] === 'recognition_job' && n['Index Name']);
      expect(jobLookups.map((n) => [n['Node Type'], n['Index Name']])).toEqual([
        ['Index Scan', 'recognition_job_pkey'],
      ]);
      // The objects' CTE is read once, into a hash, not once per job by a nested loop.
      expect(joinsOver(all, (n) => n['CTE Name'] === 'obj')).toEqual(['Hash Join']);
      // The files through their primary key (an index scan, or a bitmap of it: the planner picks
      // either for a handful of ids, by the table's size), never a scan of the table; each file
      // looked up by the id its job row gives, never a probe that also walks an array of ids
      // (which the index sorts again at every probe). Both the file change and the check of the
      // unlocked path look files up so.
      const fileScans = all.filter(
        (n) => n['Relation Name'] === 'stored_file' && n['Node Type'] !== 'ModifyTable',
      );
      expect(fileScans).toHaveLength(2);
      for (const scan of fileScans) {
        const byKey = [scan, ...(scan.Plans ?? [])].filter((n) => n['Index Name'] === 'stored_file_pkey');
        expect(byKey.map((n) => n['Node Type'])).toEqual([
          scan['Node Type'] === 'Index Scan' ? 'Index Scan' : 'Bitmap Index Scan',
        ]);
        expect(byKey[0]!['Index Cond']).not.toMatch(/ANY/);
      }
      expect(all.some((n) => n['Node Type'] === 'Seq Scan')).toBe(false);
    },
  );

  it("estimates a batch's rows for every part of the write, not ten", async () => {
    const all = await planFor(3);
    // The unlocked path's expectations come through a `unnest` of several arrays (a scan of several
    // functions, so no one name), which only drives the lookups of its jobs.
    const parts = all.filter((n) => n['Node Type'] === 'Function Scan' && n['Function Name'] !== undefined);
    // Each part's arrays come through its function (migration 0013), estimated at 100 rows: the
    // order of an inbox batch and of a watchdog chunk, so joins and hashes are sized for a batch;
    // `unnest` of a parameter is estimated at 10 in a generic plan.
    expect(parts.map((n) => n['Function Name']).sort()).toEqual(Object.values(UNNEST_FUNCTION).sort());
    for (const n of parts) expect(n['Plan Rows'], n['Function Name']).toBe(100);
  });

  it("each part's function takes the arrays the statement gives it, in order", async () => {
    for (const part of WRITE_PARTS) {
      const { rows } = await t.pool.query<{ args: string; result: string }>(
        `SELECT pg_get_function_identity_arguments(p.oid) AS args, pg_get_function_result(p.oid) AS result
         FROM pg_proc p WHERE p.proname = $1`,
        [UNNEST_FUNCTION[part]],
      );
      const declared = Object.entries(WRITE_PARAMETERS[part] as Record<string, string>);
      const sqlType = (t: string) => ({ timestamptz: 'timestamp with time zone' })[t] ?? t;
      expect(rows).toHaveLength(1);
      expect(rows[0]!.args).toBe(declared.map(([, type]) => `${sqlType(type)}[]`).join(', '));
      // It returns a column of each name and type, in the same order (the transitions' with their order).
      const returned = declared.map(([name, type]) => `${name} ${sqlType(type)}`);
      if (part === 'transitions') returned.push('seq bigint');
      expect(rows[0]!.result).toBe(`TABLE(${returned.join(', ')})`);
    }
  });
});

describe("the inbox's statements are planned once per connection", () => {
  /** A valid result envelope for a job, as it comes off the stream. */
  const resultItem = (j: { jobId: string; fileId: string }, seq: number) =>
    decodeItem(
      {
        subject: 'recognition.result',
        stream: 'RECOGNITION_RESULTS',
        streamSeq: seq,
        headers: { 'Nats-Msg-Id': [`result:${j.jobId}:1`] },
        data: new TextEncoder().encode(
          JSON.stringify({
            job_id: j.jobId,
            status: 'done',
            service,
            result_s3: { bucket: 'arm-ka', key: `results/${j.fileId}/${j.jobId}/result.json` },
            result_schema_version: '1.0',
            sent_at: new Date().toISOString(),
          }),
        ),
      },
      1 << 20,
    );

  it('batches of one job and of two jobs, unlocked or locked, run on generic plans, not a new plan per execution', async () => {
    // One connection, so every batch uses (and pg_prepared_statements shows) the same session.
    const pool = new pg.Pool({ connectionString: t.url, max: 1 });
    // pool.end() resolves before its connection has closed: if the test database's DROP … FORCE
    // reaches it first, the connection emits 'error' with nobody listening, failing the run.
    pool.on('connect', (client) => client.on('error', () => undefined));
    try {
      // On a handful of rows PostgreSQL settles on the generic plan whatever the statement.
      await withPgClient(pool, fillTables);
      const jobs = await Promise.all(
        Array.from({ length: 30 }, () => insertJob(t.db, { status: 'processing' })),
      );
      let seq = 0;
      // Ten batches of one job and ten of two jobs (the unlocked path), and ten of a job with a job
      // that does not exist (the unlocked path hands them to the locked one, which quarantines it,
      // after reading which of the batch's result objects are registered).
      for (const j of jobs.slice(0, 10)) await applyInboxBatchTx(pool, [resultItem(j, ++seq)], RESULTS);
      for (let i = 10; i < 30; i += 2)
        await applyInboxBatchTx(
          pool,
          [resultItem(jobs[i]!, ++seq), resultItem(jobs[i + 1]!, ++seq)],
          RESULTS,
        );
      const more = await Promise.all(
        Array.from({ length: 10 }, () => insertJob(t.db, { status: 'processing' })),
      );
      for (const j of more) {
        const unknown = { jobId: randomUUID(), fileId: randomUUID() };
        const outcomes = await applyInboxBatchTx(
          pool,
          [resultItem(j, ++seq), resultItem(unknown, ++seq)],
          RESULTS,
        );
        expect(outcomes.map((o) => o.kind)).toEqual(['step', 'quarantined']);
      }
      for (const j of [...jobs, ...more]) expect((await loadAll(t.db, j.jobId)).job.status).toBe('done');

      const plans = await withPgClient(pool, async (client) => {
        const { rows } = await client.query<{ name: string; generic_plans: string; custom_plans: string }>({
          text: `SELECT name, generic_plans, custom_plans FROM pg_prepared_statements WHERE name LIKE 'rc_step_%' ORDER BY name`,
        });
        return rows.map((r) => ({
          name: r.name,
          generic: Number(r.generic_plans),
          custom: Number(r.custom_plans),
        }));
      });
      expect(plans.map((p) => p.name).sort()).toEqual(
        [LOCK.name, REGISTERED_OBJECTS.name, WRITE.name].sort(),
      );
      // PostgreSQL's default tries five custom plans before it settles; with an array of a few
      // ids it never settled, and planned the statement at every one of its executions.
      const executions = { [WRITE.name]: 40, [LOCK.name]: 10, [REGISTERED_OBJECTS.name]: 10 };
      for (const p of plans) {
        expect(p.custom, p.name).toBeLessThanOrEqual(5);
        // Both paths write with the one statement; every batch is written unlocked first, and the
        // ten with an unknown job again on the locked path.
        expect(p.generic + p.custom, p.name).toBe(executions[p.name]);
      }
    } finally {
      await pool.end();
    }
  });
});
