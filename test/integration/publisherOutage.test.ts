/**
 * A NATS outage is not a reason to dead-letter: an in-process daemon (publisher, inbox, HTTP) on a
 * private nats-server that the tests stop and restart, freeze (SIGSTOP) and thaw (SIGCONT), and
 * whose jobs stream they delete. With MAX_PUBLISH_ATTEMPTS=3 and a 200 ms backoff, counting the
 * outage as attempts would put every job that fell due in it in `dlq` within a second; instead the
 * jobs wait, pending with their attempts unspent, /readyz says `nats: false`, and every one is
 * published, once, when NATS is back.
 */
import { randomUUID } from 'node:crypto';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { sql } from 'kysely';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { addFile, createJob } from '../../src/db/jobs.js';
import { JOBS_STREAM } from '../../src/nats/subjects.js';
import { waitFor } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';

const MAX_PUBLISH_ATTEMPTS = 3;
const JOBS = 50;

const t = useHarness({
  database: true,
  nats: true,
  client: { maxReconnectAttempts: -1, reconnectTimeWait: 200 },
  daemon: {
    env: {
      LOG_LEVEL: 'info',
      MAX_PUBLISH_ATTEMPTS: String(MAX_PUBLISH_ATTEMPTS),
      PUBLISH_BACKOFF_BASE_MS: '200',
      PUBLISH_BACKOFF_MAX_MS: '1000',
      PUBLISH_TIMEOUT_MS: '500',
      PUBLISHER_POLL_INTERVAL_MS: '500',
    },
    loops: { inbox: true, watchdog: false, publisher: true, deadLetters: false, http: true },
  },
});
let jsm: JetStreamManager;

beforeAll(async () => {
  jsm = await jetstreamManager(t.nc);
});

interface Readiness {
  status: number;
  body: { ready: boolean; checks: Record<string, boolean> };
}

async function readyz(): Promise<Readiness> {
  const res = await fetch(`${t.baseUrl}/readyz`);
  return { status: res.status, body: (await res.json()) as Readiness['body'] };
}

async function readinessUntil(want: (r: Readiness) => boolean, what: string): Promise<Readiness> {
  return waitFor(async () => {
    const r = await readyz();
    return want(r) ? r : undefined;
  }, what);
}

/**
 * The publisher's outage metrics, read in-process: a scrape of /metrics during an outage waits for
 * the gauges that ask JetStream, which a frozen server never answers.
 */
async function outageWaits(): Promise<number> {
  return (await t.daemon.metrics.publisherOutageWaits.get()).values[0]?.value ?? 0;
}
async function natsUnavailableGauge(): Promise<number> {
  return (await t.daemon.metrics.publisherNatsUnavailable.get()).values[0]?.value ?? 0;
}

/** A metric without labels, as /metrics shows it. */
async function scraped(name: string): Promise<number> {
  const text = await (await fetch(`${t.baseUrl}/metrics`)).text();
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  if (!m) throw new Error(`${name} not in /metrics`);
  return Number(m[1]);
}

beforeEach(async () => {
  await readinessUntil((r) => r.status === 200, 'the daemon ready before the test');
});

async function newJobs(n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const file = await addFile(t.db, {
      bucket: 'arm-ka',
      key: `uploads/${randomUUID()}.xlsx`,
      name: 'a.xlsx',
    });
    ids.push((await createJob(t.db, { fileId: file.id, targetService: 'tabular-parser' })).id);
  }
  return ids;
}

async function jobsOf(ids: string[]) {
  return t.db
    .selectFrom('recognition_job')
    .select(['id', 'status', 'publish_attempts', 'error_code'])
    .where('id', 'in', ids)
    .execute();
}

async function transitionsOf(ids: string[]) {
  const { rows } = await sql<{ event: string; to_status: string; n: number }>`
    SELECT event, to_status, count(*)::int AS n FROM recognition_job_transition
    WHERE job_id = ANY(${ids}::uuid[]) GROUP BY event, to_status ORDER BY event`.execute(t.db);
  return rows;
}

/** How many messages RECOGNITION_JOBS holds for each of `ids`. */
async function streamCopies(ids: string[]): Promise<Map<string, number>> {
  const wanted = new Set(ids);
  const copies = new Map<string, number>();
  // The test's own connection reconnects after a restart too: ask until it answers.
  const { state } = await waitFor(() => jsm.streams.info(JOBS_STREAM), `${JOBS_STREAM} info`, 30_000);
  for (let seq = state.first_seq; state.messages > 0 && seq <= state.last_seq; seq++) {
    const m = await jsm.streams.getMessage(JOBS_STREAM, { seq }).catch(() => null);
    const id = m?.json<{ job_id?: string }>().job_id;
    if (id && wanted.has(id)) copies.set(id, (copies.get(id) ?? 0) + 1);
  }
  return copies;
}

/**
 * Wait until the publisher has put off publishes in more rounds than a job has attempts, then
 * check that no job of `ids` spent one: the outage has outlasted the attempts it used to burn.
 */
