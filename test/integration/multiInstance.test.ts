/**
 * Three daemon processes on one database and one NATS: 5 000 jobs are published, some answered,
 * some left to time out. Every job is published exactly once, each final status is reached once,
 * and there is one transition row per transition.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { AckPolicy, jetstream, jetstreamManager, type ConsumerMessages } from '@nats-io/jetstream';
import { sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import { JOBS_STREAM } from '../../src/nats/subjects.js';
import { waitFor } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true, nats: true, client: true });
const JOBS = 5_000;
const daemons: ChildProcess[] = [];

afterAll(() => {
  for (const d of daemons) d.kill('SIGKILL');
});

function startDaemonProcess(): ChildProcess {
  const child = spawn(process.execPath, ['bin/recognition-core.js', 'start'], {
    env: {
      ...process.env,
      DATABASE_URL: t.url,
      NATS_URL: t.nats.url,
      HTTP_PORT: '0',
      LOG_LEVEL: 'warn',
      LOG_PRETTY: 'false',
      REPLY_TIMEOUT_MS: '15000',
      WATCHDOG_INTERVAL_MS: '300',
      PUBLISHER_POLL_INTERVAL_MS: '500',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  daemons.push(child);
  return child;
}

describe('three daemons, one database, one NATS', () => {
  it('5 000 jobs: published exactly once, each final status reached once, one row per transition', async () => {
    // Files and jobs, created as `jobs create` does (pending, file QUEUED and pointing at its job).
    await sql`
      WITH o AS (
        INSERT INTO s3_object (bucket, key, bucket_role, created_by)
        SELECT 'arm-ka', 'uploads/' || g || '.xlsx', 'uploads', 'test' FROM generate_series(1, ${JOBS}) g
        RETURNING id
      ), f AS (
        INSERT INTO stored_file (s3_object_id, original_name, status) SELECT id, 'f.xlsx', 'QUEUED' FROM o RETURNING id
      )
      INSERT INTO recognition_job (file_id, attempt, target_service) SELECT id, 1, 'tabular-parser' FROM f`.execute(
      t.db,
    );
    // (A separate statement: an UPDATE cannot see rows inserted by a CTE of its own statement.)
    await sql`UPDATE stored_file s SET current_recognition_job_id = j.id FROM recognition_job j WHERE s.id = j.file_id`.execute(
      t.db,
    );

    for (let i = 0; i < 3; i++) startDaemonProcess();
    const jsm = await jetstreamManager(t.nc);
    await waitFor(() => jsm.streams.info(JOBS_STREAM), 'a daemon to provision the streams');

    // A service that answers two jobs in three (ack then done) and leaves the third to time out.
    await jsm.consumers.add(JOBS_STREAM, {
      durable_name: 'svc',
      ack_policy: AckPolicy.Explicit,
      filter_subject: 'recognition.job.tabular-parser',
    });
    const consumer = await jetstream(t.nc).consumers.get(JOBS_STREAM, 'svc');
    const seen = new Map<string, number>();
    const answers: Array<Promise<unknown>> = [];
    const messages: ConsumerMessages = await consumer.consume({ max_messages: 500 });
    const serving = (async () => {
      let n = 0;
      for await (const m of messages) {
        const job = m.json<{ job_id: string; file_id: string; attempt: number }>();
        seen.set(job.job_id, (seen.get(job.job_id) ?? 0) + 1);
        if (n++ % 3 !== 2) {
          // One connection keeps publish order: the ack lands in the stream before the result.
          const ref = { jobId: job.job_id, fileId: job.file_id, attempt: job.attempt };
          answers.push(t.svc.ack(ref), t.svc.done(ref));
        }
        m.ack();
      }
    })();

    await waitFor(
      async () => {
        const r = await sql<{
          n: string;
        }>`SELECT count(*) AS n FROM recognition_job WHERE status IN ('pending','published','processing')`.execute(
          t.db,
        );
        return Number(r.rows[0]!.n) === 0;
      },
      'every job to reach a final status',
      120_000,
    );
    await waitFor(() => seen.size === JOBS, 'the service to have taken every job message', 60_000);
    messages.stop();
    await serving;
    await Promise.all(answers);

    // Published exactly once: one message per job in the stream, each taken once by the service.
    const stream = await jsm.streams.info(JOBS_STREAM);
    expect(stream.state.messages).toBe(JOBS);
    expect(seen.size).toBe(JOBS);
    expect([...seen.values()].every((c) => c === 1)).toBe(true);

    const statuses = await sql<{
      status: string;
      n: string;
    }>`SELECT status, count(*) AS n FROM recognition_job GROUP BY status`.execute(t.db);
    const byStatus = Object.fromEntries(statuses.rows.map((r) => [r.status, Number(r.n)]));
    expect(byStatus.done! + byStatus.timeout!).toBe(JOBS);
    expect(byStatus.timeout).toBeGreaterThan(JOBS / 4);

    // One transition row per transition: each job's log is exactly its path, no edge twice.
    const paths = await sql<{ path: string; n: string }>`
      SELECT path, count(*) AS n FROM (
        SELECT string_agg(from_status || '>' || to_status, ' ' ORDER BY id) AS path FROM recognition_job_transition GROUP BY job_id
      ) p GROUP BY path ORDER BY path`.execute(t.db);
    // With three instances sharing core-inbox, a job's ack and result may be taken by different
    // instances and the result may commit first: the job goes published → done and the ack is
    // ignored. Either way each edge appears once and the job ends done once.
    const byPath = Object.fromEntries(paths.rows.map((r) => [r.path, Number(r.n)]));
    const viaAck = byPath['pending>published published>processing processing>done'] ?? 0;
    const direct = byPath['pending>published published>done'] ?? 0;
    expect(byPath).toEqual({
      ...(viaAck ? { 'pending>published published>processing processing>done': viaAck } : {}),
      ...(direct ? { 'pending>published published>done': direct } : {}),
      'pending>published published>timeout': byStatus.timeout,
    });
    expect(viaAck + direct).toBe(byStatus.done);
    const files = await sql<{ ok: boolean }>`
      SELECT bool_and(CASE j.status WHEN 'done' THEN f.status = 'PROCESSING' ELSE f.status = 'ERROR' AND f.error_code = 'TIMEOUT' END) AS ok
      FROM recognition_job j JOIN stored_file f ON f.current_recognition_job_id = j.id`.execute(t.db);
    expect(files.rows[0]!.ok).toBe(true);
  });
});
