/**
 * A generated history: many finished jobs with their files, objects and transitions, written by a
 * few set-based statements, so a query plan or a retention pass can be looked at on millions of rows
 * in seconds. The rows are what the daemon would leave: each file's last attempt is current, every
 * `retryEvery`-th file has a retried failure, statuses are mixed deterministically, ids are
 * time-ordered and seeded.
 */
/**
 * What {@link generateJobHistory} needs to run SQL: one connection (a `pg` Client or PoolClient,
 * not a Pool), since it runs a transaction.
 */
export interface SqlRunner {
  query(text: string, values?: unknown[]): Promise<{ rows: Array<Record<string, unknown>> }>;
}

/** How much history to generate. */
export interface JobHistoryOptions {
  /** Files to create; each gets one job, or two when retried. */
  files: number;
  /** Every `retryEvery`-th file has a failed first attempt and a second, current one (0: none). Default 20. */
  retryEvery?: number;
  /** The creation times span this many days back from now. Default 120. */
  days?: number;
  /** Distinguishes the ids of two histories in one database. Default `'h'`. */
  seed?: string;
  /**
   * Files get random ids (an md5 of the seed and the file's name), as an uploader that makes its
   * own version-4 ids gives them, instead of time-ordered ones. Default false.
   */
  randomFileIds?: boolean;
}

/** What {@link generateJobHistory} wrote. */
export interface JobHistoryCounts {
  files: number;
  jobs: number;
  transitions: number;
  s3Objects: number;
}

/**
 * The generated jobs as rows of `gen_job` (a temporary table of the session): file number, attempt,
 * status, times (the newest created an hour ago, so every time is past). Statuses come from a multiplicative hash of the file number, so they are mixed
 * along time and the same for the same arguments.
 */
const jobsSql = (files: number, days: number, retryEvery: number) => `
  CREATE TEMP TABLE gen_job ON COMMIT DROP AS
  WITH base AS (
    SELECT n,
           now() - interval '1 hour'
             - make_interval(secs => ${days}::float8 * 86400 * (${files} - n + 1) / ${files}) AS created,
           (n * 2654435761::bigint) % 100 AS h,
           (${retryEvery} > 0 AND n % ${retryEvery} = 0) AS retried
    FROM generate_series(1, ${files}) AS n
  )
  SELECT n, 1 AS attempt, created,
         CASE WHEN retried THEN CASE WHEN h % 2 = 0 THEN 'error' ELSE 'timeout' END
              WHEN h < 85 THEN 'done' WHEN h < 90 THEN 'needs_check'
              WHEN h < 96 THEN 'error' WHEN h < 99 THEN 'timeout' ELSE 'dlq' END AS status,
         NOT retried AS current
  FROM base
  UNION ALL
  SELECT n, 2, created + interval '15 minutes',
         CASE WHEN h < 90 THEN 'done' WHEN h < 95 THEN 'needs_check' ELSE 'error' END,
         true
  FROM base WHERE retried`;

/**
 * A generated row's id: time-ordered, as the product makes them (migration
 * `0011_time_ordered_ids`): the milliseconds of `time`, then bits of the md5 of the history's seed
 * and the row's name, with the version 7 and variant bits set. Defined in the session's `pg_temp`.
 */
const ID_FUNCTION = `
  CREATE OR REPLACE FUNCTION pg_temp.history_id(name text, at timestamptz) RETURNS uuid LANGUAGE sql IMMUTABLE AS $$
    SELECT encode(set_byte(set_byte(overlay(r.bytes PLACING substring(int8send((extract(epoch FROM at) * 1000)::bigint) FROM 3)
                                            FROM 1 FOR 6),
                                    6, (get_byte(r.bytes, 6) & 15) | 112),
                           8, (get_byte(r.bytes, 8) & 63) | 128), 'hex')::uuid
    FROM (SELECT decode(md5(name), 'hex') AS bytes) AS r
  $$`;

/** The id of the row named `what` (SQL text) of history `seed`, created at `time` (SQL). */
const ID = (seed: string, what: string, time: string) => `pg_temp.history_id('${seed}:${what}', ${time})`;

