/**
 * A result registers only its own job's object: one in the results bucket, under the job's prefix
 * `results/<file_id>/<job_id>/`, that `s3_object` does not hold yet. Any other `result_s3` (another
 * file's uploaded object, another job's result, another bucket, an object already registered) is
 * quarantined `RESULT_OBJECT_NOT_OWNED` and changes no row but its quarantine row: the job keeps its
 * status, nothing is linked, no `s3_object` row is added or changed. On the real PostgreSQL, on
 * both paths of the inbox's batches, with a registration racing the result, and through a daemon
 * configured with a results bucket of its own.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { applyInboxBatchTx, decodeItem, type InboxOutcome } from '../../src/daemon/inboxBatch.js';
import { withPgClient } from '../../src/db/pgTransaction.js';
import { RESULT_SUBJECT, RESULTS_STREAM } from '../../src/nats/subjects.js';
import { applyUnlocked, pgStepSql } from '../../src/step/index.js';
import { insertJob, loadAll, RESULTS, snapshotTables, type JobFixture } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';

/** The daemon's results bucket: not the default, so that the configured one is seen to count. */
const DAEMON_BUCKET = 'recognition-results';
const t = useHarness({
  database: true,
  nats: true,
  client: true,
  daemon: { env: { RESULTS_BUCKET: DAEMON_BUCKET } },
});

const service = { name: 'tabular-parser', version: '1.0.0' };
let seq = 0;

/** A done result for `job` naming `s3`, as it comes off the stream. */
function resultItem(job: JobFixture, s3: { bucket: string; key: string }, msgId = `result:${job.jobId}:1`) {
  return decodeItem(
    {
      subject: RESULT_SUBJECT,
      stream: RESULTS_STREAM,
      streamSeq: ++seq,
      headers: { 'Nats-Msg-Id': [msgId] },
      data: new TextEncoder().encode(
        JSON.stringify({ job_id: job.jobId, status: 'done', service, result_s3: s3 }),
      ),
    },
    1 << 20,
  );
}

const own = (job: JobFixture, bucket: string = RESULTS.resultsBucket) => ({
  bucket,
  key: `results/${job.fileId}/${job.jobId}/result.json`,
});

/** The uploaded object of `job`'s file, as `insertJob` registered it. */
async function uploadOf(job: JobFixture): Promise<{ bucket: string; key: string }> {
  return t.db
    .selectFrom('stored_file as f')
    .innerJoin('s3_object as o', 'o.id', 'f.s3_object_id')
    .select(['o.bucket', 'o.key'])
    .where('f.id', '=', job.fileId)
    .executeTakeFirstOrThrow();
}

/**
 * A processing job to answer, and what its result may name instead of its own object: another
 * file's uploaded object, another job's applied result, its own key in another bucket, the job's
 * id under another file, and an object registered at its own key before its result came.
 */
async function scene() {
  const job = await insertJob(t.db, { status: 'processing' });
  const other = await insertJob(t.db, { status: 'processing' });
  const [done] = await applyInboxBatchTx(t.db, [resultItem(other, own(other))], RESULTS);
  expect(done).toMatchObject({ kind: 'step', outcome: { decision: 'applied', to: 'done' } });
  const squatted = await insertJob(t.db, { status: 'processing' });
  await t.db
    .insertInto('s3_object')
    .values({ ...own(squatted), bucket_role: 'uploads', created_by: 'files add' })
    .execute();
  return {
    job,
    squatted,
    foreign: {
      "another file's uploaded object": { object: await uploadOf(other), breach: 'prefix' },
      "another job's result object": { object: own(other), breach: 'prefix' },
      'another bucket': { object: own(job, 'elsewhere'), breach: 'bucket' },
      "the job's id under another file": {
        object: { bucket: 'arm-ka', key: `results/${other.fileId}/${job.jobId}/result.json` },
        breach: 'prefix',
      },
    },
  } as const;
}

/** The tables but the quarantine: what a refused result must leave exactly as it was. */
async function rowsBesidesQuarantine() {
  const { quarantine: _q, ...rest } = await snapshotTables(t.db);
  return rest;
}

function expectQuarantined(out: InboxOutcome | undefined, jobId: string, breach: string) {
  expect(out).toMatchObject({
    kind: 'quarantined',
    reason: 'RESULT_OBJECT_NOT_OWNED',
    jobId,
    details: { breach, expected: { bucket: 'arm-ka' } },
  });
}

/** The locked path alone (a Kysely transaction), or the inbox's way: unlocked first (a pg pool). */
const paths = {
  locked: () => t.db,
  unlocked: () => t.pool,
};

