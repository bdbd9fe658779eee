/**
 * Database failures that are not the messages' fault, with the daemon behind PgBouncer in
 * transaction mode: a revoked grant, a pooler that cannot keep the named statements it is sent, a
 * connection cut in the middle of a batch. Each quarantines nothing, turns the inbox's readiness
 * red while it lasts, and once it is gone every result is applied, once.
 */
import { sql } from 'kysely';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { useHarness, type Harness } from '../helpers/harness.js';
import { insertProcessingJobs } from '../helpers/poolerScenario.js';
import { waitFor, type TestDaemon } from '../helpers/testDaemon.js';

const t = useHarness({ database: true, nats: true, client: true });
const RESULTS = 200;

async function count(h: Harness, query: ReturnType<typeof sql<{ n: string }>>): Promise<number> {
  return Number((await query.execute(h.db)).rows[0]!.n);
}
const quarantined = () => count(t, sql<{ n: string }>`SELECT count(*) AS n FROM inbox_quarantine`);
const doneOf = (jobs: Array<{ jobId: string }>) =>
  count(
    t,
    sql<{ n: string }>`SELECT count(*) AS n FROM recognition_job
                       WHERE status = 'done' AND id = ANY(${jobs.map((j) => j.jobId)}::uuid[])`,
  );
const doneTransitionsOf = (jobs: Array<{ jobId: string }>) =>
  count(
    t,
    sql<{ n: string }>`SELECT count(*) AS n FROM recognition_job_transition
                       WHERE to_status = 'done' AND job_id = ANY(${jobs.map((j) => j.jobId)}::uuid[])`,
  );

/** The inbox's failures of `fault` so far (`recognition_inbox_batch_failures_total`). */
async function failures(d: TestDaemon, fault: string): Promise<number> {
  const m = await d.metrics.inboxBatchFailures.get();
  return m.values.find((v) => v.labels.fault === fault)?.value ?? 0;
}

/** The SQLSTATEs the daemon's `batch_retry` lines name. */
function retriedFor(d: TestDaemon): Set<unknown> {
  return new Set(d.logs.lines.filter((l) => l.event === 'batch_retry').map((l) => l.sqlstate));
}

async function publishResults(jobs: Array<{ jobId: string; fileId: string }>): Promise<void> {
  await Promise.all(jobs.map((j) => t.svc.done(j)));
}