async function outlastTheAttempts(ids: string[]): Promise<void> {
  const from = await outageWaits();
  await waitFor(
    async () => (await outageWaits()) >= from + MAX_PUBLISH_ATTEMPTS + 3,
    'the publisher to wait through more rounds than a job has attempts',
    30_000,
  );
  expect(await natsUnavailableGauge()).toBe(1);
  const rows = await jobsOf(ids);
  expect(rows).toHaveLength(ids.length);
  expect(rows.filter((r) => r.status !== 'pending' || r.publish_attempts !== 0)).toEqual([]);
  expect(await transitionsOf(ids)).toEqual([]);
}

/** Every job of `ids` published exactly once, with one attempt, and the stream holds one copy of each. */
async function expectAllPublishedOnce(ids: string[]): Promise<void> {
  await waitFor(
    async () => (await jobsOf(ids)).every((r) => r.status === 'published'),
    `all ${ids.length} jobs published`,
    30_000,
  );
  const rows = await jobsOf(ids);
  expect(rows.filter((r) => r.publish_attempts !== 1 || r.error_code !== null)).toEqual([]);
  expect(await transitionsOf(ids)).toEqual([{ event: 'PUBLISHED', to_status: 'published', n: ids.length }]);
  const copies = await streamCopies(ids);
  expect(copies.size).toBe(ids.length);
  expect([...copies.values()].every((n) => n === 1)).toBe(true);
}

/** The outage began once and ended once since `from` (an index into the daemon's log lines). */
function expectOneOutageLogged(from: number): void {
  const lines = t.daemon.logs.lines.slice(from);
  expect(lines.filter((l) => l.event === 'publisher_nats_unavailable')).toEqual([
    expect.objectContaining({ level: 'warn', loop: 'publisher' }),
  ]);
  expect(lines.filter((l) => l.event === 'publisher_nats_available')).toEqual([
    expect.objectContaining({ level: 'info', loop: 'publisher', unavailable_ms: expect.any(Number) }),
  ]);
  expect(lines.filter((l) => l.event === 'PUBLISH_FAILED')).toEqual([]);
}

describe('an outage of NATS spends no publish attempt', () => {
  it('jobs that fall due while nats-server restarts are all published after it: none in dlq, attempts unspent', async () => {
    const logFrom = t.daemon.logs.lines.length;
    await t.nats.stop();
    const red = await readinessUntil(
      (r) => r.status === 503 && r.body.checks.nats === false,
      'readiness red with NATS stopped',
    );
    expect(red.body.checks.database).toBe(true);

    const ids = await newJobs(JOBS);
    await outlastTheAttempts(ids);
    expect((await readyz()).body.checks.nats).toBe(false);

    await t.nats.restart();
    await expectAllPublishedOnce(ids);
    await readinessUntil((r) => r.status === 200, 'readiness green after the restart');
    expect(await scraped('recognition_publisher_nats_unavailable')).toBe(0);
    expect(await scraped('recognition_publisher_outage_waits_total')).toBeGreaterThan(MAX_PUBLISH_ATTEMPTS);
    expectOneOutageLogged(logFrom);
    expect(
      t.daemon.logs.lines.slice(logFrom).find((l) => l.event === 'publisher_nats_unavailable'),
    ).toMatchObject({
      reason: 'NATS is not connected',
    });
  });

  it('jobs that fall due while nats-server is frozen (SIGSTOP, then SIGCONT) are all published after it, each once', async () => {
    const logFrom = t.daemon.logs.lines.length;
    t.nats.pause();
    const ids = await newJobs(JOBS);
    // The connection still looks up; the publishes that get no ack make the NATS check red.
    await readinessUntil(
      (r) => r.status === 503 && r.body.checks.nats === false,
      'readiness red with NATS frozen',
    );
    await outlastTheAttempts(ids);

    t.nats.resume();
    // The server now takes what it was sent while frozen; the publishes that follow carry the same
    // msg ids and are dropped as duplicates.
    await expectAllPublishedOnce(ids);
    await readinessUntil((r) => r.status === 200, 'readiness green after the thaw');
    expectOneOutageLogged(logFrom);
    expect(
      t.daemon.logs.lines.slice(logFrom).find((l) => l.event === 'publisher_nats_unavailable'),
    ).toMatchObject({
      reason: expect.stringMatching(/timeout/i),
    });
  });

  it('the jobs stream deleted under the daemon (provisioning on): an outage; the stream is created again and the job published', async () => {
    const logFrom = t.daemon.logs.lines.length;
    await jsm.streams.delete(JOBS_STREAM);
    const ids = await newJobs(1);
    await expectAllPublishedOnce(ids);
    const lines = t.daemon.logs.lines.slice(logFrom);
    expect(lines.find((l) => l.event === 'publisher_nats_unavailable')).toMatchObject({
      reason: expect.stringContaining('no stream answered on recognition.job.tabular-parser'),
    });
    expect(lines.some((l) => l.event === 'publisher_provisioned')).toBe(true);
    expect(lines.filter((l) => l.event === 'PUBLISH_FAILED')).toEqual([]);
    expect((await jsm.streams.info(JOBS_STREAM)).config.subjects).toEqual(['recognition.job.>']);
  });
});
