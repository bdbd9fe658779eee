/**
 * The service kit against a real core: the daemon (inbox, publisher, watchdog) on the test's
 * database and nats-server, and services written with the kit, judged by the core's tables.
 * The example of docs/contract.md runs as the built process it is; the other services run in
 * the test's process, where their handler can be watched.
 */
import { fileURLToPath } from 'node:url';
import { randomUUID } from 'node:crypto';
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { headers as natsHeaders, nanos } from '@nats-io/nats-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serve } from '../../service-kit/src/index.js';
import { JOBS_STREAM, jobSubject } from '../../src/nats/subjects.js';
import { spawnCli, type CliProcess } from '../helpers/cliProcess.js';
import { insertJob, snapshotTables } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';
import { waitFor } from '../helpers/testDaemon.js';

const EXAMPLE = fileURLToPath(new URL('../../dist/service-kit/examples/exampleService.js', import.meta.url));
const ACK_WAIT_MS = 1_500;

const t = useHarness({
  database: true,
  nats: true,
  client: true,
  daemon: {
    loops: { inbox: true, publisher: true, watchdog: true, deadLetters: false, http: false },
    env: { PUBLISHER_POLL_INTERVAL_MS: '100', WATCHDOG_INTERVAL_MS: '200' },
  },
});
const children: CliProcess[] = [];

/** The durable of `service`, made before the service starts so that its ack wait is short. */
async function durable(service: string): Promise<void> {
  const jsm = await jetstreamManager(t.nc);
  await jsm.consumers.add(JOBS_STREAM, {
    durable_name: service,
    filter_subject: jobSubject(service),
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(ACK_WAIT_MS),
    max_deliver: 5,
  });
}

function startExample(env: Record<string, string> = {}): CliProcess {
  const p = spawnCli([], { NATS_URL: t.nats.url, EXAMPLE_WORK_MS: '100', ...env }, { script: EXAMPLE });
  children.push(p);
  return p;
}

/**
 * A `pending` job for `service` whose uploaded file is `key`; the daemon publishes it. Its first
 * publication is due a moment after the insert, once the file's key is set.
 */
async function pendingJob(service: string, key: string): Promise<string> {
  const { jobId, fileId } = await insertJob(t.db, {
    status: 'pending',
    target_service: service,
    next_publish_at: new Date(Date.now() + 300),
  });
  const file = await t.db
    .selectFrom('stored_file')
    .select('s3_object_id')
    .where('id', '=', fileId)
    .executeTakeFirstOrThrow();
  await t.db.updateTable('s3_object').set({ key }).where('id', '=', file.s3_object_id).execute();
  return jobId;
}

async function job(jobId: string) {
  return t.db
    .selectFrom('recognition_job')
    .leftJoin('s3_object', 's3_object.id', 'recognition_job.result_s3_object_id')
    .select([
      'recognition_job.status',
      'recognition_job.file_id',
      'recognition_job.error_code',
      'recognition_job.metrics',
      'recognition_job.result_msg_id',
      'recognition_job.service_name',
      's3_object.key as result_key',
      's3_object.created_by as result_created_by',
    ])
    .where('recognition_job.id', '=', jobId)
    .executeTakeFirstOrThrow();
}

const FINAL = ['done', 'needs_check', 'error', 'timeout', 'dlq'];
async function final(jobId: string, timeoutMs = 20_000) {
  await waitFor(async () => FINAL.includes((await job(jobId)).status), `job ${jobId} final`, timeoutMs);
  return job(jobId);
}

async function path(jobId: string): Promise<string[]> {
  const rows = await t.db
    .selectFrom('recognition_job_transition')
    .select(['from_status', 'to_status'])
    .where('job_id', '=', jobId)
    .orderBy('id')
    .execute();
  return rows.map((r) => `${r.from_status}→${r.to_status}`);
}

afterAll(async () => {
  for (const p of children)
    if (p.child.exitCode === null && p.child.signalCode === null) {
      p.child.kill('SIGKILL');
      await p.exited;
    }
});

