/**
 * "No stream took the message" with NATS_PROVISION=false, where the operator's streams decide what
 * is bound: an in-process daemon on a private nats-server whose jobs stream binds only
 * `recognition.job.tabular-parser`. A job for a service no stream binds is refused by JetStream
 * and goes to `dlq` after its attempts (a dead letter: that message cannot be delivered); a jobs
 * stream missing altogether is an outage the jobs wait out, attempts unspent, until an operator
 * creates it.
 */
import { randomUUID } from 'node:crypto';
import { jetstreamManager, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { beforeAll, describe, expect, it } from 'vitest';
import { addFile, createJob } from '../../src/db/jobs.js';
import { provisionStreams } from '../../src/nats/provision.js';
import { JOBS_STREAM } from '../../src/nats/subjects.js';
import { loadAll } from '../helpers/fixtures.js';
import { waitFor, type TestDaemon } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true, nats: true, client: true });
let jsm: JetStreamManager;
let daemon: TestDaemon;
let base: string;

const MAX_PUBLISH_ATTEMPTS = 3;

/** The operator's jobs stream: it binds the one service this deployment runs. */
const addOperatorJobsStream = () =>
  jsm.streams.add({
    name: JOBS_STREAM,
    subjects: ['recognition.job.tabular-parser'],
    storage: StorageType.File,
  });

beforeAll(async () => {
  jsm = await jetstreamManager(t.nc);
  // The operator's provisioning: the results stream and core-inbox as the core would make them,
  // and a jobs stream of their own.
  await provisionStreams(jsm, {
    duplicateWindowMs: 120_000,
    replicas: 1,
    ackWaitMs: 30_000,
    maxAckPending: 1000,
  });
  await jsm.streams.delete(JOBS_STREAM);
  await addOperatorJobsStream();
  daemon = await t.startDaemon({
    env: {
      LOG_LEVEL: 'info',
      NATS_PROVISION: 'false',
      MAX_PUBLISH_ATTEMPTS: String(MAX_PUBLISH_ATTEMPTS),
      PUBLISH_BACKOFF_BASE_MS: '200',
      PUBLISH_BACKOFF_MAX_MS: '1000',
      PUBLISHER_POLL_INTERVAL_MS: '500',
    },
    loops: { inbox: true, watchdog: false, publisher: true, deadLetters: false, http: true },
  });
  base = `http://127.0.0.1:${daemon.http!.port}`;
});

async function newJob(targetService: string): Promise<string> {
  const file = await addFile(t.db, { bucket: 'arm-ka', key: `uploads/${randomUUID()}.xlsx`, name: 'a.xlsx' });
  return (await createJob(t.db, { fileId: file.id, targetService })).id;
}

async function readyz(): Promise<{ status: number; checks: Record<string, boolean> }> {
  const res = await fetch(`${base}/readyz`);
  return { status: res.status, checks: ((await res.json()) as { checks: Record<string, boolean> }).checks };
}

const outageWaits = async () => (await daemon.metrics.publisherOutageWaits.get()).values[0]?.value ?? 0;

describe('no stream binds the subject (NATS_PROVISION=false)', () => {
  it('a job for a service no stream binds is refused: dlq (PUBLISH_FAILED) after its attempts; a bound service’s job is published', async () => {
    const logFrom = daemon.logs.lines.length;
    const unbound = await newJob('ocr-nobody-runs');
    const bound = await newJob('tabular-parser');

    await waitFor(async () => (await loadAll(t.db, unbound)).job.status === 'dlq', 'the unbound job in dlq');
    await waitFor(
      async () => (await loadAll(t.db, bound)).job.status === 'published',
      'the bound job published',
    );

    const { job, file, transitions } = await loadAll(t.db, unbound);
    expect(job).toMatchObject({
      status: 'dlq',
      error_code: 'PUBLISH_FAILED',
      error_message: `no stream binds subject recognition.job.ocr-nobody-runs (streams for job subjects: ${JOBS_STREAM})`,
      publish_attempts: MAX_PUBLISH_ATTEMPTS,
    });
    expect(file).toMatchObject({ status: 'ERROR', error_code: 'PUBLISH_FAILED' });
    expect(transitions.map((r) => r.event)).toEqual(Array(MAX_PUBLISH_ATTEMPTS).fill('PUBLISH_FAILED'));
    // A refusal is no outage: NATS stays green and no outage was logged.
    const lines = daemon.logs.lines.slice(logFrom);
    expect(lines.filter((l) => l.event === 'publisher_nats_unavailable')).toEqual([]);
    expect(lines.filter((l) => l.event === 'PUBLISH_FAILED' && l.job_id === unbound).at(-1)).toMatchObject({
      level: 'error',
      to: 'dlq',
    });
    expect(await readyz()).toMatchObject({ status: 200, checks: { nats: true } });
  });

  it('no stream for any job subject (the jobs stream deleted): an outage, attempts unspent, until an operator creates it', async () => {
    const logFrom = daemon.logs.lines.length;
    await jsm.streams.delete(JOBS_STREAM);
    const jobId = await newJob('tabular-parser');

    const from = await outageWaits();
    await waitFor(
      async () => (await outageWaits()) >= from + MAX_PUBLISH_ATTEMPTS + 3,
      'the publisher to wait through more rounds than a job has attempts',
    );
    const waiting = await loadAll(t.db, jobId);
    expect(waiting.job).toMatchObject({ status: 'pending', publish_attempts: 0 });
    expect(waiting.transitions).toEqual([]);
    expect(await readyz()).toMatchObject({ status: 503, checks: { nats: false, database: true } });
    expect(
      daemon.logs.lines.slice(logFrom).find((l) => l.event === 'publisher_nats_unavailable'),
    ).toMatchObject({
      level: 'warn',
      reason: 'no stream binds job subjects (recognition.job.>): the jobs stream is missing',
    });

    await addOperatorJobsStream();
    await waitFor(async () => (await loadAll(t.db, jobId)).job.status === 'published', 'the job published');
    const { job, transitions } = await loadAll(t.db, jobId);
    expect(job.publish_attempts).toBe(1);
    expect(transitions.map((r) => r.event)).toEqual(['PUBLISHED']);
    await waitFor(async () => (await readyz()).status === 200, 'readiness green again');
  });
});
