/**
 * The inbox over a real NATS JetStream and real PostgreSQL: the rules of docs/lifecycle.md ("A service's ack", "Results, applied idempotently")
 * driven by publishing real messages to `recognition.result`, duplicates, hostile input, and a
 * database outage in the middle of a stream.
 */
import { randomUUID } from 'node:crypto';
import { jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../../src/nats/subjects.js';
import { insertJob, loadAll, snapshotTables } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({
  database: true,
  nats: true,
  client: true,
  daemon: { env: { NATS_DUPLICATE_WINDOW_MS: '1000', MAX_ENVELOPE_BYTES: '4096', INBOX_BATCH_SIZE: '50' } },
});

async function consumerIdle(): Promise<boolean> {
  const jsm = await jetstreamManager(t.nc);
  const info = await jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER);
  return info.num_pending === 0 && info.num_ack_pending === 0;
}

describe("a service's ack: the service confirmed", () => {
  it('an ack moves a published job to processing, with started_at, service and the file PROCESSING', async () => {
    const job = await insertJob(t.db, { status: 'published' });
    await t.svc.ack(job);
    await t.drained();
    const { job: row, file, transitions } = await loadAll(t.db, job.jobId);
    expect(row).toMatchObject({
      status: 'processing',
      service_name: 'tabular-parser',
      service_version: '2.3.1',
    });
    expect(row.started_at).toBeInstanceOf(Date);
    expect(file.status).toBe('PROCESSING');
    expect(transitions).toHaveLength(1);
  });

  it('a repeated ack changes nothing; an ack for a final job changes nothing', async () => {
    const processing = await insertJob(t.db, { status: 'processing' });
    const finished = await insertJob(t.db, { status: 'done' });
    const before = await snapshotTables(t.db);
    await t.svc.envelope(
      {
        job_id: processing.jobId,
        status: 'processing',
        service: { name: 'tabular-parser', version: '2.3.1' },
      },
      `ack:${processing.jobId}:again`,
    );
    await t.svc.ack(finished);
    await t.drained();
    expect(await snapshotTables(t.db)).toEqual(before);
    const lines = t.daemon.logs.lines.filter(
      (l) => l.job_id === processing.jobId || l.job_id === finished.jobId,
    );
    expect(lines.map((l) => [l.job_id, l.decision, l.level])).toEqual(
      expect.arrayContaining([
        [processing.jobId, 'duplicate', 'debug'],
        [finished.jobId, 'ignored', 'info'],
      ]),
    );
  });
});

