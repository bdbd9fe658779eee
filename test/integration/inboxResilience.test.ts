/**
 * The inbox when things break: PostgreSQL unreachable in the middle of a stream, the process
 * killed with SIGKILL while 2 000 envelopes are in flight, and a quarantined message replayed once
 * its job exists.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import type { NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { createDatabaseIfMissing, dropDatabase, openDb, type Db } from '../../src/db/database.js';
import { replayQuarantine } from '../../src/replay/quarantineReplay.js';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../../src/nats/subjects.js';
import { insertJob, loadAll, RESULTS } from '../helpers/fixtures.js';
import { dbUrl } from '../helpers/pgUrls.js';
import { createServiceClient } from '../helpers/serviceClient.js';
import { startTcpProxy } from '../helpers/tcpProxy.js';
import { waitFor } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';
import { inject } from 'vitest';

const t = useHarness({ database: true, nats: true, client: true });

async function ackFloor(
  conn: NatsConnection = t.nc,
): Promise<{ floor: number; last: number; ackPending: number; pending: number }> {
  const jsm = await jetstreamManager(conn);
  const [c, s] = await Promise.all([
    jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER),
    jsm.streams.info(RESULTS_STREAM),
  ]);
  return {
    floor: c.ack_floor.stream_seq,
    last: s.state.last_seq,
    ackPending: c.num_ack_pending,
    pending: c.num_pending,
  };
}

describe('PostgreSQL unreachable in the middle of a stream', () => {
  it('nothing quarantined, nothing lost: every envelope applied after recovery', async () => {
    const pg = new URL(t.url);
    const proxy = await startTcpProxy({ host: pg.hostname, port: Number(pg.port) });
    const viaProxy = new URL(t.url);
    viaProxy.port = String(proxy.port);
    const daemon = await t.startDaemon({
      databaseUrl: viaProxy.toString(),
      env: { INBOX_BATCH_SIZE: '20' },
    });
    try {
      const svc = createServiceClient(t.nc);
      const jobs = await Promise.all(
        Array.from({ length: 300 }, () => insertJob(t.db, { status: 'published' })),
      );
      const quarantineBefore = (await t.db.selectFrom('inbox_quarantine').select('id').execute()).length;
      // The first third goes through; then the database disappears mid-stream.
      for (const j of jobs.slice(0, 100)) await svc.done(j);
      proxy.cut();
      for (const j of jobs.slice(100)) await svc.done(j);
      await waitFor(
        () =>
          daemon.metrics.envelopes
            .get()
            .then((m) => m.values.some((v) => v.labels.outcome === 'retried' && v.value > 0)),
        'a nak while the database is away',
      );
      proxy.restore();
      await waitFor(
        async () => {
          const s = await ackFloor();
          return s.floor >= s.last && s.ackPending === 0;
        },
        'every envelope acked after recovery',
        60_000,
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
      expect(rows.filter((r) => r.status === 'done')).toHaveLength(300);
      expect((await t.db.selectFrom('inbox_quarantine').select('id').execute()).length).toBe(
        quarantineBefore,
      );
      const transitions = await t.db
        .selectFrom('recognition_job_transition')
        .select('job_id')
        .where(
          'job_id',
          'in',
          jobs.map((j) => j.jobId),
        )
        .execute();
      expect(transitions).toHaveLength(300);
    } finally {
      await daemon.stop();
      await proxy.close();
    }
  });
});

describe('quarantine replay', () => {
  it('applies an UNKNOWN_JOB message once the job exists, and records the outcome', async () => {
    const daemon = await t.startDaemon();
    try {
      const svc = createServiceClient(t.nc);
      const jobId = randomUUID();
      const ack = await svc.envelope(
        {
          job_id: jobId,
          status: 'done',
          service: { name: 'tabular-parser', version: '1' },
        },
        `result:${jobId}:1`,
      );
      const row = await waitFor(
        () =>
          t.db
            .selectFrom('inbox_quarantine')
            .selectAll()
            .where('stream_seq', '=', String(ack.seq))
            .executeTakeFirst(),
        'the quarantine row',
      );
      expect(row.reason).toBe('UNKNOWN_JOB');
      // Replay before the job exists: still quarantined, no second row.
      const early = await replayQuarantine(t.db, { id: row.id }, 1 << 20, RESULTS);
      expect(early).toEqual([{ id: row.id, outcome: 'still quarantined: UNKNOWN_JOB', jobId }]);
      // The job is created late; replay applies it.
      await insertJob(t.db, { status: 'published', jobId });
      const results = await replayQuarantine(t.db, { id: row.id }, 1 << 20, RESULTS);
      expect(results).toEqual([{ id: row.id, outcome: 'applied: published -> done', jobId }]);
      const after = await loadAll(t.db, jobId);
      expect(after.job.status).toBe('done');
      expect(after.transitions).toHaveLength(1);
      const stored = await t.db
        .selectFrom('inbox_quarantine')
        .selectAll()
        .where('stream_seq', '=', String(ack.seq))
        .execute();
      expect(stored).toHaveLength(1);
      expect(stored[0]).toMatchObject({ replay_outcome: 'applied: published -> done' });
      expect(stored[0]!.replayed_at).toBeInstanceOf(Date);
      // Replaying again changes nothing: the result is a duplicate now.
      expect(await replayQuarantine(t.db, { id: row.id }, 1 << 20, RESULTS)).toEqual([
        { id: row.id, outcome: 'duplicate', jobId },
      ]);
    } finally {
      await daemon.stop();
    }
  });
});

describe('SIGKILL while 2 000 envelopes are in flight', () => {
  const N = 1000; // 1 000 jobs × (ack + result) = 2 000 envelopes

  /** Deterministic fixtures so two databases hold the same jobs. */
  async function seed(db: Db): Promise<Array<{ jobId: string; fileId: string }>> {
    const jobs: Array<{ jobId: string; fileId: string }> = [];
    for (let i = 0; i < N; i++) {
      const jobId = `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
      jobs.push(await insertJob(db.db, { status: 'published', jobId }));
    }
    return jobs;
  }

  /** Every table, without values that legitimately differ between runs (clock, identity, random file ids). */
  async function normalized(db: Db) {
    const jobs = await db.db
      .selectFrom('recognition_job as j')
      .leftJoin('s3_object as o', 'o.id', 'j.result_s3_object_id')
      .select([
        'j.id',
        'j.status',
        'j.service_name',
        'j.service_version',
        'j.error_code',
        'j.result_msg_id',
        'j.metrics',
        'o.key',
        'o.bucket_role',
        'o.created_by',
      ])
      .select((eb) => [
        eb('j.started_at', 'is not', null).as('started'),
        eb('j.finished_at', 'is not', null).as('finished'),
      ])
      .orderBy('j.id')
      .execute();
    const transitions = await db.db
      .selectFrom('recognition_job_transition')
      .select(['job_id', 'from_status', 'to_status', 'event', 'msg_id'])
      .orderBy('job_id')
      .orderBy('id')
      .execute();
    const files = await db.db
      .selectFrom('stored_file as f')
      .innerJoin('recognition_job as j', 'j.id', 'f.current_recognition_job_id')
      .select(['j.id', 'f.status', 'f.error_code'])
      .orderBy('j.id')
      .execute();
    const results = await db.db
      .selectFrom('s3_object')
      .select(['key', 'bucket_role'])
      .where('bucket_role', '=', 'results')
      .orderBy('key')
      .execute();
    const quarantine = await db.db.selectFrom('inbox_quarantine').select(['reason']).execute();
    const anyFile = (key: string | null) => key?.replace(/^results\/[^/]+\//, 'results/<file>/') ?? null;
    return {
      jobs: jobs.map((j) => ({ ...j, key: anyFile(j.key) })),
      transitions,
      files,
      results: results.map((r) => anyFile(r.key)).sort(),
      quarantine,
    };
  }

  function startCli(databaseUrl: string, natsUrl: string): ChildProcess {
    return spawn(process.execPath, ['bin/recognition-core.js', 'start'], {
      env: {
        ...process.env,
        DATABASE_URL: databaseUrl,
        NATS_URL: natsUrl,
        HTTP_PORT: '0',
        LOG_LEVEL: 'warn',
        LOG_PRETTY: 'false',
        INBOX_ACK_WAIT_MS: '2000', // redeliver the killed process's messages quickly
        INBOX_BATCH_SIZE: '50',
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
  }

  /**
   * Acks then results, job by job, as services do; results also carry metrics. With `pace`, the
   * jobs go in groups of `pace.jobs`, `pace.pauseMs` apart: the stream then lasts long enough for
   * a process to be killed while it is still arriving, however fast the process applies it.
   */
  async function publishAll(
    conn: NatsConnection,
    jobs: Array<{ jobId: string; fileId: string }>,
    pace?: { jobs: number; pauseMs: number },
  ) {
    const svc = createServiceClient(conn);
    const size = pace?.jobs ?? jobs.length;
    for (let i = 0; i < jobs.length; i += size) {
      if (i > 0 && pace) await new Promise((r) => setTimeout(r, pace.pauseMs));
      await Promise.all(
        jobs.slice(i, i + size).map(async (j) => {
          await svc.ack(j);
          await svc.done(j);
        }),
      );
    }
  }

  it('after a restart the final rows equal those of an undisturbed run', async () => {
    // The undisturbed run: in-process, into its own database.
    const cleanUrl = dbUrl(`${t.dbName}_clean`);
    await createDatabaseIfMissing(cleanUrl, { template: inject('templateDb') });
    const clean = openDb(cleanUrl);
    const killedDb = openDb(t.url);
    // Each run has its own nats-server: the same msg ids would be dropped as duplicates otherwise.
    const otherServer = await t.startNats();
    const otherNc = await t.connect({ servers: otherServer.url });
    try {
      const cleanJobs = await seed(clean);
      const undisturbed = await t.startDaemon({
        databaseUrl: cleanUrl,
        env: { LOG_LEVEL: 'warn' },
      });
      await publishAll(t.nc, cleanJobs);
      await waitFor(
        async () => {
          const s = await ackFloor();
          return s.floor >= s.last && s.ackPending === 0 && s.pending === 0;
        },
        'the undisturbed run to finish',
        60_000,
      );
      await undisturbed.stop();
      const expected = await normalized(clean);
      expect(expected.jobs.every((j) => j.status === 'done')).toBe(true);

      // The disturbed run: a real process, killed mid-stream, then restarted.
      await killedDb.db.deleteFrom('recognition_job_transition').execute();
      await killedDb.db.deleteFrom('inbox_quarantine').execute();
      await killedDb.db.updateTable('stored_file').set({ current_recognition_job_id: null }).execute();
      await killedDb.db.deleteFrom('recognition_job').execute();
      await killedDb.db.deleteFrom('stored_file').execute();
      await killedDb.db.deleteFrom('s3_object').execute();
      const jobs = await seed(killedDb);
      const first = startCli(t.url, otherServer.url);
      const otherJsm = await jetstreamManager(otherNc);
      await waitFor(
        () => otherJsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER),
        'the process to provision core-inbox',
      );
      // Publish while the process applies (over half a second at least), and kill it in the middle.
      const publishing = publishAll(otherNc, jobs, { jobs: 50, pauseMs: 30 });
      await waitFor(
        async () => {
          const n = await killedDb.db
            .selectFrom('recognition_job_transition')
            .select((eb) => eb.fn.countAll<string>().as('n'))
            .executeTakeFirstOrThrow();
          return Number(n.n) > 200;
        },
        'the first process to be mid-stream',
        60_000,
      );
      first.kill('SIGKILL');
      await new Promise((r) => first.once('exit', r));
      const atKill = await killedDb.db
        .selectFrom('recognition_job_transition')
        .select((eb) => eb.fn.countAll<string>().as('n'))
        .executeTakeFirstOrThrow();
      expect(Number(atKill.n)).toBeLessThan(2 * N); // it really died mid-stream
      await publishing;
      const second = startCli(t.url, otherServer.url);
      try {
        await waitFor(
          async () => {
            const s = await ackFloor(otherNc);
            return s.floor >= s.last && s.ackPending === 0 && s.pending === 0;
          },
          'the restarted process to apply everything',
          90_000,
        );
      } finally {
        second.kill('SIGTERM');
        await new Promise((r) => second.once('exit', r));
      }
      const actual = await normalized(killedDb);
      expect(actual.quarantine).toEqual([]);
      expect(actual.transitions).toHaveLength(2 * N);
      expect(actual).toEqual(expected);
    } finally {
      await clean.close();
      await killedDb.close();
      await dropDatabase(cleanUrl);
    }
  });
});