describe('the example service of docs/contract.md, as a process', () => {
  let example: CliProcess;
  beforeAll(async () => {
    await durable('example-parser');
    example = startExample();
  });

  it('takes jobs from published to done, needs_check and error, retrying a failed read', async () => {
    const ids = {
      done: await pendingJob('example-parser', 'uploads/report.csv'),
      needs_check: await pendingJob('example-parser', 'uploads/scan-2024.xlsx'),
      error: await pendingJob('example-parser', 'uploads/report.pdf'),
      flaky: await pendingJob('example-parser', 'uploads/flaky.csv'),
    };
    const rows = Object.fromEntries(
      await Promise.all(Object.entries(ids).map(async ([k, id]) => [k, await final(id)] as const)),
    );
    expect(rows.done).toMatchObject({ status: 'done', service_name: 'example-parser', error_code: null });
    expect(rows.done!.metrics).toEqual({ rows: 2, confidence: 0.98 });
    expect(rows.needs_check).toMatchObject({ status: 'needs_check' });
    expect(rows.error).toMatchObject({ status: 'error', error_code: 'UNSUPPORTED_FORMAT', result_key: null });
    // The first read of the flaky file threw; the kit ran the handler again and it succeeded.
    expect(rows.flaky).toMatchObject({ status: 'done' });
    for (const k of ['done', 'needs_check', 'flaky'] as const) {
      const id = ids[k];
      expect(rows[k]).toMatchObject({
        result_key: `results/${rows[k]!.file_id}/${id}/table.json`,
        result_created_by: 'example-parser',
        result_msg_id: `result:${id}:1`,
      });
    }
    for (const [k, id] of Object.entries(ids))
      expect(await path(id)).toEqual([
        'pending→published',
        'published→processing',
        `processing→${k === 'flaky' ? 'done' : k}`,
      ]);
  });

  it('stops on SIGTERM after finishing the job in hand, exit code 0', async () => {
    const id = await pendingJob('example-parser', 'uploads/last.csv');
    await waitFor(async () => (await job(id)).status === 'processing', 'the job in hand');
    example.child.kill('SIGTERM');
    expect(await example.exited).toEqual({ code: 0, signal: null });
    await t.drained();
    expect((await job(id)).status).toBe('done');
  });

  it('killed with SIGKILL mid-job and restarted, applies the result exactly once', async () => {
    const slow = startExample({ EXAMPLE_WORK_MS: '60000' });
    const id = await pendingJob('example-parser', 'uploads/killed.csv');
    await waitFor(async () => (await job(id)).status === 'processing', 'the job in hand', 30_000);
    slow.child.kill('SIGKILL');
    await slow.exited;
    // The new copy gets the job message again once its ack wait has passed.
    startExample();
    const row = await final(id, 30_000);
    expect(row).toMatchObject({ status: 'done', result_msg_id: `result:${id}:1` });
    expect(await path(id)).toEqual(['pending→published', 'published→processing', 'processing→done']);
    const results = await t.db
      .selectFrom('s3_object')
      .select('id')
      .where('key', '=', `results/${row.file_id}/${id}/table.json`)
      .execute();
    expect(results).toHaveLength(1);

    // A redelivery after the result: the job message again, as JetStream would hand it over. The
    // service answers again with the same message ids; nothing of the core changes.
    const before = await snapshotTables(t.db);
    const jsm = await jetstreamManager(t.nc);
    const first = await jsm.streams.getMessage(JOBS_STREAM, { last_by_subj: jobSubject('example-parser') });
    const h = natsHeaders();
    h.set('Nats-Msg-Id', `redelivery:${randomUUID()}`);
    const redelivered = await jetstream(t.nc).publish(jobSubject('example-parser'), first!.data, {
      headers: h,
    });
    await waitFor(async () => {
      const info = await jsm.consumers.info(JOBS_STREAM, 'example-parser');
      return info.ack_floor.stream_seq >= redelivered.seq && info.num_ack_pending === 0;
    }, 'the service to handle the redelivered job');
    await t.drained();
    expect(await snapshotTables(t.db)).toEqual(before);
  });
});

describe('services in the test process', () => {
  it('a handler that works longer than the ack wait is not redelivered while it works', async () => {
    await durable('slow-parser');
    let runs = 0;
    const svc = await serve({
      service: 'slow-parser',
      version: '1',
      nats: t.nc,
      signals: false,
      handle: async (_job, ctx) => {
        runs++;
        await new Promise((r) => setTimeout(r, ACK_WAIT_MS * 2.5));
        return ctx.done({ metrics: { deliveries: ctx.deliveries } });
      },
    });
    try {
      const id = await pendingJob('slow-parser', 'uploads/big.csv');
      expect(await final(id, 30_000)).toMatchObject({ status: 'done', metrics: { deliveries: 1 } });
      // Give JetStream one more ack wait to redeliver, had the in-progress acks not held it.
      await new Promise((r) => setTimeout(r, ACK_WAIT_MS + 200));
      expect(runs).toBe(1);
      expect(svc.counters()).toMatchObject({ received: 1, redelivered: 0, done: 1 });
      expect(svc.counters().working).toBeGreaterThanOrEqual(3);
    } finally {
      await svc.stop();
    }
  });

  it('runs a throwing handler up to its limit, then answers error; refuses its invalid result; holds at most `concurrency` jobs', async () => {
    let running = 0;
    let most = 0;
    const svc = await serve({
      service: 'broken-parser',
      version: '1',
      nats: t.nc,
      signals: false,
      concurrency: 2,
      retry: { attempts: 3, backoffMs: 20 },
      logger: {
        debug: () => undefined,
        info: () => undefined,
        warn: () => undefined,
        error: () => undefined,
      },
      handle: async (job, ctx) => {
        running++;
        most = Math.max(most, running);
        await new Promise((r) => setTimeout(r, 150));
        running--;
        if (job.source_s3.key.endsWith('.bad')) throw new Error('the parser crashed');
        if (job.source_s3.key.endsWith('.long'))
          return ctx.done({ result_s3: ctx.resultKey('x'.repeat(2_000)) });
        return ctx.done();
      },
    });
    try {
      const bad = await pendingJob('broken-parser', 'uploads/x.bad');
      const long = await pendingJob('broken-parser', 'uploads/x.long');
      const good = await Promise.all(
        [1, 2, 3, 4].map((i) => pendingJob('broken-parser', `uploads/${i}.csv`)),
      );
      const row = await final(bad);
      expect(row).toMatchObject({ status: 'error', error_code: 'HANDLER_FAILED' });
      for (const id of good) expect((await final(id)).status).toBe('done');
      const msg = await t.db
        .selectFrom('recognition_job')
        .select('error_message')
        .where('id', '=', bad)
        .executeTakeFirstOrThrow();
      expect(msg.error_message).toMatch(/failed 3 time\(s\): the parser crashed/);
      // A result the schema refuses is answered error at once: a redelivery would repeat it.
      expect(await final(long)).toMatchObject({ status: 'error', error_code: 'INVALID_RESULT' });
      expect(svc.counters()).toMatchObject({ handler_errors: 3, error: 2, done: 4, naks: 0 });
      expect(most).toBeLessThanOrEqual(2);
    } finally {
      await svc.stop();
    }
  });
});
