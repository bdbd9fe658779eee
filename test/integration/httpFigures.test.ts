/**
 * The HTTP endpoints cost the database bounded work: a burst of concurrent requests to /metrics,
 * /statechart, /statechart.json and /readyz runs the figures statement at most once per
 * `HTTP_FIGURES_INTERVAL_MS`, on the figures' one connection, never on the daemon's pool; a
 * scrape answers from memory while the database cannot answer it.
 *
 * The statements are counted by PostgreSQL itself (`pg_stat_statements`, on a private cluster
 * that preloads it), the connections by `pg_stat_activity`, and the daemon's pool by its own
 * `acquire` events: none of them can be told by the daemon what to say.
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { FIGURES_QUERY_TAG } from '../../src/db/figures.js';
import { insertJob } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';
import { waitFor } from '../helpers/testDaemon.js';

const INTERVAL_MS = 1_500;
const CONCURRENT = 200;

const t = useHarness({
  pgCluster: {
    settings: { shared_preload_libraries: 'pg_stat_statements', 'pg_stat_statements.track': 'all' },
  },
  database: { max: 2 },
  nats: true,
  daemon: {
    env: {
      HTTP_FIGURES_INTERVAL_MS: String(INTERVAL_MS),
      HTTP_FIGURES_TIMEOUT_MS: '1000',
      // The commit probe is the only other user of the daemon's pool here: once, at start.
      READINESS_COMMIT_INTERVAL_MS: '600000',
    },
    loops: { inbox: true, watchdog: false, publisher: false, deadLetters: false, http: true, rollup: false },
  },
});

/** A connection of the test's own to the database, as the superuser. */
async function admin(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: t.url, application_name: 'test-admin' });
  await c.connect();
  return c;
}

/** How many times PostgreSQL ran the figures statement in this database so far. */
async function figuresCalls(c: pg.Client): Promise<number> {
  const { rows } = await c.query<{ calls: string | null }>(
    `SELECT sum(calls) AS calls FROM pg_stat_statements
     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND query LIKE '%' || $1 || '%'`,
    [FIGURES_QUERY_TAG],
  );
  return Number(rows[0]!.calls ?? 0);
}

/** One sample `name{labels} value` of /metrics (undefined when absent). */
function sample(text: string, name: string, labels = ''): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels ? `{${labels}}` : ''} `));
  return line === undefined ? undefined : Number(line.split(' ').pop());
}

const get = async (path: string) => {
  const res = await fetch(`${t.baseUrl}${path}`);
  return { status: res.status, body: await res.text() };
};

describe('the HTTP figures', () => {
  it('answer a burst of 200 concurrent requests with at most one statement per interval, never on the daemon’s pool', async () => {
    const c = await admin();
    try {
      await c.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
      for (const status of ['published', 'processing', 'done', 'done', 'error'] as const)
        await insertJob(t.db, { status });
      // The figures catch up within an interval of their own.
      await waitFor(async () => {
        const m = (await get('/metrics')).body;
        return sample(m, 'recognition_jobs', 'status="done"') === 2 ? m : undefined;
      }, 'recognition_jobs{status="done"} = 2');

      // Nothing holds a connection of the daemon's pool now (the commit probe's start is over).
      const pool = t.daemon.db.pool;
      await waitFor(() => pool.idleCount === pool.totalCount, 'the daemon’s pool idle');
      let acquired = 0;
      const onAcquire = () => acquired++;
      pool.on('acquire', onAcquire);

      const before = await figuresCalls(c);
      const started = Date.now();
      const figuresBackends = new Set<number>();
      let sampling = true;
      const sampler = (async () => {
        const s = await admin();
        try {
          while (sampling) {
            const { rows } = await s.query<{ pid: number }>(
              `SELECT pid FROM pg_stat_activity
               WHERE datname = current_database() AND application_name = 'recognition-core-http'`,
            );
            for (const r of rows) figuresBackends.add(r.pid);
            await new Promise((r) => setTimeout(r, 20));
          }
        } finally {
          await s.end();
        }
      })();
      // Waves of 200 concurrent requests over more than three intervals.
      const paths = ['/metrics', '/statechart', '/statechart.json', '/readyz'];
      const statuses: number[] = [];
      while (Date.now() - started < 3.5 * INTERVAL_MS) {
        const answers = await Promise.all(
          Array.from({ length: CONCURRENT }, (_, i) => get(paths[i % paths.length]!)),
        );
        statuses.push(...answers.map((a) => a.status));
      }
      const elapsed = Date.now() - started;
      sampling = false;
      await sampler;
      pool.off('acquire', onAcquire);
      const calls = (await figuresCalls(c)) - before;

      expect(statuses.length).toBeGreaterThanOrEqual(2 * CONCURRENT);
      expect(statuses.every((s) => s === 200)).toBe(true);
      // Once per interval: the loop's reads, however many requests came.
      expect(calls).toBeGreaterThanOrEqual(1);
      expect(calls).toBeLessThanOrEqual(Math.floor(elapsed / INTERVAL_MS) + 1);
      expect(acquired).toBe(0);
      expect(figuresBackends.size).toBe(1);
    } finally {
      await c.end();
    }
  });

  it('serve the last figures with their time while the database cannot answer, and count the failures', async () => {
    const before = (await get('/metrics')).body;
    const readAt = sample(before, 'recognition_http_figures_timestamp_seconds')!;
    expect(readAt).toBeGreaterThan(Date.now() / 1000 - 30);
    const failed = sample(before, 'recognition_http_figures_reads_total', 'result="failed"') ?? 0;

    // A lock no reader gets past: every figures read waits until its statement timeout.
    const c = await admin();
    try {
      await c.query('BEGIN');
      await c.query('LOCK TABLE recognition_job IN ACCESS EXCLUSIVE MODE');
      await waitFor(
        async () =>
          (sample((await get('/metrics')).body, 'recognition_http_figures_reads_total', 'result="failed"') ??
            0) > failed,
        'a failed read counted',
      );
      // Meanwhile the endpoints answer with the figures they had.
      const during = await get('/metrics');
      expect(during.status).toBe(200);
      expect(sample(during.body, 'recognition_jobs', 'status="done"')).toBe(2);
      const stale = sample(during.body, 'recognition_http_figures_timestamp_seconds')!;
      expect(stale).toBeLessThan(Date.now() / 1000 - 1);
      expect((await get('/statechart.json')).status).toBe(200);
      await c.query('ROLLBACK');
      // Released: fresh figures within an interval or two.
      await waitFor(
        async () =>
          sample((await get('/metrics')).body, 'recognition_http_figures_timestamp_seconds')! > stale,
        'fresh figures after the lock',
      );
    } finally {
      await c.end();
    }
  });
});
