/**
 * The figures the HTTP endpoints show from the database: jobs per status and transitions per edge,
 * in one statement whose cost does not grow with the history. Open statuses are counted exactly
 * through their partial due indexes; a final status, and the transitions, exactly up to
 * {@link EXACT_COUNT_LIMIT} rows and from the planner's statistics beyond, each figure saying
 * whether it is exact (docs/monitoring.md, "Database figures").
 */
import { sql, type Kysely, type RawBuilder } from 'kysely';
import { FINAL_JOB_STATUSES, JOB_STATUSES, type JobStatus } from '../../machines/index.js';
import type { Database } from './schema.js';

/** Up to this many rows, a final status (and the transition table) is counted exactly. */
export const EXACT_COUNT_LIMIT = 10_000;

export interface StatusFigure {
  status: JobStatus;
  count: number;
  /** False when `count` is an estimate from the planner's statistics. */
  exact: boolean;
}

export interface EdgeFigure {
  from: string;
  to: string;
  event: string;
  count: number;
  exact: boolean;
}

export interface DbFigures {
  /** The database clock when the statement ran. */
  at: Date;
  jobs: StatusFigure[];
  transitions: EdgeFigure[];
}

/** Marks the statement, so that `pg_stat_statements` and `pg_stat_activity` tell it apart. */
export const FIGURES_QUERY_TAG = 'recognition-core http figures';

/** The statement's text; the statuses are our own constants, never input. */
function figuresSql(limit: number) {
  // A status the statistics already put well past the limit is not counted at all.
  const final = FINAL_JOB_STATUSES.map(
    (s) =>
      sql`SELECT ${sql.lit(s)}::text AS status,
                 CASE WHEN coalesce((SELECT sh.freq * sz.rows FROM status_share sh, size sz
                                     WHERE sh.status = ${sql.lit(s)} AND sz.oid = 'recognition_job'::regclass),
                                    0) <= ${sql.lit(2 * limit)}
                      THEN (SELECT count(*) FROM (SELECT 1 FROM recognition_job
                              WHERE status = ${sql.lit(s)} LIMIT ${sql.lit(limit + 1)}) AS b) END AS n`,
  );
  return sql<{ figures: { at: string; jobs: StatusFigure[]; transitions: EdgeFigure[] } }>`
    /* ${sql.raw(FIGURES_QUERY_TAG)} */
    WITH open_jobs AS (
      SELECT 'pending'::text AS status, count(*) AS n FROM recognition_job WHERE status = 'pending'
      UNION ALL
      SELECT status, count(*) FROM recognition_job
        WHERE status IN ('published', 'processing') GROUP BY status
    ),
    -- Rows now, as the planner reckons them: the last ANALYZE's density times today's pages.
    size AS (
      SELECT c.oid,
             CASE WHEN c.reltuples < 0 THEN NULL
                  WHEN c.relpages = 0 THEN c.reltuples
                  ELSE c.reltuples / c.relpages
                       * (pg_relation_size(c.oid) / current_setting('block_size')::int) END AS rows
      FROM pg_class c
      WHERE c.oid IN ('recognition_job'::regclass, 'recognition_job_transition'::regclass)
    ),
    status_share AS (
      SELECT v.status, v.freq
      FROM pg_stats s, unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS v(status, freq)
      WHERE s.schemaname = current_schema() AND s.tablename = 'recognition_job' AND s.attname = 'status'
    ),
    final_bounded AS (${sql.join(final, sql` UNION ALL `)}),
    final_jobs AS (
      SELECT b.status,
             CASE WHEN b.n <= ${sql.lit(limit)} THEN b.n
                  ELSE greatest(coalesce(b.n, 0), round(coalesce(sh.freq * sz.rows, 0)))::bigint END AS n,
             coalesce(b.n <= ${sql.lit(limit)}, false) AS exact
      FROM final_bounded b
      LEFT JOIN status_share sh ON sh.status = b.status
      LEFT JOIN size sz ON sz.oid = 'recognition_job'::regclass
    ),
    transitions_bounded AS (
      SELECT count(*) AS n FROM (SELECT 1 FROM recognition_job_transition LIMIT ${sql.lit(limit + 1)}) AS b
    ),
    -- Scanned only when the bounded count says the table is small (a one-time filter).
    transitions_exact AS (
      SELECT from_status, to_status, event, count(*) AS n
      FROM recognition_job_transition
      WHERE (SELECT n FROM transitions_bounded) <= ${sql.lit(limit)}
      GROUP BY from_status, to_status, event
    ),
    edge_share AS (
      SELECT s.most_common_vals[i][array_position(s.attnames, 'from_status')] AS from_status,
             s.most_common_vals[i][array_position(s.attnames, 'to_status')] AS to_status,
             s.most_common_vals[i][array_position(s.attnames, 'event')] AS event,
             s.most_common_freqs[i] AS freq
      FROM pg_stats_ext s, generate_subscripts(s.most_common_freqs, 1) AS i
      WHERE s.schemaname = current_schema() AND s.statistics_name = 'recognition_job_transition_edge_stats'
        AND (SELECT n FROM transitions_bounded) > ${sql.lit(limit)}
    ),
    transitions AS (
      SELECT from_status, to_status, event, n, true AS exact FROM transitions_exact
      UNION ALL
      SELECT e.from_status, e.to_status, e.event, round(e.freq * sz.rows)::bigint, false
      FROM edge_share e JOIN size sz ON sz.oid = 'recognition_job_transition'::regclass
      WHERE sz.rows IS NOT NULL
    )
    SELECT json_build_object(
      'at', now(),
      'jobs', (SELECT json_agg(json_build_object('status', status, 'count', n, 'exact', exact))
               FROM (SELECT status, n, true AS exact FROM open_jobs
                     UNION ALL SELECT status, n, exact FROM final_jobs) AS j),
      'transitions', (SELECT coalesce(json_agg(json_build_object(
                                'from', from_status, 'to', to_status, 'event', event,
                                'count', n, 'exact', exact)
                              ORDER BY from_status, to_status, event), '[]')
                      FROM transitions)
    ) AS figures`;
}

