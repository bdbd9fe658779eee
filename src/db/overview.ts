/**
 * The operator console's figures: open jobs, transitions and finished jobs over the last hour and
 * day, the quarantine per hour, and each service's share of outcomes and latencies. Plain reads in
 * a read-only transaction bounded by a statement timeout; run them on a connection of their own.
 */
import { sql, type Kysely } from 'kysely';
import { FINAL_JOB_STATUSES, type FinalJobStatus } from '../../machines/statuses.js';
import type { Database } from './schema.js';

export interface OverviewFigures {
  at: Date;
  open: Array<{ service: string; status: 'pending' | 'published' | 'processing'; count: number }>;
  transitions: Array<{ from: string; to: string; event: string; lastHour: number; lastDay: number }>;
  finished: Array<{ service: string; status: FinalJobStatus; lastHour: number; lastDay: number }>;
  quarantine: { perHour: Array<{ hour: Date; count: number }>; held: number };
  rollupBehindMs: number | null;
}

export interface ServiceFigures {
  service: string;
  version: string;
  window: 'hour' | 'day';
  finished: number;
  shares: Record<FinalJobStatus, number>;
  ackMs: { mean: number | null; p95: number | null };
  resultMs: { mean: number | null; p95: number | null };
  quarantined: number;
  quarantineRate: number | null;
}

type Tx = Kysely<Database>;

/** Run `read` in a read-only transaction whose statements end after `statementTimeoutMs`. */
async function bounded<T>(db: Kysely<Database>, statementTimeoutMs: number, read: (tx: Tx) => Promise<T>) {
  return db
    .transaction()
    .setAccessMode('read only')
    .execute(async (tx) => {
      await sql`SELECT set_config('statement_timeout', ${String(statementTimeoutMs)}, true)`.execute(tx);
      return read(tx);
    });
}

const finalList = sql.join(FINAL_JOB_STATUSES.map((s) => sql.lit(s)));

/** The overview's figures, read at the database clock's now. */
export async function readOverview(
  db: Kysely<Database>,
  opts: { statementTimeoutMs?: number } = {},
): Promise<OverviewFigures> {
  return bounded(db, opts.statementTimeoutMs ?? 5_000, async (tx) => {
    const at = (await sql<{ now: Date }>`SELECT now() AS now`.execute(tx)).rows[0]!.now;
    const open = await sql<{ service: string; status: OverviewFigures['open'][number]['status']; n: number }>`
      SELECT target_service AS service, status, count(*)::int AS n FROM recognition_job
      WHERE status IN ('pending', 'published', 'processing')
      GROUP BY 1, 2 ORDER BY 1, 2`.execute(tx);
    const transitions = await sql<{ from: string; to: string; event: string; h: number; d: number }>`
      SELECT from_status AS "from", to_status AS "to", event,
             count(*) FILTER (WHERE at >= now() - interval '1 hour')::int AS h, count(*)::int AS d
      FROM recognition_job_transition WHERE at >= now() - interval '1 day'
      GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`.execute(tx);
    const finished = await sql<{ service: string; status: FinalJobStatus; h: number; d: number }>`
      SELECT target_service AS service, status,
             count(*) FILTER (WHERE finished_at >= now() - interval '1 hour')::int AS h, count(*)::int AS d
      FROM recognition_job WHERE status IN (${finalList}) AND finished_at >= now() - interval '1 day'
      GROUP BY 1, 2 ORDER BY 1, 2`.execute(tx);
    const perHour = await sql<{ hour: Date; n: number }>`
      SELECT h AS hour, (SELECT count(*)::int FROM inbox_quarantine q
                         WHERE q.received_at >= h AND q.received_at < h + interval '1 hour') AS n
      FROM generate_series(date_trunc('hour', now()) - interval '23 hours', date_trunc('hour', now()),
                           interval '1 hour') AS h ORDER BY h`.execute(tx);
    const held = await sql<{ n: number }>`SELECT count(*)::int AS n FROM inbox_quarantine`.execute(tx);
    return {
      at: new Date(at),
      open: open.rows.map((r) => ({ service: r.service, status: r.status, count: r.n })),
      transitions: transitions.rows.map((r) => ({
        from: r.from,
        to: r.to,
        event: r.event,
        lastHour: r.h,
        lastDay: r.d,
      })),
      finished: finished.rows.map((r) => ({
        service: r.service,
        status: r.status,
        lastHour: r.h,
        lastDay: r.d,
      })),
      quarantine: {
        perHour: perHour.rows.map((r) => ({ hour: new Date(r.hour), count: r.n })),
        held: held.rows[0]!.n,
      },
      rollupBehindMs: null,
    };
  });
}

