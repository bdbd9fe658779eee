/**
 * The operator console's figures, Overview and Services, exact and at a cost that follows the
 * work in flight and the last day's rollup, never the history: open jobs counted through the
 * partial due indexes, transitions and finished jobs from the per-minute rollup (src/db/rollup.ts),
 * quarantined messages through their index on `received_at`. Each read is one statement in a
 * read-only transaction with a statement timeout, sequential scans and JIT off. The windows are
 * whole minutes by the database clock: the last hour is the current minute and the 59 before it,
 * the last day the current minute and the 1 439 before it.
 */
import { sql, type Kysely } from 'kysely';
import { FINAL_JOB_STATUSES, type FinalJobStatus } from '../../machines/index.js';
import { boundedRead } from './figures.js';
import { bucketQuantile, LATENCY_BUCKET_BOUNDS_MS } from './rollup.js';
import type { Database } from './schema.js';

/** Unreplayed quarantined messages are counted up to this many; `held` says this many when there are more. */
export const QUARANTINE_HELD_LIMIT = 100_000;

/** What the Overview shows. */
export interface OverviewFigures {
  /** The database clock when the statement ran. */
  at: Date;
  /** Jobs in flight now, per target service and open status (exact); only pairs that have any. */
  open: Array<{ service: string; status: 'pending' | 'published' | 'processing'; count: number }>;
  /** Transitions per edge in the last hour and day, from the rollup; only edges that have any. */
  transitions: Array<{ from: string; to: string; event: string; lastHour: number; lastDay: number }>;
  /** Jobs that reached a final status, per target service, from the rollup. */
  finished: Array<{ service: string; status: FinalJobStatus; lastHour: number; lastDay: number }>;
  /**
   * Quarantined messages per hour (UTC) of the last 24, oldest first, the current hour last; and
   * how many no replay has taken yet, whenever received, counted up to {@link QUARANTINE_HELD_LIMIT}.
   */
  quarantine: { perHour: Array<{ hour: Date; count: number }>; held: number };
  /** Age of the oldest transition not yet rolled up, in ms; null when none waits. */
  rollupBehindMs: number | null;
}

/** One service version's figures over one window, from the rollup. */
export interface ServiceFigures {
  /** The jobs' `target_service` ('' for quarantined messages without a known job). */
  service: string;
  /** The jobs' `service_version` as the service reported it ('' when none did). */
  version: string;
  window: 'hour' | 'day';
  /** Jobs that reached a final status in the window. */
  finished: number;
  /** Each final status's share of `finished` (0..1; all 0 when nothing finished). */
  shares: Record<FinalJobStatus, number>;
  /** Publish to ack, in ms, of the finished jobs that were acked: mean, and p95 as an upper bound. */
  ackMs: { mean: number | null; p95: number | null };
  /** Publish to result (or timeout, dead letter), in ms, of the finished jobs that were published. */
  resultMs: { mean: number | null; p95: number | null };
  /** Messages quarantined in the window whose job is of this service and version. */
  quarantined: number;
  /** `quarantined` per finished job; null when nothing finished. */
  quarantineRate: number | null;
}

/** What both reads take. */
export interface FiguresReadOptions {
  statementTimeoutMs?: number;
}

const FINAL = sql.join(FINAL_JOB_STATUSES.map((s) => sql.lit(s)));
/** A rollup row of a job reaching a final status. */
const FINISHES = sql`m.to_status IN (${FINAL}) AND m.from_status NOT IN (${FINAL})`;
/** The starts of the two windows, from the statement's clock. */
const WINDOWS = sql`
  clock AS (SELECT now() AS now, date_trunc('minute', now(), 'UTC') AS minute),
  windows AS (
    SELECT 'hour'::text AS name, minute - interval '59 minutes' AS since FROM clock
    UNION ALL SELECT 'day', minute - interval '1439 minutes' FROM clock
  )`;
/** A quarantined message's job id as a uuid, or null: the column holds what the message said. */
const QUARANTINED_JOB = sql`CASE WHEN q.job_id ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                                 THEN q.job_id::uuid END`;

interface OverviewRow {
  figures: {
    at: string;
    open: Array<{ service: string; status: 'pending' | 'published' | 'processing'; count: string }>;
    transitions: Array<{ from: string; to: string; event: string; last_hour: string; last_day: string }>;
    finished: Array<{ service: string; status: FinalJobStatus; last_hour: string; last_day: string }>;
    per_hour: Array<{ hour: string; count: string }>;
    held: string;
    behind_ms: number | null;
  };
}

