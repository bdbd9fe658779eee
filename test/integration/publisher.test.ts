/**
 * The publisher against real PostgreSQL and a real nats-server: a created job reaches the stream
 * promptly (NOTIFY), a crash between JetStream's ack and the commit leaves one message, NATS being
 * unreachable spends no attempt (the job waits and is published once NATS is back), a message
 * JetStream refuses backs off to dlq, invalid messages are dead letters, and several publishers
 * never publish a job twice.
 */
import { randomUUID } from 'node:crypto';
import { jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { sql } from 'kysely';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { addFile, createJob } from '../../src/db/jobs.js';
import {
  createPublisher,
  type Publisher,
  type PublisherConfig,
  type PublisherOptions,
} from '../../src/daemon/publisher.js';
import { applyEvents } from '../../src/step/index.js';
import { checkJobMessage } from '../../src/messages/schemas.js';
import { createMetrics } from '../../src/metrics.js';
import { connectNats, type Nats } from '../../src/nats/connection.js';
import { provisionStreams } from '../../src/nats/provision.js';
import { JOBS_STREAM } from '../../src/nats/subjects.js';
import { loadAll } from '../helpers/fixtures.js';
import { createLogSink } from '../helpers/logSink.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcpProxy.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true, nats: true, client: true });
let jsm: JetStreamManager;

beforeAll(async () => {
  jsm = await jetstreamManager(t.nc);
  await provisionStreams(jsm, {
    duplicateWindowMs: 120_000,
    replicas: 1,
    ackWaitMs: 30_000,
    maxAckPending: 1000,
  });
});

/** Defaults of the real configuration, with a poll so long that only NOTIFY or a timer explain a prompt publish. */
function config(overrides: Partial<PublisherConfig> = {}): PublisherConfig {
  return {
    ...loadConfig({}),
    PUBLISHER_POLL_INTERVAL_MS: 60_000,
    RESULTS_BUCKET: 'arm-ka-results',
    ...overrides,
  };
}

const started: Publisher[] = [];
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((p) => p.stop()));
  for (const c of cleanups.splice(0).reverse()) await c();
});

function publisher(overrides: Partial<PublisherOptions> & { config?: PublisherConfig } = {}) {
  const logs = createLogSink();
  const metrics = createMetrics({}, { defaultMetrics: false });
  const p = createPublisher({
    db: t.db,
    pool: t.pool,
    js: jetstream(t.nc),
    logger: logs.logger,
    metrics,
    config: config(),
    ...overrides,
  });
  started.push(p);
  return { publisher: p, logs, metrics };
}

async function newJob(key = `uploads/${randomUUID()}.xlsx`) {
  const file = await addFile(t.db, { bucket: 'arm-ka', key, name: 'report.xlsx' });
  const job = await createJob(t.db, { fileId: file.id, targetService: 'tabular-parser' });
  return { jobId: job.id, fileId: file.id, key };
}

/** Every message of RECOGNITION_JOBS whose payload names `jobId`. */
async function streamMessagesFor(jobId: string) {
  const { state } = await jsm.streams.info(JOBS_STREAM);
  const found = [];
  for (let seq = state.first_seq; seq <= state.last_seq && state.messages > 0; seq++) {
    const m = await jsm.streams.getMessage(JOBS_STREAM, { seq });
    if (m && m.json<{ job_id?: string }>().job_id === jobId) found.push(m);
  }
  return found;
}

async function jobRow(jobId: string) {
  return t.db.selectFrom('recognition_job').selectAll().where('id', '=', jobId).executeTakeFirstOrThrow();
}