describe.each(['locked', 'unlocked'] as const)('on the %s path', (path) => {
  it("a result naming an object that is not its job's own: quarantined, the job unchanged, nothing linked or registered", async () => {
    const { job, squatted, foreign } = await scene();
    const cases = [
      ...Object.entries(foreign).map(([name, c]) => ({ name, target: job, ...c })),
      {
        name: 'an object registered at its own key before',
        target: squatted,
        object: own(squatted),
        breach: 'registered',
      },
    ];
    for (const c of cases) {
      const before = await rowsBesidesQuarantine();
      const quarantined = (await snapshotTables(t.db)).quarantine.length;
      const msgId = `result:${c.target.jobId}:${randomUUID()}`;
      const [out] = await applyInboxBatchTx(paths[path](), [resultItem(c.target, c.object, msgId)], RESULTS);
      expectQuarantined(out, c.target.jobId, c.breach);
      expect(out).toMatchObject({ msgId, details: { got: c.object } });
      // No job, file, object or transition changed: only the quarantine row was added.
      expect(await rowsBesidesQuarantine(), c.name).toEqual(before);
      const after = await snapshotTables(t.db);
      expect(after.quarantine, c.name).toHaveLength(quarantined + 1);
      expect(after.quarantine.at(-1), c.name).toMatchObject({
        reason: 'RESULT_OBJECT_NOT_OWNED',
        job_id: c.target.jobId,
        msg_id: msgId,
      });
    }
    // The registered object is still the upload it was, linked to no job.
    const squattedObject = await t.db
      .selectFrom('s3_object')
      .selectAll()
      .where('key', '=', own(squatted).key)
      .executeTakeFirstOrThrow();
    expect(squattedObject).toMatchObject({ bucket_role: 'uploads', created_by: 'files add' });
    expect((await loadAll(t.db, squatted.jobId)).job).toMatchObject({
      status: 'processing',
      result_s3_object_id: null,
      result_msg_id: null,
    });

    // The job's own object after all that: applied, and a new results object linked.
    const [out] = await applyInboxBatchTx(paths[path](), [resultItem(job, own(job))], RESULTS);
    expect(out).toMatchObject({
      kind: 'step',
      outcome: { decision: 'applied', from: 'processing', to: 'done' },
    });
    const r = await loadAll(t.db, job.jobId);
    const object = await t.db
      .selectFrom('s3_object')
      .selectAll()
      .where('id', '=', r.job.result_s3_object_id!)
      .executeTakeFirstOrThrow();
    expect(object).toMatchObject({ ...own(job), bucket_role: 'results', created_by: service.name });
  });

  it('a batch mixing a refused result with good ones: the good ones apply, the refused one is quarantined', async () => {
    const { job, foreign } = await scene();
    const good = await Promise.all([
      insertJob(t.db, { status: 'published' }),
      insertJob(t.db, { status: 'processing' }),
    ]);
    const outcomes = await applyInboxBatchTx(
      paths[path](),
      [
        resultItem(good[0]!, own(good[0]!)),
        resultItem(job, foreign["another file's uploaded object"].object),
        resultItem(good[1]!, own(good[1]!)),
      ],
      RESULTS,
    );
    expect(outcomes[0]).toMatchObject({ kind: 'step', outcome: { decision: 'applied', to: 'done' } });
    expectQuarantined(outcomes[1], job.jobId, 'prefix');
    expect(outcomes[2]).toMatchObject({ kind: 'step', outcome: { decision: 'applied', to: 'done' } });
    expect((await loadAll(t.db, job.jobId)).job.status).toBe('processing');
  });
});

describe('the unlocked path itself', () => {
  it('hands every refused result back to the locked path, having written nothing; applies the own object', async () => {
    const { job, squatted, foreign } = await scene();
    const event = (object: { bucket: string; key: string }, n: string) => ({
      type: 'ENVELOPE_RESULT' as const,
      msgId: `result:${n}`,
      status: 'done' as const,
      service,
      resultS3: object,
    });
    const unlocked = (jobId: string, object: { bucket: string; key: string }) =>
      withPgClient(t.pool, (client) =>
        applyUnlocked(pgStepSql(client), [{ jobId, event: event(object, randomUUID()) }], RESULTS),
      );
    const before = await snapshotTables(t.db);
    for (const [name, c] of Object.entries(foreign))
      expect(await unlocked(job.jobId, c.object), name).toBeNull();
    // Its key is the job's own: only the write finds the object registered, and writes nothing.
    expect(await unlocked(squatted.jobId, own(squatted))).toBeNull();
    expect(await snapshotTables(t.db)).toEqual(before);
    expect(await unlocked(job.jobId, own(job))).toMatchObject([{ decision: 'applied', to: 'done' }]);
  });
});

