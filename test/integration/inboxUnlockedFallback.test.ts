/**
 * An inconsistency on the inbox's unlocked path (its write's rows not what its plan says) is that
 * path's bug, never the envelopes': the batch is applied through the locked path, reported once,
 * and nothing is quarantined.
 */
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { InconsistencyError } from '../../src/errors.js';
import { WRITE } from '../../src/step/index.js';
import {
  applyInboxBatchTx,
  decodeItem,
  type PgPool,
  type PgPoolClient,
} from '../../src/daemon/inboxBatch.js';
import { insertJob, RESULTS } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true });
const SERVICE = { name: 'tabular-parser', version: '1.0.0' };

let seq = 0;
function resultItem(job: { jobId: string; fileId: string }) {
  const body = {
    job_id: job.jobId,
    status: 'done',
    service: SERVICE,
    result_s3: { bucket: 'arm-ka', key: `results/${job.fileId}/${job.jobId}/result.json` },
    result_schema_version: '1.0',
    sent_at: new Date().toISOString(),
  };
  return decodeItem(
    {
      subject: 'recognition.result',
      stream: 'RECOGNITION_RESULTS',
      streamSeq: ++seq,
      headers: { 'Nats-Msg-Id': [`result:${job.jobId}:1`] },
      data: new TextEncoder().encode(JSON.stringify(body)),
    },
    1 << 20,
  );
}

/**
 * The test's pool, but the unlocked path's write (the step's write outside a transaction) answers
 * a row of a job the batch does not name, and reaches no server: the unlocked path's outcomes
 * cannot be read from it. Writes inside a transaction (the locked path) go through.
 */
function inconsistentUnlockedWrites(pool: PgPool): PgPool & { forced: () => number } {
  let forced = 0;
  return {
    forced: () => forced,
    async connect(): Promise<PgPoolClient> {
      const client = await pool.connect();
      let inTransaction = false;
      return {
        async query<R>(config: { name?: string; text: string; values?: unknown[] }) {
          if (config.text.startsWith('BEGIN')) inTransaction = true;
          if (config.text === 'COMMIT' || config.text === 'ROLLBACK') inTransaction = false;
          if (!inTransaction && config.name === WRITE.name) {
            forced++;
            const stranger = { id: '00000000-0000-4000-8000-000000000000', prior_status: 'published' };
            return { rows: [{ ...stranger, file_id: stranger.id } as R] };
          }
          return client.query<R>(config);
        },
        release: (destroy) => client.release(destroy),
      };
    },
  };
}

describe('an inconsistency on the unlocked path', () => {
  it('applies the batch through the locked path, reports it, and quarantines nothing', async () => {
    const jobs = await Promise.all([1, 2, 3].map(() => insertJob(t.db, { status: 'processing' })));
    const pool = inconsistentUnlockedWrites(t.pool);
    const reported: InconsistencyError[] = [];
    const outcomes = await applyInboxBatchTx(pool, jobs.map(resultItem), RESULTS, {
      hooks: { unlockedInconsistent: (err) => reported.push(err) },
    });
    expect(pool.forced()).toBe(1);
    expect(reported).toHaveLength(1);
    expect(reported[0]!.message).toMatch(/returned no row of job/);
    expect(outcomes).toEqual(
      jobs.map((j) =>
        expect.objectContaining({
          kind: 'step',
          outcome: expect.objectContaining({
            jobId: j.jobId,
            decision: 'applied',
            from: 'processing',
            to: 'done',
          }),
        }),
      ),
    );
    const rows = await t.db
      .selectFrom('recognition_job')
      .select(['id', 'status'])
      .where(
        'id',
        'in',
        jobs.map((j) => j.jobId),
      )
      .execute();
    expect(rows.map((r) => r.status)).toEqual(['done', 'done', 'done']);
    const quarantined = await sql<{ n: string }>`SELECT count(*) AS n FROM inbox_quarantine`.execute(t.db);
    expect(Number(quarantined.rows[0]!.n)).toBe(0);
  });
});