describe('publishing a created job', () => {
  it('reaches the stream promptly through NOTIFY, with subject, msg id and a schema-valid payload; the job is published', async () => {
    const { publisher: p, logs, metrics } = publisher();
    await p.start();
    expect(p.isListening()).toBe(true);
    const { rows } = await sql<{
      n: number;
    }>`SELECT count(*)::int AS n FROM recognition_job WHERE status = 'pending'`.execute(t.db);
    expect(rows[0]!.n).toBe(0); // nothing else could wake a timer

    const createdAt = Date.now();
    const { jobId, fileId, key } = await newJob();
    await vi.waitFor(async () => expect((await jobRow(jobId)).status).toBe('published'), {
      timeout: 5_000,
      interval: 10,
    });
    // The poll is 60 s and nothing was due before: only the NOTIFY explains this.
    expect(Date.now() - createdAt).toBeLessThan(5_000);

    const { job, file, transitions } = await loadAll(t.db, jobId);
    expect(job).toMatchObject({ status: 'published', publish_attempts: 1, next_publish_at: null });
    expect(job.published_at).toBeInstanceOf(Date);
    expect(job.reply_deadline!.getTime() - job.published_at!.getTime()).toBe(config().REPLY_TIMEOUT_MS);
    expect(file.status).toBe('QUEUED');
    expect(transitions.map((r) => [r.from_status, r.to_status, r.event])).toEqual([
      ['pending', 'published', 'PUBLISHED'],
    ]);

    const messages = await streamMessagesFor(jobId);
    expect(messages).toHaveLength(1);
    const m = messages[0]!;
    expect(m.subject).toBe('recognition.job.tabular-parser');
    expect(m.header.get('Nats-Msg-Id')).toBe(`job:${jobId}:1`);
    const payload = m.json<unknown>();
    expect(checkJobMessage(payload)).toMatchObject({ valid: true });
    expect(payload).toEqual({
      job_id: jobId,
      file_id: fileId,
      attempt: 1,
      source_s3: { bucket: 'arm-ka', key },
      result_s3_prefix: { bucket: 'arm-ka-results', key_prefix: `results/${fileId}/${jobId}/` },
      reply_subject: 'recognition.result',
      // Exactly what the row says: the message and the step read the same transaction's clock.
      reply_deadline: job.reply_deadline!.toISOString(),
      published_at: job.published_at!.toISOString(),
    });

    expect(logs.lines.filter((l) => l.job_id === jobId)).toEqual([
      expect.objectContaining({
        level: 'info',
        event: 'PUBLISHED',
        msg_id: `job:${jobId}:1`,
        from: 'pending',
        to: 'published',
        subject: 'recognition.job.tabular-parser',
        duplicate: false,
      }),
    ]);
    // Every known result's series exists from the start (at 0), so alerts see the first increase.
    const results = (await metrics.publisherResults.get()).values.map((v) => [v.labels.result, v.value]);
    expect(Object.fromEntries(results)).toEqual({ published: 1, failed: 0, dlq: 0 });
  });

  it('keeps listening after its LISTEN connection is killed', async () => {
    const { publisher: p, logs } = publisher();
    await p.start();
    await sql`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE datname = current_database() AND application_name = 'recognition-core:publisher-listen'`.execute(
      t.db,
    );
    await vi.waitFor(() => expect(logs.lines.some((l) => l.event === 'listen_dropped')).toBe(true), {
      timeout: 5_000,
    });
    await vi.waitFor(() => expect(p.isListening()).toBe(true), { timeout: 5_000, interval: 20 });

    const { jobId } = await newJob();
    await vi.waitFor(async () => expect((await jobRow(jobId)).status).toBe('published'), {
      timeout: 5_000,
      interval: 10,
    });
  });

  it('a round that filled its batch is followed by another at once: 25 jobs with a batch of 10', async () => {
    const jobs = [];
    for (let i = 0; i < 25; i++) jobs.push(await newJob());
    const { publisher: p } = publisher({ pool: undefined, config: config({ PUBLISHER_BATCH_SIZE: 10 }) });
    await p.start();
    const ids = jobs.map((j) => j.jobId);
    await vi.waitFor(
      async () => {
        const { rows } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM recognition_job
                                                   WHERE id = ANY(${ids}::uuid[]) AND status = 'published'`.execute(
          t.db,
        );
        expect(rows[0]!.n).toBe(25);
      },
      { timeout: 5_000, interval: 20 },
    );
  });
});

describe('exactly one message per job', () => {
  it('a crash after JetStream acked but before the commit: republished, deduplicated, one message in the stream', async () => {
    let crashes = 0;
    const crashOnce: typeof applyEvents = async (tx, items) => {
      if (crashes++ === 0) throw new Error('injected crash between the publish and the commit');
      return applyEvents(tx, items);
    };
    const { publisher: p, logs } = publisher({ applyEvents: crashOnce });
    await p.start();
    const { jobId } = await newJob();

    await vi.waitFor(async () => expect((await jobRow(jobId)).status).toBe('published'), {
      timeout: 10_000,
      interval: 20,
    });
    expect(crashes).toBe(2);
    expect(logs.lines.find((l) => l.event === 'publisher_round_failed')).toMatchObject({ level: 'error' });
    const { job, transitions } = await loadAll(t.db, jobId);
    // The failed round left no trace in the database: one attempt, one transition.
    expect(job.publish_attempts).toBe(1);
    expect(transitions.map((r) => r.event)).toEqual(['PUBLISHED']);
    // JetStream kept the first copy and dropped the second as a duplicate.
    expect(await streamMessagesFor(jobId)).toHaveLength(1);
  });

  it('two publishers racing over 200 jobs publish each exactly once', async () => {
    const jobs = [];
    for (let i = 0; i < 200; i++) jobs.push(await newJob());
    const ids = jobs.map((j) => j.jobId);
    const a = publisher({ config: config({ PUBLISHER_BATCH_SIZE: 15 }) });
    const b = publisher({ config: config({ PUBLISHER_BATCH_SIZE: 15 }) });
    await Promise.all([a.publisher.start(), b.publisher.start()]);
    await vi.waitFor(
      async () => {
        const { rows } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM recognition_job
                                                   WHERE id = ANY(${ids}::uuid[]) AND status = 'published'`.execute(
          t.db,
        );
        expect(rows[0]!.n).toBe(200);
      },
      { timeout: 15_000, interval: 50 },
    );
    const { rows } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM recognition_job_transition
                                               WHERE job_id = ANY(${ids}::uuid[])`.execute(t.db);
    expect(rows[0]!.n).toBe(200);
    const published = [a, b].flatMap((x) =>
      x.logs.lines.filter((l) => l.event === 'PUBLISHED' && ids.includes(l.job_id as string)),
    );
    expect(published).toHaveLength(200);
    expect(published.filter((l) => l.duplicate)).toEqual([]);
    expect(new Set(published.map((l) => l.job_id)).size).toBe(200);
  });
});

describe('NATS unreachable', () => {
  /** A publisher whose NATS connection (the production one) runs through a proxy a test can cut. */
  async function behindProxy(cfg: PublisherConfig) {
    const proxy: TcpProxy = await startTcpProxy({ host: '127.0.0.1', port: t.nats.port });
    const logs = createLogSink();
    const nats: Nats = await connectNats(
      {
        NATS_URL: `nats://127.0.0.1:${proxy.port}`,
        NATS_USER: '',
        NATS_PASSWORD: '',
        NATS_TOKEN: '',
        NATS_CREDS: '',
        NATS_TLS_CA: '',
        NATS_TLS_CERT: '',
        NATS_TLS_KEY: '',
      },
      logs.logger,
    );
    cleanups.push(async () => {
      await nats.nc.close().catch(() => undefined);
      await proxy.close();
    });
    const metrics = createMetrics({}, { defaultMetrics: false });
    const p = createPublisher({
      db: t.db,
      pool: t.pool,
      js: jetstream(nats.nc),
      isConnected: nats.isConnected,
      logger: logs.logger,
      metrics,
      config: cfg,
    });
    started.push(p);
    return { proxy, publisher: p, logs, metrics, nats };
  }

  it('an outage longer than the attempts spends none: the job waits, pending, and is published once NATS is back', async () => {
    // With the outage counted as attempts, this job would be dlq after 2 tries (100 ms apart).
    const cfg = config({
      MAX_PUBLISH_ATTEMPTS: 2,
      PUBLISH_BACKOFF_BASE_MS: 100,
      PUBLISH_BACKOFF_MAX_MS: 400,
      PUBLISH_TIMEOUT_MS: 1_000,
    });
    const { proxy, publisher: p, logs, metrics, nats } = await behindProxy(cfg);
    proxy.cut();
    await vi.waitFor(() => expect(nats.isConnected()).toBe(false), { timeout: 5_000, interval: 10 });
    await p.start();

    const { jobId } = await newJob();
    const waits = async () => (await metrics.publisherOutageWaits.get()).values[0]?.value ?? 0;
    // The publisher tried more often than the job has attempts, and spent none of them.
    await vi.waitFor(async () => expect(await waits()).toBeGreaterThanOrEqual(cfg.MAX_PUBLISH_ATTEMPTS + 3), {
      timeout: 10_000,
      interval: 20,
    });
    expect(p.isNatsAvailable()).toBe(false);
    expect((await metrics.publisherNatsUnavailable.get()).values[0]?.value).toBe(1);
    const waiting = await loadAll(t.db, jobId);
    expect(waiting.job).toMatchObject({ status: 'pending', publish_attempts: 0, error_code: null });
    expect(waiting.transitions).toEqual([]);
    expect(waiting.file.status).toBe('QUEUED');

    proxy.restore();
    await vi.waitFor(async () => expect((await jobRow(jobId)).status).toBe('published'), {
      timeout: 10_000,
      interval: 20,
    });
    const { job, transitions } = await loadAll(t.db, jobId);
    expect(job.publish_attempts).toBe(1);
    expect(transitions.map((r) => [r.from_status, r.to_status, r.event])).toEqual([
      ['pending', 'published', 'PUBLISHED'],
    ]);
    expect(job.reply_deadline!.getTime() - job.published_at!.getTime()).toBe(cfg.REPLY_TIMEOUT_MS);
    expect(await streamMessagesFor(jobId)).toHaveLength(1);

    // One line when the outage began, one when it ended; no failed publish, no dead letter.
    expect(logs.lines.filter((l) => l.event === 'publisher_nats_unavailable')).toEqual([
      expect.objectContaining({ level: 'warn', reason: 'NATS is not connected' }),
    ]);
    expect(logs.lines.filter((l) => l.event === 'publisher_nats_available')).toEqual([
      expect.objectContaining({ level: 'info', unavailable_ms: expect.any(Number) }),
    ]);
    expect(p.isNatsAvailable()).toBe(true);
    expect((await metrics.publisherNatsUnavailable.get()).values[0]?.value).toBe(0);
    const results = (await metrics.publisherResults.get()).values.map((v) => [v.labels.result, v.value]);
    expect(Object.fromEntries(results)).toEqual({ published: 1, failed: 0, dlq: 0 });
  });

  it('without the connected check, a publish that gets no ack in time spends no attempt; the job is published, once, when NATS is back', async () => {
    const cfg = config({ MAX_PUBLISH_ATTEMPTS: 1, PUBLISH_BACKOFF_BASE_MS: 100, PUBLISH_TIMEOUT_MS: 300 });
    const { proxy, nats } = await behindProxy(cfg);
    const blind = createPublisher({
      db: t.db,
      js: jetstream(nats.nc),
      logger: createLogSink().logger,
      config: cfg,
    });
    proxy.cut();
    await vi.waitFor(() => expect(nats.isConnected()).toBe(false), { timeout: 5_000, interval: 10 });

    const { jobId } = await newJob();
    const before = await jobRow(jobId);
    const startedAt = Date.now();
    expect(await blind.publishDue()).toBe(1);
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(290);
    // A timeout is an outage: nothing recorded, the job as it was (still due), the publisher waits.
    expect(await jobRow(jobId)).toEqual(before);
    expect((await loadAll(t.db, jobId)).transitions).toEqual([]);
    expect(blind.isNatsAvailable()).toBe(false);

    // Whatever the client sends of that publish when it reconnects, the stream keeps one copy.
    proxy.restore();
    await vi.waitFor(() => expect(nats.isConnected()).toBe(true), { timeout: 10_000, interval: 20 });
    await vi.waitFor(
      async () => {
        await blind.publishDue();
        expect((await jobRow(jobId)).status).toBe('published');
      },
      { timeout: 10_000, interval: 50 },
    );
    expect(blind.isNatsAvailable()).toBe(true);
    expect((await jobRow(jobId)).publish_attempts).toBe(1);
    expect(await streamMessagesFor(jobId)).toHaveLength(1);
  });
});