describe('results, applied idempotently', () => {
  it('success: done, result object registered, file stays PROCESSING; one info line naming the envelope', async () => {
    const job = await insertJob(t.db, { status: 'processing' });
    const { seq } = await t.svc.done(job);
    await t.drained();
    expect(t.daemon.logs.lines.filter((l) => l.job_id === job.jobId)).toEqual([
      expect.objectContaining({
        level: 'info',
        msg_id: `result:${job.jobId}:1`,
        stream_seq: seq,
        event: 'ENVELOPE_RESULT',
        from: 'processing',
        to: 'done',
        decision: 'applied',
      }),
    ]);
    // A change has no reason to give: the line carries none.
    expect(t.daemon.logs.lines.find((l) => l.job_id === job.jobId)).not.toHaveProperty('reason');
    const { job: row, file } = await loadAll(t.db, job.jobId);
    expect(row).toMatchObject({
      status: 'done',
      result_msg_id: `result:${job.jobId}:1`,
      service_name: 'tabular-parser',
    });
    expect(row.finished_at).toBeInstanceOf(Date);
    const obj = await t.db
      .selectFrom('s3_object')
      .selectAll()
      .where('id', '=', row.result_s3_object_id!)
      .executeTakeFirstOrThrow();
    expect(obj).toMatchObject({
      bucket: 'arm-ka',
      key: `results/${job.fileId}/${job.jobId}/result.json`,
      bucket_role: 'results',
      created_by: 'tabular-parser',
    });
    expect(file.status).toBe('PROCESSING');
  });

  it('the same result published twice, inside the duplicate window and after it: one effect', async () => {
    const job = await insertJob(t.db, { status: 'processing' });
    const first = await t.svc.done(job);
    const second = await t.svc.done(job); // inside the window: JetStream drops it
    expect(second.duplicate).toBe(true);
    await t.drained();
    const before = await snapshotTables(t.db);
    await new Promise((r) => setTimeout(r, 1_300)); // the test's duplicate window is 1 s
    const third = await t.svc.done(job);
    expect(third.duplicate).toBe(false);
    expect(third.seq).toBeGreaterThan(first.seq);
    await t.drained();
    expect(await snapshotTables(t.db)).toEqual(before);
    expect(
      t.daemon.logs.lines.some(
        (l) => l.job_id === job.jobId && l.decision === 'duplicate' && l.msg_id === `result:${job.jobId}:1`,
      ),
    ).toBe(true);
  });

  it('service error: job error, error_code and message, file ERROR, no result object', async () => {
    const job = await insertJob(t.db, { status: 'processing' });
    await t.svc.error(job, 'UNSUPPORTED_FORMAT', 'not a spreadsheet');
    await t.drained();
    const { job: row, file } = await loadAll(t.db, job.jobId);
    expect(row).toMatchObject({
      status: 'error',
      error_code: 'UNSUPPORTED_FORMAT',
      error_message: 'not a spreadsheet',
      result_s3_object_id: null,
    });
    expect(file).toMatchObject({ status: 'ERROR', error_code: 'UNSUPPORTED_FORMAT' });
  });

  it('a result after timeout changes nothing and is logged at warn', async () => {
    const job = await insertJob(t.db, { status: 'timeout', error_code: 'TIMEOUT' });
    const before = await snapshotTables(t.db);
    await t.svc.done(job);
    await t.drained();
    expect(await snapshotTables(t.db)).toEqual(before);
    expect(t.daemon.logs.lines.find((l) => l.job_id === job.jobId)).toMatchObject({
      decision: 'late',
      level: 'warn',
      from: 'timeout',
      reason: expect.any(String),
    });
  });

  it('acks and results for 200 jobs published concurrently in random order: every job done, nothing left', async () => {
    const jobs = await Promise.all(
      Array.from({ length: 200 }, () => insertJob(t.db, { status: 'published' })),
    );
    const sends = jobs.flatMap((j) => [() => t.svc.ack(j), () => t.svc.done(j)]);
    for (let i = sends.length - 1; i > 0; i--) {
      const k = Math.floor(Math.random() * (i + 1));
      [sends[i], sends[k]] = [sends[k]!, sends[i]!];
    }
    const quarantineBefore = (await t.db.selectFrom('inbox_quarantine').select('id').execute()).length;
    await Promise.all(sends.map((s) => s()));
    await t.drained();
    const rows = await t.db
      .selectFrom('recognition_job')
      .selectAll()
      .where(
        'id',
        'in',
        jobs.map((j) => j.jobId),
      )
      .execute();
    expect(rows).toHaveLength(200);
    for (const r of rows) {
      expect(r.status).toBe('done');
      expect(r.result_msg_id).toBe(`result:${r.id}:1`);
      expect(r.result_s3_object_id).not.toBeNull();
      expect(r.service_name).toBe('tabular-parser');
    }
    expect((await t.db.selectFrom('inbox_quarantine').select('id').execute()).length).toBe(quarantineBefore);
    expect(await consumerIdle()).toBe(true);
  });
});

describe('a contract that can grow: fields the core does not know are ignored (docs/contract.md)', () => {
  it('an ack and a result with extra top-level fields are applied as without them', async () => {
    const job = await insertJob(t.db, { status: 'published' });
    const service = { name: 'tabular-parser', version: '2.4.0' };
    const extra = { priority: 'high', worker: { host: 'w-7', pool: ['a', 'b'] }, retry_hint: null };
    await t.svc.envelope(
      { job_id: job.jobId, status: 'processing', service, ...extra },
      `ack:${job.jobId}:1`,
    );
    await t.svc.envelope(
      {
        job_id: job.jobId,
        status: 'done',
        service,
        result_s3: { bucket: 'arm-ka', key: `results/${job.fileId}/${job.jobId}/result.json` },
        metrics: { pages: 2 },
        ...extra,
        confidence: 0.97,
      },
      `result:${job.jobId}:1`,
    );
    await t.drained();
    const { job: row, transitions } = await loadAll(t.db, job.jobId);
    expect(row).toMatchObject({
      status: 'done',
      service_version: '2.4.0',
      metrics: { pages: 2 },
      result_msg_id: `result:${job.jobId}:1`,
    });
    expect(transitions.map((r) => r.to_status)).toEqual(['processing', 'done']);
    const quarantined = await t.db
      .selectFrom('inbox_quarantine')
      .select('id')
      .where('job_id', '=', job.jobId)
      .execute();
    expect(quarantined).toEqual([]);
  });
});