describe('an object registered while the result is being applied', () => {
  it.each(['locked', 'unlocked'] as const)(
    '%s: the write never points the job at it; the result is then refused',
    async (path) => {
      const job = await insertJob(t.db, { status: 'processing' });
      // Another transaction registers the job's result key (as an upload) and holds it uncommitted.
      const other = new pg.Client({ connectionString: t.url });
      await other.connect();
      try {
        await other.query('BEGIN');
        await other.query(
          `INSERT INTO s3_object (bucket, key, bucket_role, created_by) VALUES ($1, $2, 'uploads', 'racer')`,
          [own(job).bucket, own(job).key],
        );
        const applying = applyInboxBatchTx(paths[path](), [resultItem(job, own(job))], RESULTS).then(
          (outcomes) => ({ outcomes }),
          (err: unknown) => ({ err }),
        );
        // The write waits for the other transaction's key, then finds it committed.
        await waitForLockWait();
        await other.query('COMMIT');
        const settled = await applying;
        if (path === 'locked') {
          // It had read no such object: the transaction fails as a whole, to be tried again.
          expect(settled).toMatchObject({ err: { code: '40001' } });
          const [again] = await applyInboxBatchTx(t.db, [resultItem(job, own(job))], RESULTS);
          expectQuarantined(again, job.jobId, 'registered');
        } else {
          // The unlocked write fails the same way, and the locked path it hands over to refuses it.
          expect('outcomes' in settled && settled.outcomes[0]).toMatchObject({
            kind: 'quarantined',
            reason: 'RESULT_OBJECT_NOT_OWNED',
            details: { breach: 'registered', registered: { bucket_role: 'uploads', created_by: 'racer' } },
          });
        }
        const r = await loadAll(t.db, job.jobId);
        expect(r.job).toMatchObject({ status: 'processing', result_s3_object_id: null });
        expect(r.transitions).toEqual([]);
        const objects = await t.db
          .selectFrom('s3_object')
          .selectAll()
          .where('key', '=', own(job).key)
          .execute();
        expect(objects).toMatchObject([{ bucket_role: 'uploads', created_by: 'racer' }]);
      } finally {
        await other.query('ROLLBACK').catch(() => undefined);
        await other.end();
      }
    },
  );

  /** Until a session of this database waits for a lock. */
  async function waitForLockWait(): Promise<void> {
    for (let i = 0; i < 200; i++) {
      const { rows } = await t.pool.query<{ n: string }>(
        `SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
      );
      if (Number(rows[0]!.n) > 0) return;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    throw new Error('no session waited for the lock');
  }
});

describe('through the daemon, with RESULTS_BUCKET set', () => {
  it('checks against the configured bucket: the default bucket is refused, the configured one applied', async () => {
    const job = await insertJob(t.db, { status: 'processing' });
    await t.svc.envelope(
      { job_id: job.jobId, status: 'done', service, result_s3: own(job, 'arm-ka') },
      `result:${job.jobId}:1`,
    );
    await t.drained();
    const refused = await t.db
      .selectFrom('inbox_quarantine')
      .selectAll()
      .where('job_id', '=', job.jobId)
      .execute();
    expect(refused).toMatchObject([
      {
        reason: 'RESULT_OBJECT_NOT_OWNED',
        details: {
          breach: 'bucket',
          expected: { bucket: DAEMON_BUCKET, key_prefix: `results/${job.fileId}/${job.jobId}/` },
        },
      },
    ]);
    expect((await loadAll(t.db, job.jobId)).job.status).toBe('processing');
    const line = t.daemon.logs.lines.find((l) => l.job_id === job.jobId && l.event === 'quarantined');
    expect(line).toMatchObject({ level: 'warn', reason: 'RESULT_OBJECT_NOT_OWNED' });
    const metrics = await t.daemon.metrics.registry.metrics();
    expect(metrics).toMatch(/^recognition_inbox_quarantined_total\{reason="RESULT_OBJECT_NOT_OWNED"\} 1$/m);

    // The service answers again, with another message id and its object in the configured bucket.
    await t.svc.envelope(
      { job_id: job.jobId, status: 'done', service, result_s3: own(job, DAEMON_BUCKET) },
      `result:${job.jobId}:1:again`,
    );
    await t.drained();
    const r = await loadAll(t.db, job.jobId);
    expect(r.job.status).toBe('done');
    const object = await t.db
      .selectFrom('s3_object')
      .selectAll()
      .where('id', '=', r.job.result_s3_object_id!)
      .executeTakeFirstOrThrow();
    expect(object).toMatchObject({ ...own(job, DAEMON_BUCKET), bucket_role: 'results' });
  });
});