/** The Overview's figures in one statement (see the module). */
export async function readOverview(
  db: Kysely<Database>,
  { statementTimeoutMs = 5_000 }: FiguresReadOptions = {},
): Promise<OverviewFigures> {
  const row = await boundedRead(
    db,
    statementTimeoutMs,
    sql<OverviewRow>`
      WITH ${WINDOWS},
      open_jobs AS (
        SELECT target_service AS service, 'pending'::text AS status, count(*) AS n
        FROM recognition_job WHERE status = 'pending' GROUP BY target_service
        UNION ALL
        SELECT target_service, status, count(*) FROM recognition_job
        WHERE status IN ('published', 'processing') GROUP BY target_service, status
      ),
      day AS (
        SELECT m.*, m.minute >= (SELECT since FROM windows WHERE name = 'hour') AS in_hour, ${FINISHES} AS finishes
        FROM recognition_transition_minute m
        WHERE m.minute >= (SELECT since FROM windows WHERE name = 'day')
      ),
      edges AS (
        SELECT from_status, to_status, event, sum(n) FILTER (WHERE in_hour) AS last_hour, sum(n) AS last_day
        FROM day GROUP BY from_status, to_status, event
      ),
      finished AS (
        SELECT service, to_status, sum(n) FILTER (WHERE in_hour) AS last_hour, sum(n) AS last_day
        FROM day WHERE finishes GROUP BY service, to_status
      ),
      hours AS (
        SELECT generate_series(date_trunc('hour', c.now, 'UTC') - interval '23 hours',
                               date_trunc('hour', c.now, 'UTC'), interval '1 hour') AS hour
        FROM clock c
      ),
      quarantined AS (
        SELECT date_trunc('hour', q.received_at, 'UTC') AS hour, count(*) AS n
        FROM inbox_quarantine q WHERE q.received_at >= (SELECT min(hour) FROM hours)
        GROUP BY 1
      )
      SELECT json_build_object(
        'at', (SELECT now FROM clock),
        'open', (SELECT coalesce(json_agg(json_build_object('service', service, 'status', status, 'count', n)
                                          ORDER BY service, status), '[]') FROM open_jobs),
        'transitions', (SELECT coalesce(json_agg(json_build_object(
                                  'from', from_status, 'to', to_status, 'event', event,
                                  'last_hour', coalesce(last_hour, 0), 'last_day', last_day)
                                ORDER BY from_status, to_status, event), '[]') FROM edges),
        'finished', (SELECT coalesce(json_agg(json_build_object(
                               'service', service, 'status', to_status,
                               'last_hour', coalesce(last_hour, 0), 'last_day', last_day)
                             ORDER BY service, to_status), '[]') FROM finished),
        'per_hour', (SELECT json_agg(json_build_object('hour', h.hour, 'count', coalesce(q.n, 0)) ORDER BY h.hour)
                     FROM hours h LEFT JOIN quarantined q ON q.hour = h.hour),
        'held', (SELECT count(*) FROM (SELECT 1 FROM inbox_quarantine WHERE replayed_at IS NULL
                                       LIMIT ${sql.lit(QUARANTINE_HELD_LIMIT)}) AS b),
        'behind_ms', (SELECT round(extract(epoch FROM (SELECT now FROM clock) - min(at)) * 1000)
                      FROM recognition_transition_delta)
      ) AS figures`,
  );
  const f = row.figures;
  return {
    at: new Date(f.at),
    open: f.open.map((o) => ({ service: o.service, status: o.status, count: Number(o.count) })),
    transitions: f.transitions.map((t) => ({
      from: t.from,
      to: t.to,
      event: t.event,
      lastHour: Number(t.last_hour),
      lastDay: Number(t.last_day),
    })),
    finished: f.finished.map((x) => ({
      service: x.service,
      status: x.status,
      lastHour: Number(x.last_hour),
      lastDay: Number(x.last_day),
    })),
    quarantine: {
      perHour: f.per_hour.map((h) => ({ hour: new Date(h.hour), count: Number(h.count) })),
      held: Number(f.held),
    },
    rollupBehindMs: f.behind_ms === null ? null : Math.max(0, Number(f.behind_ms)),
  };
}

/** One (window, service, version, final status) of the rollup, or the quarantine's count. */
interface ServiceCell {
  win: 'hour' | 'day';
  service: string;
  version: string;
  status: FinalJobStatus | null;
  n: number;
  ack_n: number | null;
  ack_sum: number | null;
  ack_max: number | null;
  ack_buckets: number[] | null;
  result_n: number | null;
  result_sum: number | null;
  result_max: number | null;
  result_buckets: number[] | null;
}

/** Times counted over the ladder: their count, sum, max and counts per place. */
interface Latency {
  n: number;
  sum: number;
  max: number | null;
  counts: number[];
}

