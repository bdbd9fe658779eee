/**
 * The bench's fixtures, shared by its measurements: N files with one `published` job each, their
 * result envelopes as a service sends them, published into `RECOGNITION_RESULTS`, and the check
 * that a run left every row it should. Inserted with set-based SQL, not through the step: the
 * bench measures the daemon, not the seeding. Seeding runs with `session_replication_role =
 * replica` so that a file can name its job before the job row exists (foreign keys are triggers,
 * which that role skips).
 */
import type { JetStreamClient } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/nats-core';
import type pg from 'pg';
import { newId } from '../src/db/ids.js';
import { inPgTransaction } from '../src/db/pgTransaction.js';
import { RESULT_SUBJECT } from '../src/nats/subjects.js';

/** A job of the fixtures. */
export interface BenchJob {
  jobId: string;
  fileId: string;
}

/** Empty every table the project writes (identities restart): each measurement starts alike. */
export async function truncateAll(pool: pg.Pool): Promise<void> {
  await pool.query(
    `TRUNCATE recognition_job_transition, inbox_quarantine, recognition_job, stored_file, s3_object RESTART IDENTITY CASCADE`,
  );
}

/**
 * Empty the tables and insert `count` files with their uploads and one job each, every job in
 * `published` with a deadline 10 minutes away and its file `QUEUED` (current job = that job): the
 * state in which a result envelope is applied with every statement (lock, job, file, s3_object,
 * transition).
 */
export async function seedPublishedJobs(pool: pg.Pool, count: number, keep = false): Promise<BenchJob[]> {
  // `keep`: delete the fixtures (files named report.xlsx, their jobs, transitions and objects) only.
  await (keep
    ? inPgTransaction(pool, async (client: pg.PoolClient) => {
        await client.query(`SET LOCAL session_replication_role = replica`);
        await client.query(`WITH f AS (DELETE FROM stored_file WHERE original_name = 'report.xlsx' RETURNING id, s3_object_id),
      j AS (DELETE FROM recognition_job WHERE file_id IN (SELECT id FROM f) RETURNING id, result_s3_object_id),
      t AS (DELETE FROM recognition_job_transition WHERE job_id IN (SELECT id FROM j)),
      o AS (DELETE FROM s3_object WHERE id IN (SELECT s3_object_id FROM f UNION ALL SELECT result_s3_object_id FROM j))
      DELETE FROM inbox_quarantine`);
      })
    : truncateAll(pool));
  const jobs = newJobs(count);
  await inPgTransaction(pool, (client: pg.PoolClient) => insertOpenJobs(client, jobs, 'published'));
  await pool.query('VACUUM ANALYZE s3_object, stored_file, recognition_job');
  return jobs;
}

/** `count` new jobs with their files, ids as the product makes them. */
export const newJobs = (count: number): BenchJob[] =>
  Array.from({ length: count }, () => ({ jobId: newId(), fileId: newId() }));

/** How {@link insertOpenJobs} leaves a job and its file. */
const OPEN = {
  /** Published a minute ago, its deadline 10 minutes away, the file `QUEUED`. */
  published: {
    file: 'QUEUED',
    job: `'published', NULL, NULL, now() - interval '1 minute', now() + interval '10 minutes', NULL`,
  },
  /** Acked 19 minutes ago, its deadline a minute past, the file `PROCESSING`: a silent service. */
  overdue: {
    file: 'PROCESSING',
    job: `'processing', 'tabular-parser', '2.3.1', now() - interval '20 minutes', now() - interval '1 minute',
          now() - interval '19 minutes'`,
  },
} as const;

/**
 * Insert `jobs` with their files and uploads, each job its file's current one, in `state`, on
 * `client` inside its transaction (with `session_replication_role = replica`: a file names its job
 * before the job row exists). Set-based, 50 000 at a time.
 */
