/**
 * The console's figures at any history size (docs/performance.md, "Counting for the console"):
 * `recognition_transition_delta`, a narrow heap without indexes that a statement-level trigger on
 * `recognition_job_transition` appends each statement's new transitions to (one insert per
 * statement, no update of a shared row, so writers never wait on each other), and
 * `recognition_transition_minute`, the rollup per minute, service, version and edge that
 * `recognition_roll_up_transitions` adds the deltas to. The rollup and its expiry run as the
 * migrating role (`SECURITY DEFINER`, as 0017's), so the runtime role deletes no row itself. Also
 * `inbox_quarantine_held_idx`: the messages no replay has taken yet.
 */
import { sql, type Kysely } from 'kysely';

/** The final statuses when this migration was written. Never edit: add a migration. */
const FINAL_0021 = ['done', 'needs_check', 'error', 'timeout', 'dlq'] as const;

const ROLL_UP = sql`recognition_roll_up_transitions(bigint[], integer)`;
const EXPIRE = sql`recognition_expire_transition_minutes(timestamptz, integer)`;

/** The rollup's key columns, in the order of its primary key. */
const KEY_COLUMNS = ['minute', 'service', 'service_version', 'from_status', 'to_status', 'event'];
const KEY = sql.raw(KEY_COLUMNS.join(', '));
/** The key as a row of `alias`'s columns. */
const keyOf = (alias: string) => sql.raw(`(${KEY_COLUMNS.map((c) => `${alias}.${c}`).join(', ')})`);

