/**
 * SIGTERM while 2 000 envelopes are in flight: the real CLI (`recognition-core start`) as a child
 * process, its own database and nats-server. The daemon stops pulling, commits and acks what it
 * holds, drains NATS and exits 0; started again, it applies the rest. In the end every envelope is
 * applied exactly once: one `done` per job, one transition and one result object each, nothing
 * quarantined, nothing left pending on `core-inbox`.
 */
import { randomUUID } from 'node:crypto';
import { jetstreamManager } from '@nats-io/jetstream';
import { sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../../src/nats/subjects.js';
import { spawnCli, type CliProcess } from '../helpers/cliProcess.js';
import type { JobRef } from '../helpers/serviceClient.js';
import { waitFor } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true, nats: true, client: true });
const N = 2_000;
const children: CliProcess[] = [];

afterAll(() => {
  for (const c of children) if (c.child.exitCode === null) c.child.kill('SIGKILL');
});

/** `N` published jobs (deadline an hour away), inserted in one transaction. */
async function insertPublishedJobs(n: number): Promise<JobRef[]> {
  const ids = Array.from({ length: n }, () => randomUUID());
  return t.db.transaction().execute(async (tx) => {
    const objects = await tx
      .insertInto('s3_object')
      .values(
        ids.map((id) => ({
          bucket: 'arm-ka',
          key: `uploads/${id}.xlsx`,
          bucket_role: 'uploads',
          created_by: 'test',
        })),
      )
      .returning('id')
      .execute();
    const files = await tx
      .insertInto('stored_file')
      .values(objects.map((o) => ({ s3_object_id: o.id, original_name: 'report.xlsx', status: 'QUEUED' })))
      .returning('id')
      .execute();
    await tx
      .insertInto('recognition_job')
      .values(
        files.map((f, i) => ({
          id: ids[i]!,
          file_id: f.id,
          attempt: 1,
          target_service: 'tabular-parser',
          status: 'published',
          publish_attempts: 1,
          next_publish_at: null,
          published_at: sql<Date>`now()`,
          reply_deadline: sql<Date>`now() + interval '1 hour'`,
        })) as never,
      )
      .execute();
    await sql`UPDATE stored_file f SET current_recognition_job_id = j.id FROM recognition_job j WHERE j.file_id = f.id`.execute(
      tx,
    );
    return files.map((f, i) => ({ jobId: ids[i]!, fileId: f.id }));
  });
}

function startCli(): CliProcess {
  const p = spawnCli(['start'], {
    DATABASE_URL: t.url,
    NATS_URL: t.nats.url,
    HTTP_HOST: '127.0.0.1',
    HTTP_PORT: '0',
    LOG_LEVEL: 'info',
    // Small batches, one lane: the 2 000 envelopes take long enough to be caught in flight.
    INBOX_BATCH_SIZE: '20',
    INBOX_CONCURRENCY: '1',
  });
  children.push(p);
  return p;
}

const doneCount = async () =>
  Number(
    (
      await t.db
        .selectFrom('recognition_job')
        .select((eb) => eb.fn.countAll<string>().as('n'))
        .where('status', '=', 'done')
        .executeTakeFirstOrThrow()
    ).n,
  );

describe('SIGTERM with 2 000 envelopes in flight', () => {
  it('exits 0, and after a restart every envelope is applied exactly once', async () => {
    const jobs = await insertPublishedJobs(N);

    // 1. The daemon runs (it provisions the streams), deciding through the machine's compiled table.
    const first = startCli();
    const started = await first.waitForLog((l) => l.event === 'started');
    expect(started.decision_path).toBe('compiled');

    // 2. A service answers every job; SIGTERM as soon as the first result is applied.
    const publishing = (async () => {
      for (let i = 0; i < N; i += 250) await Promise.all(jobs.slice(i, i + 250).map((j) => t.svc.done(j)));
    })();
    await first.waitForLog((l) => l.decision === 'applied' && l.to === 'done');
    first.child.kill('SIGTERM');
    const exit = await first.exited;
    await publishing;
    expect(exit, first.output().slice(-3000)).toEqual({ code: 0, signal: null });
    expect(first.logs().some((l) => l.event === 'stopped')).toBe(true);
    const appliedBeforeRestart = await doneCount();
    expect(appliedBeforeRestart).toBeGreaterThan(0);
    expect(appliedBeforeRestart).toBeLessThan(N); // it really was stopped mid-flight

    // 3. Started again, it applies the rest.
    const second = startCli();
    // Envelopes of the first one that core-inbox still counts unacked (acks on their way, or
    // deliveries to its last pull) are waited for first: until none is left, at most the ack wait
    // (30 s).
    await second.waitForLog((l) => l.event === 'started', 45_000);
    await waitFor(async () => (await doneCount()) === N, `${N} jobs done`, 90_000);
    const jsm = await jetstreamManager(t.nc);
    await waitFor(async () => {
      const info = await jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER);
      return info.num_pending === 0 && info.num_ack_pending === 0;
    }, 'core-inbox fully acked');
    second.child.kill('SIGTERM');
    expect(await second.exited, second.output().slice(-3000)).toEqual({ code: 0, signal: null });

    // 4. Exactly once, in effect.
    const byStatus = await t.db
      .selectFrom('recognition_job')
      .select(['status', (eb) => eb.fn.countAll<string>().as('n')])
      .groupBy('status')
      .execute();
    expect(byStatus.map((r) => [r.status, Number(r.n)])).toEqual([['done', N]]);
    const transitions = await sql<{ jobs: string; rows: string; max: number }>`
      SELECT count(DISTINCT job_id) AS jobs, count(*) AS rows, max(c) AS max
      FROM (SELECT job_id, count(*) OVER (PARTITION BY job_id) AS c FROM recognition_job_transition) t`.execute(
      t.db,
    );
    expect(transitions.rows[0]).toMatchObject({ jobs: String(N), rows: String(N), max: '1' });
    const results = await sql<{ objects: string; linked: string }>`
      SELECT (SELECT count(*) FROM s3_object WHERE bucket_role = 'results') AS objects,
             (SELECT count(DISTINCT result_s3_object_id) FROM recognition_job) AS linked`.execute(t.db);
    expect(results.rows[0]).toEqual({ objects: String(N), linked: String(N) });
    const quarantined = await t.db
      .selectFrom('inbox_quarantine')
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .executeTakeFirstOrThrow();
    expect(Number(quarantined.n)).toBe(0);
    const info = await jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER);
    expect({ pending: info.num_pending, ackPending: info.num_ack_pending }).toEqual({
      pending: 0,
      ackPending: 0,
    });
    expect([...first.logs(), ...second.logs()].filter((l) => l.event === 'quarantined')).toEqual([]);
  });
});