const noLatency = (): Latency => ({ n: 0, sum: 0, max: null, counts: [] });

/** `into` with a cell's times added. */
function addLatency(
  into: Latency,
  n: number | null,
  sum: number | null,
  max: number | null,
  counts: number[] | null,
) {
  into.n += Number(n ?? 0);
  into.sum += Number(sum ?? 0);
  if (max !== null) into.max = Math.max(into.max ?? 0, Number(max));
  (counts ?? []).forEach((c, i) => (into.counts[i] = (into.counts[i] ?? 0) + Number(c)));
}

const compareText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** Mean and p95 of the times counted. */
function latencyFigures(l: Latency): { mean: number | null; p95: number | null } {
  if (l.n === 0) return { mean: null, p95: null };
  return { mean: l.sum / l.n, p95: bucketQuantile(l.counts, LATENCY_BUCKET_BOUNDS_MS, l.max, 0.95) };
}

/**
 * The Services view's figures in one statement (see the module): one entry per window, target
 * service and service version that finished a job or had a message quarantined in the window,
 * ordered by window (hour first), service and version.
 */
export async function readServices(
  db: Kysely<Database>,
  { statementTimeoutMs = 5_000 }: FiguresReadOptions = {},
): Promise<ServiceFigures[]> {
  const row = await boundedRead(
    db,
    statementTimeoutMs,
    sql<{ cells: ServiceCell[] }>`
      WITH ${WINDOWS},
      finished AS (
        SELECT w.name AS win, m.service, m.service_version AS version, m.to_status AS status,
               sum(m.n) AS n, sum(m.ack_n) AS ack_n, sum(m.ack_ms_sum) AS ack_sum, max(m.ack_ms_max) AS ack_max,
               recognition_sum_counts(m.ack_buckets) AS ack_buckets,
               sum(m.result_n) AS result_n, sum(m.result_ms_sum) AS result_sum,
               max(m.result_ms_max) AS result_max, recognition_sum_counts(m.result_buckets) AS result_buckets
        FROM windows w JOIN recognition_transition_minute m ON m.minute >= w.since
        WHERE ${FINISHES}
        GROUP BY w.name, m.service, m.service_version, m.to_status
      ),
      quarantined AS (
        SELECT w.name AS win, coalesce(j.target_service, '') AS service,
               coalesce(j.service_version, '') AS version, NULL::text AS status, count(*) AS n
        FROM windows w
        JOIN inbox_quarantine q ON q.received_at >= w.since
        LEFT JOIN recognition_job j ON j.id = ${QUARANTINED_JOB}
        GROUP BY w.name, 2, 3
      )
      SELECT coalesce(json_agg(c), '[]') AS cells FROM (
        SELECT * FROM finished
        UNION ALL
        SELECT win, service, version, status, n, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        FROM quarantined
      ) AS c`,
  );
  const byKey = new Map<string, { f: ServiceFigures; ack: Latency; result: Latency }>();
  for (const c of row.cells) {
    const key = JSON.stringify([c.win, c.service, c.version]);
    let entry = byKey.get(key);
    if (!entry) {
      const shares = Object.fromEntries(FINAL_JOB_STATUSES.map((s) => [s, 0])) as Record<
        FinalJobStatus,
        number
      >;
      entry = {
        f: {
          service: c.service,
          version: c.version,
          window: c.win,
          finished: 0,
          shares,
          ackMs: { mean: null, p95: null },
          resultMs: { mean: null, p95: null },
          quarantined: 0,
          quarantineRate: null,
        },
        ack: noLatency(),
        result: noLatency(),
      };
      byKey.set(key, entry);
    }
    if (c.status === null) {
      entry.f.quarantined += Number(c.n);
      continue;
    }
    entry.f.finished += Number(c.n);
    entry.f.shares[c.status] += Number(c.n);
    addLatency(entry.ack, c.ack_n, c.ack_sum, c.ack_max, c.ack_buckets);
    addLatency(entry.result, c.result_n, c.result_sum, c.result_max, c.result_buckets);
  }
  const figures = [...byKey.values()].map(({ f, ack, result }) => {
    for (const s of FINAL_JOB_STATUSES) f.shares[s] = f.finished > 0 ? f.shares[s] / f.finished : 0;
    f.ackMs = latencyFigures(ack);
    f.resultMs = latencyFigures(result);
    f.quarantineRate = f.finished > 0 ? f.quarantined / f.finished : null;
    return f;
  });
  const windowOrder = { hour: 0, day: 1 } as const;
  return figures.sort(
    (a, b) =>
      windowOrder[a.window] - windowOrder[b.window] ||
      compareText(a.service, b.service) ||
      compareText(a.version, b.version),
  );
}