export async function up(db: Kysely<unknown>): Promise<void> {
  const final = sql.join(FINAL_0021.map((s) => sql.lit(s)));
  await sql`
    CREATE TABLE recognition_transition_delta (
      job_id      uuid NOT NULL,
      from_status text NOT NULL,
      to_status   text NOT NULL,
      event       text NOT NULL,
      at          timestamptz NOT NULL
    )`.execute(db);
  await sql`
    CREATE FUNCTION recognition_transition_append_delta() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO recognition_transition_delta (job_id, from_status, to_status, event, at)
      SELECT job_id, from_status, to_status, event, at FROM new_transitions;
      RETURN NULL;
    END $$`.execute(db);
  await sql`
    CREATE TRIGGER recognition_transition_append_delta
      AFTER INSERT ON recognition_job_transition
      REFERENCING NEW TABLE AS new_transitions
      FOR EACH STATEMENT EXECUTE FUNCTION recognition_transition_append_delta()`.execute(db);

  await sql`
    CREATE TABLE recognition_transition_minute (
      minute          timestamptz NOT NULL,
      service         text NOT NULL,
      service_version text NOT NULL,
      from_status     text NOT NULL,
      to_status       text NOT NULL,
      event           text NOT NULL,
      n               bigint NOT NULL,
      ack_n           bigint NOT NULL DEFAULT 0,
      ack_ms_sum      bigint NOT NULL DEFAULT 0,
      ack_ms_max      bigint,
      ack_buckets     bigint[],
      result_n        bigint NOT NULL DEFAULT 0,
      result_ms_sum   bigint NOT NULL DEFAULT 0,
      result_ms_max   bigint,
      result_buckets  bigint[],
      CONSTRAINT recognition_transition_minute_pkey PRIMARY KEY (${KEY})
    )`.execute(db);

  // Counts added place by place; a missing side counts nothing. An aggregate of the same sum, for
  // the reads over many minutes.
  await sql`
    CREATE FUNCTION recognition_add_counts(a bigint[], b bigint[]) RETURNS bigint[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
      SELECT CASE WHEN a IS NULL THEN b WHEN b IS NULL THEN a
                  ELSE ARRAY(SELECT x + y FROM unnest(a, b) WITH ORDINALITY AS u(x, y, i) ORDER BY i) END
    $$`.execute(db);
  await sql`
    CREATE AGGREGATE recognition_sum_counts(bigint[]) (
      SFUNC = recognition_add_counts, STYPE = bigint[], PARALLEL = SAFE
    )`.execute(db);

  // One batch of deltas, taken (deleted) and added to the rollup in one statement. A delta whose
  // transaction has not committed is invisible, and is taken by a later call. The job row gives
  // the service, its version and, for a transition into a final status from an open one, the
  // times: to ack (started_at - published_at) and to result (finished_at - published_at), in ms,
  // counted over the ladder `bucket_bounds` (place 1: below its first bound).
  await sql`
    CREATE FUNCTION recognition_roll_up_transitions(bucket_bounds bigint[], batch_size integer)
    RETURNS integer
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
      WITH taken AS (
        DELETE FROM recognition_transition_delta d
        WHERE d.ctid = ANY (ARRAY(SELECT ctid FROM recognition_transition_delta LIMIT batch_size))
        RETURNING d.job_id, d.from_status, d.to_status, d.event, d.at
      ),
      timed AS (
        SELECT date_trunc('minute', t.at, 'UTC') AS minute,
               coalesce(j.target_service, '') AS service,
               coalesce(j.service_version, '') AS service_version,
               t.from_status, t.to_status, t.event,
               CASE WHEN f.ack_ms < 0 THEN 0 ELSE f.ack_ms END AS ack_ms,
               CASE WHEN f.result_ms < 0 THEN 0 ELSE f.result_ms END AS result_ms
        FROM taken t
        LEFT JOIN recognition_job j ON j.id = t.job_id
        CROSS JOIN LATERAL (
          SELECT CASE WHEN finishes THEN round(extract(epoch FROM j.started_at - j.published_at) * 1000)::bigint END AS ack_ms,
                 CASE WHEN finishes THEN round(extract(epoch FROM j.finished_at - j.published_at) * 1000)::bigint END AS result_ms
          FROM (SELECT t.to_status IN (${final}) AND t.from_status NOT IN (${final}) AS finishes) AS s
        ) AS f
      ),
      cells AS (
        SELECT ${KEY}, 'ack' AS kind, width_bucket(ack_ms, bucket_bounds) AS place, count(*) AS c
        FROM timed WHERE ack_ms IS NOT NULL GROUP BY ${KEY}, place
        UNION ALL
        SELECT ${KEY}, 'result', width_bucket(result_ms, bucket_bounds) AS place, count(*)
        FROM timed WHERE result_ms IS NOT NULL GROUP BY ${KEY}, place
      ),
      histograms AS (
        SELECT ${KEY}, kind,
               recognition_sum_counts(array_fill(0::bigint, ARRAY[place]) || c
                                      || array_fill(0::bigint, ARRAY[cardinality(bucket_bounds) - place])) AS counts
        FROM cells GROUP BY ${KEY}, kind
      ),
      sums AS (
        SELECT ${KEY}, count(*) AS n,
               count(ack_ms) AS ack_n, coalesce(sum(ack_ms), 0) AS ack_ms_sum, max(ack_ms) AS ack_ms_max,
               count(result_ms) AS result_n, coalesce(sum(result_ms), 0) AS result_ms_sum,
               max(result_ms) AS result_ms_max
        FROM timed GROUP BY ${KEY}
      ),
      added AS (
        INSERT INTO recognition_transition_minute AS m
          (${KEY}, n, ack_n, ack_ms_sum, ack_ms_max, ack_buckets,
           result_n, result_ms_sum, result_ms_max, result_buckets)
        SELECT s.minute, s.service, s.service_version, s.from_status, s.to_status, s.event, s.n,
               s.ack_n, s.ack_ms_sum, s.ack_ms_max, a.counts,
               s.result_n, s.result_ms_sum, s.result_ms_max, r.counts
        FROM sums s
        LEFT JOIN histograms a ON ${keyOf('a')} = ${keyOf('s')} AND a.kind = 'ack'
        LEFT JOIN histograms r ON ${keyOf('r')} = ${keyOf('s')} AND r.kind = 'result'
        ON CONFLICT (${KEY}) DO UPDATE SET
          n = m.n + EXCLUDED.n,
          ack_n = m.ack_n + EXCLUDED.ack_n,
          ack_ms_sum = m.ack_ms_sum + EXCLUDED.ack_ms_sum,
          ack_ms_max = greatest(m.ack_ms_max, EXCLUDED.ack_ms_max),
          ack_buckets = recognition_add_counts(m.ack_buckets, EXCLUDED.ack_buckets),
          result_n = m.result_n + EXCLUDED.result_n,
          result_ms_sum = m.result_ms_sum + EXCLUDED.result_ms_sum,
          result_ms_max = greatest(m.result_ms_max, EXCLUDED.result_ms_max),
          result_buckets = recognition_add_counts(m.result_buckets, EXCLUDED.result_buckets)
      )
      -- A data-modifying CTE runs to its end whether or not it is read.
      SELECT count(*)::int FROM taken
    $$`.execute(db);

  // One batch of the rollup's minutes before `before`, oldest first.
  await sql`
    CREATE FUNCTION recognition_expire_transition_minutes(before timestamptz, batch_size integer)
    RETURNS integer
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
      WITH gone AS (
        DELETE FROM recognition_transition_minute m
        WHERE m.ctid = ANY (ARRAY(
          SELECT ctid FROM recognition_transition_minute WHERE minute < before ORDER BY minute LIMIT batch_size))
        RETURNING 1
      )
      SELECT count(*)::int FROM gone
    $$`.execute(db);
  await sql`REVOKE ALL ON FUNCTION ${ROLL_UP}, ${EXPIRE} FROM PUBLIC`.execute(db);

  await sql`
    CREATE INDEX IF NOT EXISTS inbox_quarantine_held_idx
      ON inbox_quarantine (received_at) WHERE replayed_at IS NULL`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX inbox_quarantine_held_idx`.execute(db);
  await sql`DROP FUNCTION ${EXPIRE}`.execute(db);
  await sql`DROP FUNCTION ${ROLL_UP}`.execute(db);
  await sql`DROP AGGREGATE recognition_sum_counts(bigint[])`.execute(db);
  await sql`DROP FUNCTION recognition_add_counts(bigint[], bigint[])`.execute(db);
  await sql`DROP TABLE recognition_transition_minute`.execute(db);
  await sql`DROP TRIGGER recognition_transition_append_delta ON recognition_job_transition`.execute(db);
  await sql`DROP FUNCTION recognition_transition_append_delta()`.execute(db);
  await sql`DROP TABLE recognition_transition_delta`.execute(db);
}