describe('hostile input: one quarantine row each, acked, the inbox keeps consuming', () => {
  const svcInfo = { name: 'tabular-parser', version: '1' };
  const cases: Array<[string, () => Promise<unknown>, string]> = [
    [
      'not JSON',
      () => t.svc.raw('this is {not json', { 'Nats-Msg-Id': `bad:${randomUUID()}` }),
      'INVALID_JSON',
    ],
    [
      'JSON that is not an object',
      () => t.svc.raw('[1,2,3]', { 'Nats-Msg-Id': `bad:${randomUUID()}` }),
      'SCHEMA_INVALID',
    ],
    [
      'status outside the enum',
      () =>
        t.svc.envelope({ job_id: randomUUID(), status: 'finished', service: svcInfo }, `bad:${randomUUID()}`),
      'SCHEMA_INVALID',
    ],
    [
      'no job_id',
      () => t.svc.envelope({ status: 'done', service: svcInfo }, `bad:${randomUUID()}`),
      'SCHEMA_INVALID',
    ],
    [
      'job_id not a uuid',
      () => t.svc.envelope({ job_id: '42', status: 'done', service: svcInfo }, `bad:${randomUUID()}`),
      'SCHEMA_INVALID',
    ],
    [
      'error without error',
      () =>
        t.svc.envelope({ job_id: randomUUID(), status: 'error', service: svcInfo }, `bad:${randomUUID()}`),
      'SCHEMA_INVALID',
    ],
    [
      'result_s3 on an error',
      () =>
        t.svc.envelope(
          {
            job_id: randomUUID(),
            status: 'error',
            service: svcInfo,
            error: { code: 'X', message: 'y' },
            result_s3: { bucket: 'b', key: 'k' },
          },
          `bad:${randomUUID()}`,
        ),
      'SCHEMA_INVALID',
    ],
    [
      'wrong types in service',
      () =>
        t.svc.envelope(
          { job_id: randomUUID(), status: 'done', service: { name: 7, version: [] } },
          `bad:${randomUUID()}`,
        ),
      'SCHEMA_INVALID',
    ],
    [
      'a __proto__ payload',
      () =>
        t.svc.raw(
          `{"job_id":"${randomUUID()}","status":"done","service":{"name":"a","version":"1"},"__proto__":{"admin":true}}`,
          { 'Nats-Msg-Id': `bad:${randomUUID()}` },
        ),
      'INVALID_JSON',
    ],
    [
      'a payload over the limit',
      () =>
        t.svc.envelope(
          { job_id: randomUUID(), status: 'done', service: svcInfo, pad: 'x'.repeat(5000) },
          `bad:${randomUUID()}`,
        ),
      'PAYLOAD_TOO_LARGE',
    ],
    [
      'a result without Nats-Msg-Id',
      () => t.svc.envelope({ job_id: randomUUID(), status: 'done', service: svcInfo }, null),
      'MISSING_MSG_ID',
    ],
    [
      'an unknown job_id',
      () =>
        t.svc.envelope(
          { job_id: randomUUID(), status: 'done', service: svcInfo },
          `result:${randomUUID()}:1`,
        ),
      'UNKNOWN_JOB',
    ],
  ];

  it.each(cases)('%s → %s', async (_name, send, reason) => {
    const before = await t.db
      .selectFrom('inbox_quarantine')
      .select('id')
      .orderBy('id', 'desc')
      .limit(1)
      .executeTakeFirst();
    const ack = (await send()) as { seq: number };
    await t.drained();
    const rows = await t.db
      .selectFrom('inbox_quarantine')
      .selectAll()
      .where('id', '>', before?.id ?? '0')
      .execute();
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      reason,
      subject: 'recognition.result',
      stream: RESULTS_STREAM,
      stream_seq: String(ack.seq),
    });
    expect(rows[0]!.payload.length).toBeGreaterThan(0);
    // Still consuming: a valid envelope right after is applied.
    const job = await insertJob(t.db, { status: 'published' });
    await t.svc.ack(job);
    await t.drained();
    expect((await loadAll(t.db, job.jobId)).job.status).toBe('processing');
  });

  it('stores the raw payload and headers verbatim', async () => {
    const payload = `{"job_id":"nope","status":"done","service":{"name":"x'; DROP TABLE recognition_job; --","version":"1"}}`;
    const msgId = `bad:${randomUUID()}`;
    await t.svc.raw(payload, { 'Nats-Msg-Id': msgId, 'X-Trace': 'abc' });
    await t.drained();
    const row = await t.db
      .selectFrom('inbox_quarantine')
      .selectAll()
      .where('msg_id', '=', msgId)
      .executeTakeFirstOrThrow();
    expect(Buffer.from(row.payload).toString('utf8')).toBe(payload);
    expect(row.headers).toMatchObject({ 'Nats-Msg-Id': [msgId], 'X-Trace': ['abc'] });
    expect(row.details).toBeTruthy();
  });
});