describe('a job message JetStream refuses', () => {
  /** A valid key (at most 1024 characters) that makes the job message larger than 1 KiB. */
  const bigKey = () => `uploads/${randomUUID()}-${'k'.repeat(960)}.xlsx`;

  /** Lower the jobs stream's largest message for one test (an operator's limit). */
  async function withMaxMsgSize(bytes: number) {
    const { config: c } = await jsm.streams.info(JOBS_STREAM);
    await jsm.streams.update(JOBS_STREAM, { ...c, max_msg_size: bytes });
    cleanups.push(async () => {
      const { config: now } = await jsm.streams.info(JOBS_STREAM);
      await jsm.streams.update(JOBS_STREAM, { ...now, max_msg_size: c.max_msg_size });
    });
  }

  it('over the stream’s max_msg_size: publish_attempts grow with exponential backoff and the job ends dlq (PUBLISH_FAILED), file ERROR', async () => {
    await withMaxMsgSize(1024);
    const cfg = config({
      MAX_PUBLISH_ATTEMPTS: 4,
      PUBLISH_BACKOFF_BASE_MS: 100,
      PUBLISH_BACKOFF_MAX_MS: 300,
    });
    const { publisher: p, logs, metrics } = publisher({ config: cfg });
    await p.start();

    const { jobId } = await newJob(bigKey());
    await vi.waitFor(async () => expect((await jobRow(jobId)).status).toBe('dlq'), {
      timeout: 10_000,
      interval: 20,
    });

    const { job, file, transitions } = await loadAll(t.db, jobId);
    expect(job).toMatchObject({
      status: 'dlq',
      error_code: 'PUBLISH_FAILED',
      error_message: 'JetStreamApiError: message size exceeds maximum allowed',
      publish_attempts: 4,
      next_publish_at: null,
      published_at: null,
      reply_deadline: null,
    });
    expect(job.finished_at).toBeInstanceOf(Date);
    expect(file).toMatchObject({ status: 'ERROR', error_code: 'PUBLISH_FAILED' });
    expect(transitions.map((r) => [r.from_status, r.to_status, r.event])).toEqual([
      ['pending', 'pending', 'PUBLISH_FAILED'],
      ['pending', 'pending', 'PUBLISH_FAILED'],
      ['pending', 'pending', 'PUBLISH_FAILED'],
      ['pending', 'dlq', 'PUBLISH_FAILED'],
    ]);
    // Each retry waited at least its backoff: 100, 200, then 300 (400 capped), from the step's own clock.
    const gaps = transitions.slice(1).map((r, i) => r.at.getTime() - transitions[i]!.at.getTime());
    [100, 200, 300].forEach((backoff, i) => expect(gaps[i]).toBeGreaterThanOrEqual(backoff - 1));
    expect(
      logs.lines.filter((l) => l.job_id === jobId).map((l) => [l.level, l.attempts, l.retry_in_ms]),
    ).toEqual([
      ['warn', 1, 100],
      ['warn', 2, 200],
      ['warn', 3, 300],
      ['error', 4, undefined],
    ]);
    // A refusal is no outage.
    expect(logs.lines.filter((l) => l.event === 'publisher_nats_unavailable')).toEqual([]);
    expect(p.isNatsAvailable()).toBe(true);
    const results = (await metrics.publisherResults.get()).values.map((v) => [v.labels.result, v.value]);
    expect(Object.fromEntries(results)).toEqual({ published: 0, failed: 3, dlq: 1 });
    const deadLetters = (await metrics.deadLetters.get()).values.map((v) => [v.labels.reason, v.value]);
    expect(Object.fromEntries(deadLetters)).toEqual({ PUBLISH_FAILED: 1, MAX_DELIVERIES: 0 });
    expect((await metrics.publisherOutageWaits.get()).values[0]?.value).toBe(0);
    expect(await streamMessagesFor(jobId)).toEqual([]);
  });

  it('a refused job does not hold back the others of its round', async () => {
    await withMaxMsgSize(1024);
    const cfg = config({ MAX_PUBLISH_ATTEMPTS: 1 });
    const { publisher: p } = publisher({ config: cfg });
    const big = await newJob(bigKey());
    const small = await newJob();
    expect(await p.publishDue()).toBeGreaterThanOrEqual(2);
    expect((await jobRow(big.jobId)).status).toBe('dlq');
    expect((await jobRow(small.jobId)).status).toBe('published');
  });
});

describe('an invalid job message', () => {
  it('is a bug that no retry fixes: PUBLISH_FAILED with the validator’s reason, dlq at once, nothing published', async () => {
    const { publisher: p } = publisher();
    const { jobId } = await newJob(`uploads/${'x'.repeat(1100)}`);
    expect(await p.publishDue()).toBe(1);
    const { job, file } = await loadAll(t.db, jobId);
    expect(job).toMatchObject({ status: 'dlq', error_code: 'PUBLISH_FAILED', publish_attempts: 1 });
    expect(job.error_message).toMatch(/invalid job message.*\/source_s3\/key/);
    expect(file).toMatchObject({ status: 'ERROR', error_code: 'PUBLISH_FAILED' });
    expect(await streamMessagesFor(jobId)).toEqual([]);
  });
});
