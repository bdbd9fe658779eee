/**
 * The exchange behind a PgBouncer of the test's own: three in-process daemons reach the database
 * only through it, with every loop on. A results backlog is applied, due jobs are published (and,
 * for one service that never acks its messages, dead-lettered), overdue ones time out, and a
 * retention pass deletes an expired superseded job; the daemons log no error line. Used by the transaction-mode and the session-mode test files.
 */
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { sql } from 'kysely';
import type { PgbouncerPoolMode } from '../../workshop/localServers/pgbouncer.js';
import { JOBS_STREAM } from '../../src/nats/subjects.js';
import { insertJob } from './fixtures.js';
import type { Harness } from './harness.js';
import { waitFor, type TestDaemon } from './testDaemon.js';

/** Insert `n` jobs in `processing` (their file current), as a service had acked each; their refs. */
export async function insertProcessingJobs(
  t: Harness,
  n: number,
): Promise<Array<{ jobId: string; fileId: string }>> {
  const { rows } = await sql<{ jobId: string; fileId: string }>`
    WITH o AS (
      INSERT INTO s3_object (bucket, key, bucket_role, created_by)
      SELECT 'arm-ka', 'uploads/' || gen_random_uuid() || '.xlsx', 'uploads', 'test' FROM generate_series(1, ${n})
      RETURNING id
    ), f AS (
      INSERT INTO stored_file (s3_object_id, original_name, status)
      SELECT id, 'f.xlsx', 'PROCESSING' FROM o RETURNING id
    )
    INSERT INTO recognition_job (file_id, attempt, target_service, status, publish_attempts, published_at,
                                 reply_deadline, started_at, service_name, service_version)
    SELECT id, 1, 'tabular-parser', 'processing', 1, now() - interval '1 minute', now() + interval '1 hour',
           now() - interval '30 seconds', 'tabular-parser', '2.3.1'
    FROM f
    RETURNING id AS "jobId", file_id AS "fileId"`.execute(t.db);
  await sql`UPDATE stored_file s SET current_recognition_job_id = j.id FROM recognition_job j
            WHERE s.id = j.file_id AND s.current_recognition_job_id IS NULL`.execute(t.db);
  return rows;
}

/** The env of a daemon that reaches PostgreSQL through `url` only. */
export function behindPooler(mode: PgbouncerPoolMode): Record<string, string> {
  return {
    DATABASE_POOLER: mode,
    DB_POOL_SIZE: '6',
    LOG_LEVEL: 'info',
    WATCHDOG_INTERVAL_MS: '200',
    PUBLISHER_POLL_INTERVAL_MS: '500',
  };
}

const LOOPS = {
  inbox: true,
  watchdog: true,
  publisher: true,
  deadLetters: true,
  http: true,
  retention: true,
};

/** The lines of `daemons`' logs at error or above. */
export function errorLines(daemons: readonly TestDaemon[]): Array<Record<string, unknown>> {
  return daemons.flatMap((d) => d.logs.lines.filter((l) => Number(l.level) >= 50));
}

/** Count of rows of a query returning `n`. */
async function count(t: Harness, query: ReturnType<typeof sql<{ n: string }>>): Promise<number> {
  return Number((await query.execute(t.db)).rows[0]!.n);
}

/** The whole scenario; see the file's comment. */
/** What a run behind the pooler left: the test compares it with what exactly once means. */
export interface PoolerRun {
  /** Transitions to `done`, and jobs with more than one. */
  doneTransitions: number;
  jobsDoneTwice: number;
  quarantined: number;
  /** Job messages in the jobs stream, and the jobs that were due (one more: the dead-lettered one). */
  jobMessages: number;
  dueJobs: number;
  /** Jobs the three instances' retention passes deleted, and whether the expired one is left. */
  retentionDeleted: number;
  expiredLeft: boolean;
  /** Whether each instance's publisher LISTENs (the first has a direct connection for it). */
  listening: boolean[];
  /** Error lines while the daemons ran, and once they stopped. */
  errorLines: unknown[];
  errorLinesAfterStop: unknown[];
}