const fillSql = (files: number, seed: string, base: string, randomFileIds: boolean) => `
  WITH j AS (
    SELECT g.*,
           ${ID(seed, "job:' || g.n || ':' || g.attempt || '", 'g.created')} AS id,
           ${
             randomFileIds
               ? `md5('${seed}:file:' || g.n)::uuid`
               : ID(seed, "file:' || g.n || '", "g.created - (g.attempt - 1) * interval '15 minutes'")
           } AS file_id,
           g.created + interval '1 second' AS published,
           CASE g.status
             WHEN 'timeout' THEN g.created + interval '10 minutes 1 second'
             WHEN 'dlq' THEN g.created + interval '1 minute'
             ELSE g.created + interval '30 seconds' END AS finished
    FROM gen_job g
  ),
  uploads AS (
    INSERT INTO s3_object (id, bucket, key, bucket_role, created_by, created_at)
    OVERRIDING SYSTEM VALUE
    SELECT ${base} + g.n, 'arm-ka', 'uploads/${seed}/' || g.n || '.xlsx', 'uploads', 'history', g.created
    FROM gen_job g WHERE g.attempt = 1
    RETURNING 1
  ),
  results AS (
    INSERT INTO s3_object (id, bucket, key, bucket_role, created_by, created_at)
    OVERRIDING SYSTEM VALUE
    SELECT ${base} + ${files} + j.n * 2 + j.attempt, 'arm-ka',
           'results/' || j.file_id || '/' || j.id || '/result.json', 'results', 'tabular-parser', j.finished
    FROM j WHERE j.status IN ('done', 'needs_check')
    RETURNING 1
  ),
  files AS (
    INSERT INTO stored_file (id, s3_object_id, original_name, status, error_code,
                             current_recognition_job_id, created_at, updated_at)
    SELECT j.file_id, ${base} + j.n, 'report-' || j.n || '.xlsx',
           CASE WHEN j.status IN ('done', 'needs_check') THEN 'DONE' ELSE 'ERROR' END,
           CASE j.status WHEN 'error' THEN 'UNSUPPORTED_FORMAT' WHEN 'timeout' THEN 'TIMEOUT'
                         WHEN 'dlq' THEN 'PUBLISH_FAILED' END,
           j.id, j.created, j.finished
    FROM j WHERE j.current
    RETURNING 1
  ),
  jobs AS (
    INSERT INTO recognition_job (id, file_id, attempt, target_service, status, service_name,
      service_version, publish_attempts, next_publish_at, published_at, reply_deadline, started_at,
      finished_at, metrics, error_code, error_message, result_schema_version, result_s3_object_id,
      result_msg_id, created_at, updated_at)
    SELECT j.id, j.file_id, j.attempt, 'tabular-parser', j.status,
           CASE WHEN j.status <> 'dlq' THEN 'tabular-parser' END,
           CASE WHEN j.status <> 'dlq' THEN '1.4.2' END,
           CASE WHEN j.status = 'dlq' THEN 5 ELSE 1 END,
           NULL,
           CASE WHEN j.status <> 'dlq' THEN j.published END,
           CASE WHEN j.status <> 'dlq' THEN j.published + interval '10 minutes' END,
           CASE WHEN j.status <> 'dlq' THEN j.published + interval '1 second' END,
           j.finished,
           CASE WHEN j.status IN ('done', 'needs_check') THEN '{"pages": 3, "rows": 120}'::jsonb END,
           CASE j.status WHEN 'error' THEN 'UNSUPPORTED_FORMAT' WHEN 'timeout' THEN 'TIMEOUT'
                         WHEN 'dlq' THEN 'PUBLISH_FAILED' END,
           CASE j.status WHEN 'error' THEN 'the file is not a spreadsheet' END,
           CASE WHEN j.status IN ('done', 'needs_check') THEN '1' END,
           CASE WHEN j.status IN ('done', 'needs_check') THEN ${base} + ${files} + j.n * 2 + j.attempt END,
           CASE WHEN j.status IN ('done', 'needs_check', 'error') THEN 'result:' || j.id || ':' || j.attempt END,
           j.created, j.finished
    FROM j
    RETURNING 1
  ),
  steps AS (
    INSERT INTO recognition_job_transition (job_id, from_status, to_status, event, msg_id, at, detail)
    SELECT j.id, s.from_status, s.to_status, s.event, s.msg_id, s.at, s.detail
    FROM j CROSS JOIN LATERAL (VALUES
      (1, 'pending', 'pending', 'CREATED', NULL, j.created,
          jsonb_build_object('retry_of', ${ID(seed, "job:' || j.n || ':1", "j.created - interval '15 minutes'")}::text), j.attempt > 1),
      (2, 'pending', 'published', 'PUBLISHED', NULL, j.published, '{}'::jsonb, j.status <> 'dlq'),
      (3, 'pending', 'dlq', 'PUBLISH_FAILED', NULL, j.finished, '{}'::jsonb, j.status = 'dlq'),
      (4, 'published', 'processing', 'ENVELOPE_PROCESSING', 'ack:' || j.id || ':' || j.attempt,
          j.published + interval '1 second', '{}'::jsonb, j.status <> 'dlq'),
      (5, 'processing', j.status, 'ENVELOPE_RESULT', 'result:' || j.id || ':' || j.attempt, j.finished,
          '{}'::jsonb, j.status IN ('done', 'needs_check', 'error')),
      (6, 'processing', 'timeout', 'DEADLINE_PASSED', NULL, j.finished, '{}'::jsonb, j.status = 'timeout'),
      (7, j.status, j.status, 'RETRY_REQUESTED', NULL, j.finished + interval '15 minutes',
          jsonb_build_object('next', ${ID(seed, "job:' || j.n || ':2", "j.created + interval '15 minutes'")}::text), NOT j.current)
    ) AS s(seq, from_status, to_status, event, msg_id, at, detail, present)
    WHERE s.present
    ORDER BY j.created, j.attempt, s.seq
    RETURNING 1
  )
  SELECT (SELECT count(*) FROM files)::int AS files,
         (SELECT count(*) FROM jobs)::int AS jobs,
         (SELECT count(*) FROM steps)::int AS transitions,
         ((SELECT count(*) FROM uploads) + (SELECT count(*) FROM results))::int AS s3_objects`;