/** Each service's figures over the last hour and the last day, by the version that answered. */
export async function readServices(
  db: Kysely<Database>,
  opts: { statementTimeoutMs?: number } = {},
): Promise<ServiceFigures[]> {
  return bounded(db, opts.statementTimeoutMs ?? 5_000, async (tx) => {
    const rows = await sql<{
      win: 'hour' | 'day';
      service: string;
      version: string;
      status: FinalJobStatus | null;
      n: number;
      ack_mean: number | null;
      ack_p95: number | null;
      result_mean: number | null;
      result_p95: number | null;
    }>`
      WITH w(win, span) AS (VALUES ('hour', interval '1 hour'), ('day', interval '1 day')),
      f AS (
        SELECT w.win, j.target_service AS service, coalesce(j.service_version, '') AS version, j.status,
               extract(epoch FROM j.started_at - j.published_at) * 1000 AS ack_ms,
               extract(epoch FROM j.finished_at - j.published_at) * 1000 AS result_ms
        FROM w JOIN recognition_job j
          ON j.status IN (${finalList}) AND j.finished_at >= now() - w.span
      )
      SELECT win, service, version, status, count(*)::int AS n,
             avg(ack_ms)::float8 AS ack_mean,
             percentile_cont(0.95) WITHIN GROUP (ORDER BY ack_ms)::float8 AS ack_p95,
             avg(result_ms)::float8 AS result_mean,
             percentile_cont(0.95) WITHIN GROUP (ORDER BY result_ms)::float8 AS result_p95
      FROM f GROUP BY GROUPING SETS ((win, service, version, status), (win, service, version))
      ORDER BY service, version, win`.execute(tx);
    const quarantined = await sql<{ win: 'hour' | 'day'; service: string; n: number }>`
      WITH w(win, span) AS (VALUES ('hour', interval '1 hour'), ('day', interval '1 day'))
      SELECT w.win, coalesce(q.details #>> '{service,name}', j.target_service) AS service, count(*)::int AS n
      FROM w JOIN inbox_quarantine q ON q.received_at >= now() - w.span
      LEFT JOIN recognition_job j ON q.job_id ~* '^[0-9a-f-]{36}$' AND j.id = q.job_id::uuid
      GROUP BY 1, 2`.execute(tx);
    const quarantinedOf = new Map(quarantined.rows.map((r) => [`${r.win}|${r.service}`, r.n]));
    const out = new Map<string, ServiceFigures>();
    // The grouping sets give per-status rows (for the shares) and one total row per group.
    for (const r of rows.rows.filter((x) => x.status === null)) {
      const q = quarantinedOf.get(`${r.win}|${r.service}`) ?? 0;
      out.set(`${r.win}|${r.service}|${r.version}`, {
        service: r.service,
        version: r.version,
        window: r.win,
        finished: r.n,
        shares: Object.fromEntries(FINAL_JOB_STATUSES.map((s) => [s, 0])) as Record<FinalJobStatus, number>,
        ackMs: { mean: r.ack_mean, p95: r.ack_p95 },
        resultMs: { mean: r.result_mean, p95: r.result_p95 },
        quarantined: q,
        quarantineRate: r.n + q > 0 ? q / (r.n + q) : null,
      });
    }
    for (const r of rows.rows.filter((x) => x.status !== null)) {
      const s = out.get(`${r.win}|${r.service}|${r.version}`);
      if (s && r.status !== null) s.shares[r.status] = r.n / s.finished;
    }
    return [...out.values()];
  });
}
