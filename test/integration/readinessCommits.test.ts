/**
 * `/readyz` follows progress, not only reachability: on a private PostgreSQL cluster whose
 * `synchronous_standby_names` names a standby that does not exist, every commit waits while
 * `SELECT 1` still answers. With results pending, the `commits` check turns red within 30 s (the
 * default bounds) and says why; once the setting is reset the commits return, every envelope is
 * applied exactly once, and readiness is green again.
 */
import { randomUUID } from 'node:crypto';
import { jetstreamManager } from '@nats-io/jetstream';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../../src/nats/subjects.js';
import { insertJob, type JobFixture } from '../helpers/fixtures.js';
import { waitFor } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';

/** The operator's requirement: an instance whose commits hang leaves service within this. */
const RED_WITHIN_MS = 30_000;
const JOBS = 200;

const t = useHarness({
  pgCluster: true,
  database: { max: 4 },
  nats: true,
  client: true,
  daemon: {
    // The default readiness bounds: what an operator gets without tuning.
    env: { LOG_LEVEL: 'info' },
    loops: { inbox: true, watchdog: false, publisher: false, deadLetters: false, http: true },
  },
});
/** Connections left waiting at a commit by the test itself; ended after the release. */
const waiting: pg.Client[] = [];

afterAll(async () => {
  await setSyncStandbys(null).catch(() => undefined);
  for (const c of waiting) await c.end().catch(() => undefined);
});

/** Run statements on a connection of their own (ALTER SYSTEM cannot run in a transaction). */
async function admin(...statements: string[]): Promise<void> {
  const client = new pg.Client({ connectionString: t.pgCluster.url() });
  await client.connect();
  try {
    for (const s of statements) await client.query(s);
  } finally {
    await client.end();
  }
}

/** Make every commit wait for a standby named `name` (null: for none) from now on. */
async function setSyncStandbys(name: string | null): Promise<void> {
  await admin(
    name === null
      ? 'ALTER SYSTEM RESET synchronous_standby_names'
      : `ALTER SYSTEM SET synchronous_standby_names = '${name}'`,
    'SELECT pg_reload_conf()',
  );
}

/**
 * Whether a write transaction commits within a second on a fresh connection. One that does not is
 * left waiting (the commit returns once the standby setting is reset).
 */
async function commitsWithinASecond(): Promise<boolean> {
  const client = new pg.Client({ connectionString: t.url });
  client.on('error', () => undefined);
  await client.connect();
  // A catalog write: WAL before the commit record, so its commit waits like any batch's.
  const commit = client.query('CREATE TEMP TABLE hang_check (x int)').then(
    () => true,
    () => true,
  );
  const done = await Promise.race([commit, new Promise<false>((r) => setTimeout(() => r(false), 1_000))]);
  if (done) await client.end();
  else waiting.push(client);
  return done;
}

interface Readiness {
  status: number;
  body: { ready: boolean; checks: Record<string, boolean>; reasons?: Record<string, string> };
}

async function readyz(): Promise<Readiness> {
  const res = await fetch(`${t.baseUrl}/readyz`);
  return { status: res.status, body: (await res.json()) as Readiness['body'] };
}

/** Transition rows per result msg id of `jobs`. */
async function resultTransitions(jobs: readonly JobFixture[]): Promise<Map<string, number>> {
  const rows = await t.db
    .selectFrom('recognition_job_transition')
    .select(['msg_id', (eb) => eb.fn.countAll<string>().as('n')])
    .where(
      'msg_id',
      'in',
      jobs.map((j) => `result:${j.jobId}:1`),
    )
    .groupBy('msg_id')
    .execute();
  return new Map(rows.map((r) => [r.msg_id!, Number(r.n)]));
}

describe('/readyz when commits hang', () => {
  it('turns red within 30 s while envelopes wait on commits, and green once they commit, each applied once', async () => {
    const jobs: JobFixture[] = [];
    for (let i = 0; i < JOBS; i++) jobs.push(await insertJob(t.db, { status: 'published' }));
    const ready = await waitFor(async () => {
      const r = await readyz();
      return r.status === 200 ? r : undefined;
    }, 'ready before the fault');
    expect(ready.body.checks).toEqual({ database: true, nats: true, commits: true, consumer: true });

    // 1. Every commit now waits for a synchronous standby that does not exist.
    const hungAt = Date.now();
    await setSyncStandbys(`missing_standby_${randomUUID().slice(0, 8)}`);
    await waitFor(async () => !(await commitsWithinASecond()), 'commits to hang');

    // 2. The service answers every job; the inbox receives them and cannot commit.
    await Promise.all(jobs.map((j) => t.svc.done(j)));
    const red = await waitFor(
      async () => {
        const r = await readyz();
        return r.status === 503 ? r : undefined;
      },
      'readiness red while commits hang',
      RED_WITHIN_MS,
    );
    expect(Date.now() - hungAt).toBeLessThan(RED_WITHIN_MS);
    expect(red.body.ready).toBe(false);
    // Reads still answer: only the commits check can see it.
    expect(red.body.checks).toEqual({ database: true, nats: true, commits: false, consumer: true });
    expect(red.body.reasons?.commits).toMatch(/waited .* s to commit/);
    expect(t.daemon.logs.lines.some((l) => l.event === 'commits_stalled')).toBe(true);
    // The envelopes are pending: received or waiting in the stream, none applied.
    expect((await resultTransitions(jobs)).size).toBe(0);
    const jsm = await jetstreamManager(t.nc);
    const consumer = await jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER);
    expect(consumer.num_pending + consumer.num_ack_pending).toBeGreaterThan(0);
    const metrics = await (await fetch(`${t.baseUrl}/metrics`)).text();
    expect(metrics).toMatch(/^recognition_ready\{check="commits"\} 0$/m);

    // 3. Release: the waiting commits return.
    await setSyncStandbys(null);
    await t.drained(60_000);
    const green = await waitFor(
      async () => {
        const r = await readyz();
        return r.status === 200 ? r : undefined;
      },
      'readiness green once commits complete',
      15_000,
    );
    expect(green.body).toEqual({
      ready: true,
      checks: { database: true, nats: true, commits: true, consumer: true },
    });
    expect(t.daemon.logs.lines.some((l) => l.event === 'commits_resumed')).toBe(true);

    // 4. Every envelope applied exactly once.
    const perMsg = await resultTransitions(jobs);
    expect(perMsg.size).toBe(JOBS);
    expect([...perMsg.values()].every((n) => n === 1)).toBe(true);
    const statuses = await t.db
      .selectFrom('recognition_job')
      .select(['status', (eb) => eb.fn.countAll<string>().as('n')])
      .groupBy('status')
      .execute();
    expect(statuses.map((r) => [r.status, Number(r.n)])).toEqual([['done', JOBS]]);
  });
});