/**
 * Write a history of `files` files and their finished jobs into the migrated database behind
 * `client`, in one transaction (the tables' indexes that back no constraint dropped and built
 * again after the rows; foreign-key triggers skipped, so `client` must be a superuser's), and
 * bring the identity sequences of `s3_object` past the ids it used. Resolves with what it wrote.
 * Runs `ANALYZE` on the tables after, so plans see the new sizes. A failure rolls the whole
 * history back.
 */
export async function generateJobHistory(
  client: SqlRunner,
  options: JobHistoryOptions,
): Promise<JobHistoryCounts> {
  const files = options.files;
  const retryEvery = options.retryEvery ?? 20;
  const days = options.days ?? 120;
  const seed = options.seed ?? 'h';
  if (!Number.isInteger(files) || files < 1)
    throw new Error(`files must be a whole number of at least 1: ${files}`);
  if (!Number.isInteger(retryEvery) || retryEvery < 0)
    throw new Error(`retryEvery must be a whole number: ${retryEvery}`);
  if (!(days > 0)) throw new Error(`days must be positive: ${days}`);
  if (!/^[A-Za-z0-9_-]{1,40}$/.test(seed))
    throw new Error(`seed must be 1-40 letters, digits, '-' or '_': ${seed}`);
  await client.query('BEGIN');
  try {
    // The rows are consistent by construction: the foreign keys' triggers (a lookup and a row lock
    // on the parent for every child row) are skipped, which needs a superuser, as tests and bench
    // connect.
    await client.query(`SET LOCAL session_replication_role = replica`);
    await client.query(`SET LOCAL work_mem = '256MB'`);
    await client.query(`SET LOCAL maintenance_work_mem = '512MB'`);
    // Indexes that back no constraint are built once after the rows rather than row by row.
    const { rows: indexes } = await client.query(`
      SELECT i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS def
      FROM pg_index i
      WHERE i.indrelid IN ('s3_object'::regclass, 'stored_file'::regclass, 'recognition_job'::regclass,
                           'recognition_job_transition'::regclass)
        AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)`);
    for (const i of indexes) await client.query(`DROP INDEX ${String(i['name'])}`);
    const { rows: found } = await client.query(`SELECT COALESCE(max(id), 0)::text AS base FROM s3_object`);
    await client.query(ID_FUNCTION);
    await client.query(jobsSql(files, days, retryEvery));
    const { rows } = await client.query(
      fillSql(files, seed, String(found[0]!.base), options.randomFileIds === true),
    );
    for (const i of indexes) await client.query(String(i['def']));
    await client.query(
      `SELECT setval(pg_get_serial_sequence('s3_object', 'id'), (SELECT max(id) FROM s3_object))`,
    );
    await client.query('COMMIT');
    await client.query('ANALYZE s3_object, stored_file, recognition_job, recognition_job_transition');
    const r = rows[0]!;
    return {
      files: Number(r.files),
      jobs: Number(r.jobs),
      transitions: Number(r.transitions),
      s3Objects: Number(r.s3_objects),
    };
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}

/**
 * Bring a generated and vacuumed history to the state a long-lived table is in. The VACUUM after
 * generation lists in the free space map the crumb left at the end of nearly every page of
 * `recognition_job`, all at once; a crumb can hold a new job's row or the next version of a job in
 * flight (smaller than a finished one), so these would land one per old page. A table that grew
 * over months has no such crumbs left in old pages: each was listed by the vacuum after its page
 * filled up and taken by the next small rows soon after. This fills them the same way, with small
 * finished jobs (`dlq`, never published, with their files, uploads and transition), which stay
 * part of the history, until no crumb of {@link SMALLEST_HOT_ROW_BYTES} is left. Runs on `client`
 * as a superuser (the free space map is read through `pg_freespacemap`; foreign-key triggers are
 * skipped, as the generator skips them). Resolves with the number of jobs added.
 */
export async function fillFreeSpaceCrumbs(client: SqlRunner): Promise<number> {
  await client.query('CREATE EXTENSION IF NOT EXISTS pg_freespacemap');
  let added = 0;
  // A search of the map returns some page with room, not the one with the most, so a page can be
  // passed over in one round; the few left take another.
  for (let round = 0; round < MAX_FILL_ROUNDS; round++) {
    const { rows } = await client.query(
      `SELECT count(*)::int AS crumbs FROM pg_freespace('recognition_job') WHERE avail >= $1::integer`,
      [SMALLEST_HOT_ROW_BYTES],
    );
    const crumbs = Number(rows[0]!['crumbs']);
    if (crumbs === 0) break;
    await addCrumbFillers(client, crumbs);
    added += crumbs;
  }
  return added;
}

/**
 * The free space, in the map's steps of 32 bytes, that can hold a row the hot paths write: a new
 * job, or a job's next version after an event (the smallest, a pending job's, takes about 170 bytes
 * with its header and line pointer). A filler takes less (about 140), so it fits every such crumb.
 */
const SMALLEST_HOT_ROW_BYTES = 160;
const MAX_FILL_ROUNDS = 8;

/** Insert `n` small finished jobs (one per crumb the map lists, wherever it places them). */
async function addCrumbFillers(client: SqlRunner, n: number): Promise<void> {
  await client.query('BEGIN');
  try {
    await client.query('SET LOCAL session_replication_role = replica');
    await client.query(
      `CREATE TEMP TABLE crumb ON COMMIT DROP AS
       SELECT recognition_uuid_v7() AS job_id, recognition_uuid_v7() AS file_id,
              now() - interval '1 hour' AS at
       FROM generate_series(1, $1::integer)`,
      [n],
    );
    await client.query(`
      WITH upload AS (
        INSERT INTO s3_object (bucket, key, bucket_role, created_by, created_at)
        SELECT 'arm-ka', 'uploads/crumb/' || file_id || '.xlsx', 'uploads', 'history', at FROM crumb
        RETURNING id, key
      ),
      file AS (
        INSERT INTO stored_file (id, s3_object_id, original_name, status, error_code, current_recognition_job_id,
                                 created_at, updated_at)
        SELECT c.file_id, u.id, 'crumb.xlsx', 'ERROR', 'PUBLISH_FAILED', c.job_id, c.at, c.at
        FROM crumb c JOIN upload u ON u.key = 'uploads/crumb/' || c.file_id || '.xlsx'
      ),
      job AS (
        INSERT INTO recognition_job (id, file_id, attempt, target_service, status, publish_attempts,
                                     next_publish_at, finished_at, error_code, created_at, updated_at)
        SELECT job_id, file_id, 1, 'tabular-parser', 'dlq', 5, NULL, at, 'PUBLISH_FAILED', at, at FROM crumb
      )
      INSERT INTO recognition_job_transition (job_id, from_status, to_status, event, at)
      SELECT job_id, 'pending', 'dlq', 'PUBLISH_FAILED', at FROM crumb`);
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}