/**
 * The one row of `statement`, run in a read-only transaction bounded by the statement timeout,
 * with sequential scans and JIT off (transaction-local settings, which hold behind a pooler in
 * transaction mode too): the figures' reads never scan a whole table, nor compile.
 */
export async function boundedRead<R>(
  db: Kysely<Database>,
  statementTimeoutMs: number,
  statement: RawBuilder<R>,
): Promise<R> {
  const { rows } = await db
    .transaction()
    .setAccessMode('read only')
    .execute(async (tx) => {
      await sql`SELECT set_config('statement_timeout', ${String(statementTimeoutMs)}, true),
                       set_config('enable_seqscan', 'off', true),
                       set_config('jit', 'off', true)`.execute(tx);
      return statement.execute(tx);
    });
  return rows[0]!;
}

/**
 * Read the figures in one statement, in a read-only transaction whose settings bound it: the
 * statement timeout, no sequential scan (counting goes through the partial indexes, never
 * through the whole table) and no JIT compilation (which would cost more than the counts).
 * Transaction-local settings hold behind a pooler in transaction mode too. Every status of the
 * machine is in `jobs` (0 when none); `transitions` holds the edges that have any. Run it on a
 * connection of its own, never on the inbox's pool (src/http/figures.ts).
 */
export async function readFigures(
  db: Kysely<Database>,
  {
    exactLimit = EXACT_COUNT_LIMIT,
    statementTimeoutMs = 5_000,
  }: { exactLimit?: number; statementTimeoutMs?: number | undefined } = {},
): Promise<DbFigures> {
  const f = (await boundedRead(db, statementTimeoutMs, figuresSql(exactLimit))).figures;
  const byStatus = new Map(f.jobs.map((j) => [j.status, j]));
  const jobs = JOB_STATUSES.map(
    (status) => byStatus.get(status as JobStatus) ?? { status: status as JobStatus, count: 0, exact: true },
  );
  return {
    at: new Date(f.at),
    jobs: jobs.map((j) => ({ status: j.status, count: Number(j.count), exact: j.exact })),
    transitions: f.transitions.map((t) => ({ ...t, count: Number(t.count) })),
  };
}