export async function insertOpenJobs(
  client: pg.PoolClient,
  jobs: readonly BenchJob[],
  state: keyof typeof OPEN,
): Promise<void> {
  await client.query(`SET LOCAL session_replication_role = replica`);
  for (let i = 0; i < jobs.length; i += 50_000) {
    const chunk = jobs.slice(i, i + 50_000);
    await client.query(
      `WITH input AS (
         SELECT t.jid AS job_id, t.fid AS file_id FROM unnest($1::uuid[], $2::uuid[]) AS t(jid, fid)
       ),
       upload AS (
         INSERT INTO s3_object (bucket, key, bucket_role, created_by)
         SELECT 'arm-ka', 'uploads/' || file_id || '.xlsx', 'uploads', 'bench' FROM input
         RETURNING id, key
       ),
       file AS (
         INSERT INTO stored_file (id, s3_object_id, original_name, status, current_recognition_job_id)
         SELECT i.file_id, u.id, 'report.xlsx', '${OPEN[state].file}', i.job_id
         FROM input i JOIN upload u ON u.key = 'uploads/' || i.file_id || '.xlsx'
       )
       INSERT INTO recognition_job (id, file_id, attempt, target_service, publish_attempts, next_publish_at,
                                    status, service_name, service_version, published_at, reply_deadline, started_at)
       SELECT job_id, file_id, 1, 'tabular-parser', 1, NULL, ${OPEN[state].job}
       FROM input`,
      [chunk.map((j) => j.jobId), chunk.map((j) => j.fileId)],
    );
  }
}

/** The result envelope of a job, as a service sends it (the same shape as the tests' service client). */
export function doneEnvelope(job: BenchJob): Uint8Array {
  return new TextEncoder().encode(
    JSON.stringify({
      job_id: job.jobId,
      status: 'done',
      service: { name: 'tabular-parser', version: '2.3.1' },
      result_s3: { bucket: 'arm-ka', key: `results/${job.fileId}/${job.jobId}/result.json` },
      result_schema_version: '1.0',
      metrics: { pages: 2, duration_ms: 420 },
      sent_at: new Date().toISOString(),
    }),
  );
}

/** The headers of a job's result: its `Nats-Msg-Id`. */
export function resultHeaders(job: BenchJob) {
  const h = natsHeaders();
  h.set('Nats-Msg-Id', `result:${job.jobId}:1`);
  return h;
}

/** Publish one result per job, 2 000 in flight at a time. Resolves with the last stream sequence. */
export async function prePublish(js: JetStreamClient, jobs: readonly BenchJob[]): Promise<number> {
  let last = 0;
  for (let i = 0; i < jobs.length; i += 2_000) {
    const acks = await Promise.all(
      jobs
        .slice(i, i + 2_000)
        .map((j) => js.publish(RESULT_SUBJECT, doneEnvelope(j), { headers: resultHeaders(j) })),
    );
    for (const a of acks) last = Math.max(last, a.seq);
  }
  return last;
}

/**
 * Sanity check after a run: every job done with its object and transition, every file PROCESSING;
 * with `fixturesOnly`, of the fixtures' rows (files named report.xlsx) among a history.
 */
export async function checkAllDone(pool: pg.Pool, expected: number, fixturesOnly = false): Promise<void> {
  const [file, job] = fixturesOnly ? [`original_name = 'report.xlsx'`, 'j.id IS NOT NULL'] : ['true', 'true'];
  const jobs = `(SELECT j.* FROM recognition_job j JOIN stored_file f ON f.id = j.file_id WHERE ${file})`;
  const { rows } = await pool.query<Record<string, string>>(`
    SELECT (SELECT count(*) FROM ${jobs} j WHERE status = 'done' AND result_s3_object_id IS NOT NULL) AS done,
           (SELECT count(*) FROM s3_object o LEFT JOIN ${jobs} j ON j.result_s3_object_id = o.id
            WHERE bucket_role = 'results' AND ${job}) AS objects,
           (SELECT count(*) FROM recognition_job_transition t LEFT JOIN ${jobs} j ON j.id = t.job_id WHERE ${job}) AS transitions,
           (SELECT count(*) FROM stored_file WHERE status = 'PROCESSING' AND ${file}) AS files,
           (SELECT count(*) FROM inbox_quarantine) AS quarantined`);
  const got = JSON.stringify(Object.values(rows[0]!).map(Number));
  const want = JSON.stringify([expected, expected, expected, expected, 0]);
  if (got !== want) {
    throw new Error(
      `the run left unexpected rows: got ${got}, want ${want} (done, objects, transitions, files, quarantined)`,
    );
  }
}