describe('behind PgBouncer, a failure that is not the messages’ quarantines nothing', () => {
  it('a revoked grant: retried, red while it lasts; every result applied once it is granted again', async () => {
    const role = `rc_pooler_${process.pid}`;
    await sql
      .raw(
        `DROP ROLE IF EXISTS ${role}; CREATE ROLE ${role} LOGIN;
         GRANT ALL ON ALL TABLES IN SCHEMA public TO ${role};
         GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO ${role};`,
      )
      .execute(t.db);
    try {
      const bouncer = await t.startPgbouncer({ mode: 'transaction', users: [role] });
      const jobs = await insertProcessingJobs(t, RESULTS);
      const d = await t.startDaemon({
        databaseUrl: bouncer.url(t.dbName, role),
        env: { DATABASE_POOLER: 'transaction', LOG_LEVEL: 'info' },
      });
      await sql.raw(`REVOKE UPDATE ON recognition_job FROM ${role}`).execute(t.db);
      await publishResults(jobs);
      await waitFor(async () => (await failures(d, 'infrastructure')) >= 3, 'batches to fail and be retried');
      expect(d.inbox!.applyFailure()).toMatch(
        /not the messages' \(syntax error or access rule violation.* 42501\)/,
      );
      expect(retriedFor(d)).toEqual(new Set(['42501']));
      expect(await doneOf(jobs)).toBe(0);
      expect(await quarantined()).toBe(0);

      await sql.raw(`GRANT UPDATE ON recognition_job TO ${role}`).execute(t.db);
      await waitFor(async () => (await doneOf(jobs)) === RESULTS, 'every result to be applied', 45_000);
      await t.drained(45_000);
      expect(await doneTransitionsOf(jobs)).toBe(RESULTS);
      expect(await quarantined()).toBe(0);
      expect(d.inbox!.applyFailure()).toBeUndefined();
      await d.stop();
    } finally {
      await sql.raw(`REASSIGN OWNED BY ${role} TO postgres; DROP OWNED BY ${role}`).execute(t.db);
      await sql.raw(`DROP ROLE IF EXISTS ${role}`).execute(t.db);
    }
  }, 60_000);

  // Skipped while a known issue stands (CHANGELOG, "Known issues"): in the parallel suite this case
  // times out behind the transaction-mode PgBouncer; alone it passes.
  it.skip('named statements a transaction-mode pooler cannot keep: retried, not quarantined; applied once the daemon sends them unnamed', async () => {
    const bouncer = await t.startPgbouncer({ mode: 'transaction', poolSize: 2 });
    const jobs = await insertProcessingJobs(t, RESULTS);
    // DATABASE_POOLER left at none: the daemon prepares its statements by name.
    const wrong = await t.startDaemon({
      databaseUrl: bouncer.url(t.dbName),
      // A short ack wait: what this daemon pulled and never settled before it stops comes back soon.
      env: { LOG_LEVEL: 'info', DB_POOL_SIZE: '6', INBOX_BATCH_SIZE: '10', INBOX_ACK_WAIT_MS: '2000' },
      loops: { inbox: true, watchdog: false, publisher: false, deadLetters: false, http: true },
    });
    await publishResults(jobs);
    await waitFor(
      async () => (await failures(wrong, 'infrastructure')) >= 2,
      'batches to fail on named statements',
    );
    expect([...retriedFor(wrong)].every((c) => c === '26000' || c === '42P05')).toBe(true);
    // Red while batches fail (one that lands on the connection it prepared on may commit between).
    const body = await waitFor(async () => {
      const ready = await fetch(`http://127.0.0.1:${wrong.http!.port}/readyz`);
      const json = (await ready.json()) as { checks: Record<string, boolean> };
      return ready.status === 503 ? json : undefined;
    }, '/readyz to turn red');
    expect(body.checks.consumer).toBe(false);
    await wrong.stop();
    expect(await quarantined()).toBe(0);

    const fixed = await t.startDaemon({
      databaseUrl: bouncer.url(t.dbName),
      env: {
        DATABASE_POOLER: 'transaction',
        LOG_LEVEL: 'info',
        DB_POOL_SIZE: '6',
        INBOX_ACK_WAIT_MS: '2000',
      },
    });
    await waitFor(async () => (await doneOf(jobs)) === RESULTS, 'every result to be applied', 45_000);
    await t.drained(45_000);
    expect(await doneTransitionsOf(jobs)).toBe(RESULTS);
    expect(await quarantined()).toBe(0);
    expect(await failures(fixed, 'infrastructure')).toBe(0);
    await fixed.stop();
  }, 60_000);

  // Skipped while a known issue stands (CHANGELOG, "Known issues"): in the parallel suite this case
  // times out behind the transaction-mode PgBouncer; alone it passes.
  it.skip('a connection cut in the middle of a batch: retried, not quarantined; every result applied', async () => {
    const bouncer = await t.startPgbouncer({ mode: 'transaction' });
    const jobs = await insertProcessingJobs(t, RESULTS);
    // A row lock held on a direct connection makes the batch that names the job wait inside its write.
    const direct = new pg.Client({ connectionString: t.url });
    await direct.connect();
    try {
      await direct.query('BEGIN');
      await direct.query('SELECT 1 FROM recognition_job WHERE id = $1 FOR UPDATE', [jobs[0]!.jobId]);
      const d = await t.startDaemon({
        databaseUrl: bouncer.url(t.dbName),
        env: { DATABASE_POOLER: 'transaction', LOG_LEVEL: 'info' },
      });
      await publishResults(jobs);
      // The server connection of the waiting batch is terminated under it.
      const waiting = await waitFor(async () => {
        const { rows } = await direct.query<{ pid: number }>(
          `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'`,
          [t.dbName],
        );
        return rows.length > 0 ? rows : undefined;
      }, 'a batch to wait for the row lock');
      for (const { pid } of waiting) await direct.query('SELECT pg_terminate_backend($1)', [pid]);
      // Retried as a transient fault, or as another that is not the messages' (the pooler's own error).
      await waitFor(
        async () => (await failures(d, 'transient')) + (await failures(d, 'infrastructure')) >= 1,
        'the cut batch to be retried',
        30_000,
      );
      await direct.query('COMMIT');
      await waitFor(async () => (await doneOf(jobs)) === RESULTS, 'every result to be applied', 45_000);
      await t.drained(45_000);
      expect(await doneTransitionsOf(jobs)).toBe(RESULTS);
      expect(await quarantined()).toBe(0);
      await d.stop();
    } finally {
      await direct.end();
    }
  }, 60_000);
});