export async function runBehindPooler(
  t: Harness,
  mode: PgbouncerPoolMode,
  results: number,
): Promise<PoolerRun> {
  // Session mode gives each client connection a server connection of its own for its lifetime.
  const bouncer = await t.startPgbouncer({ mode, poolSize: mode === 'session' ? 40 : 8 });
  const url = bouncer.url(t.dbName);

  const jobs = await insertProcessingJobs(t, results);
  const due = await Promise.all([1, 2, 3].map(() => insertJob(t.db, { status: 'pending' })));
  const undeliverable = await insertJob(t.db, { status: 'pending', target_service: 'never-acks' });
  const overdue = await Promise.all(
    [1, 2, 3].map(() =>
      insertJob(t.db, {
        status: 'published',
        reply_deadline: sql<Date>`now() - interval '1 second'` as never,
      }),
    ),
  );
  const expired = await insertJob(t.db, {
    status: 'done',
    finished_at: sql<Date>`now() - interval '40 days'` as never,
    fileIsCurrent: false,
  });

  const daemons: TestDaemon[] = [];
  // The first instance LISTENs on a direct connection of its own (DATABASE_LISTEN_URL); the others
  // on the pooler's session (session mode) or not at all (transaction mode: they poll).
  daemons.push(
    await t.startDaemon({
      databaseUrl: url,
      env: { ...behindPooler(mode), DATABASE_LISTEN_URL: t.url },
      loops: LOOPS,
    }),
  );
  // A service that takes its job message and never acks it (max_deliver 2): JetStream's
  // max-deliveries advisory makes the job dlq through the dead-letter loop.
  const jsm = await jetstreamManager(t.nc);
  await jsm.consumers.add(JOBS_STREAM, {
    durable_name: 'never-acks',
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    filter_subject: 'recognition.job.never-acks',
    max_deliver: 2,
    ack_wait: nanos(500),
  });
  const taken = await (await jetstream(t.nc).consumers.get(JOBS_STREAM, 'never-acks')).consume();
  void (async () => {
    for await (const m of taken) void m;
  })();
  for (let i = 1; i < 3; i++)
    daemons.push(await t.startDaemon({ databaseUrl: url, env: behindPooler(mode), loops: LOOPS }));

  // The backlog, published by the service in chunks.
  for (let i = 0; i < jobs.length; i += 1_000)
    await Promise.all(jobs.slice(i, i + 1_000).map((j) => t.svc.done(j)));

  await waitFor(
    async () =>
      (await count(
        t,
        sql<{ n: string }>`SELECT count(*) AS n FROM recognition_job WHERE status = 'done'`,
      )) ===
      results + 1,
    `${results} results to be applied`,
    60_000,
  );
  const allIn = async (jobs: readonly { jobId: string }[], status: string): Promise<boolean> =>
    (
      await t.db
        .selectFrom('recognition_job')
        .select('status')
        .where(
          'id',
          'in',
          jobs.map((j) => j.jobId),
        )
        .execute()
    ).every((r) => r.status === status);
  await waitFor(() => allIn(due, 'published'), 'the due jobs to be published');
  await waitFor(() => allIn(overdue, 'timeout'), 'the overdue jobs to time out');
  await waitFor(
    async () =>
      (
        await t.db
          .selectFrom('recognition_job')
          .select(['status', 'error_code'])
          .where('id', '=', undeliverable.jobId)
          .executeTakeFirstOrThrow()
      ).error_code === 'MAX_DELIVERIES',
    'the undeliverable job to be dead-lettered',
  );
  taken.stop();
  const passes = await Promise.all(daemons.map((d) => d.retention!.pass()));
  await t.drained();

  const run: PoolerRun = {
    doneTransitions: await count(
      t,
      sql<{ n: string }>`SELECT count(*) AS n FROM recognition_job_transition WHERE to_status = 'done'`,
    ),
    jobsDoneTwice: await count(
      t,
      sql<{ n: string }>`SELECT count(*) AS n FROM (SELECT job_id FROM recognition_job_transition
                         WHERE to_status = 'done' GROUP BY job_id HAVING count(*) > 1) d`,
    ),
    quarantined: await count(t, sql<{ n: string }>`SELECT count(*) AS n FROM inbox_quarantine`),
    jobMessages: (await jsm.streams.info(JOBS_STREAM)).state.messages,
    dueJobs: due.length,
    retentionDeleted: passes.reduce((n, p) => n + p.succeeded.jobs, 0),
    expiredLeft:
      (await t.db.selectFrom('recognition_job').select('id').where('id', '=', expired.jobId).execute())
        .length > 0,
    listening: daemons.map((d) => d.publisher!.isListening()),
    errorLines: errorLines(daemons),
    errorLinesAfterStop: [],
  };
  for (const d of daemons) await d.stop();
  run.errorLinesAfterStop = errorLines(daemons);
  return run;
}
