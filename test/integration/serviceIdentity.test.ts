/**
 * Only the service a job was published to answers it: an ack or a result whose `service.name` is
 * not the job's `target_service` leaves the job as it was and is quarantined (`SERVICE_MISMATCH`,
 * both names in the details), counted, logged at warn and listed by `quarantine list`. Over a real
 * nats-server and PostgreSQL, through the daemon's inbox, and on both paths of the step.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { applyInboxBatchTx, decodeItem, type RawMessage } from '../../src/daemon/inboxBatch.js';
import { withPgClient } from '../../src/db/pgTransaction.js';
import { RESULTS_STREAM, RESULT_SUBJECT } from '../../src/nats/subjects.js';
import { applyUnlocked, pgStepSql } from '../../src/step/index.js';
import { spawnCli } from '../helpers/cliProcess.js';
import { insertJob, loadAll, RESULTS, snapshotTables, type JobFixture } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true, nats: true, client: true, daemon: true });

const IMPOSTOR = { name: 'impostor', version: '6.6.6' };
const TARGET = 'tabular-parser';

/** The impostor's envelopes for `job`: an ack, and an error result (what moved a job to `error`). */
const impostor = {
  ack: (job: JobFixture) => ({
    body: { job_id: job.jobId, status: 'processing', service: IMPOSTOR },
    msgId: `ack:${job.jobId}:1`,
  }),
  result: (job: JobFixture) => ({
    body: {
      job_id: job.jobId,
      status: 'error',
      service: IMPOSTOR,
      error: { code: 'HIJACKED', message: 'not the service the job was published to' },
    },
    msgId: `result:${job.jobId}:1`,
  }),
};

/** `recognition_inbox_quarantined_total{reason="SERVICE_MISMATCH"}` as the daemon exports it. */
async function mismatchCount(): Promise<number | undefined> {
  const text = await t.daemon.metrics.registry.metrics();
  const m = /^recognition_inbox_quarantined_total\{reason="SERVICE_MISMATCH"\} (\d+)$/m.exec(text);
  return m ? Number(m[1]) : undefined;
}

/** The job's row, its file and its transitions, plus the job's quarantine rows. */
async function jobState(jobId: string) {
  const all = await loadAll(t.db, jobId);
  const quarantine = await t.db
    .selectFrom('inbox_quarantine')
    .selectAll()
    .where('job_id', '=', jobId)
    .orderBy('id')
    .execute();
  return { ...all, quarantine };
}

describe("an envelope from a service other than the job's target_service", () => {
  it('the quarantine counter for SERVICE_MISMATCH is exported before any envelope', async () => {
    expect(await mismatchCount()).toBe(0);
  });

  const cases = [
    ['ack', 'published'],
    ['ack', 'processing'],
    ['result', 'published'],
    ['result', 'processing'],
    ['result', 'done'],
    ['result', 'timeout'],
  ] as const;

  it.each(cases)(
    'an impostor %s for a %s job: the job is unchanged, the envelope quarantined with both names, counted and logged at warn',
    async (kind, status) => {
      const job = await insertJob(t.db, { status });
      const before = await jobState(job.jobId);
      const counted = (await mismatchCount())!;
      const { body, msgId } = impostor[kind](job);
      const pub = await t.svc.envelope(body, msgId);
      await t.drained();

      const after = await jobState(job.jobId);
      expect({ job: after.job, file: after.file, transitions: after.transitions }).toEqual({
        job: before.job,
        file: before.file,
        transitions: before.transitions,
      });
      expect(after.quarantine).toHaveLength(1);
      const q = after.quarantine[0]!;
      expect(q).toMatchObject({
        reason: 'SERVICE_MISMATCH',
        job_id: job.jobId,
        msg_id: msgId,
        subject: RESULT_SUBJECT,
        stream: RESULTS_STREAM,
        stream_seq: String(pub.seq),
        headers: { 'Nats-Msg-Id': [msgId] },
      });
      expect(q.details).toMatchObject({ expected: TARGET, got: IMPOSTOR.name });
      expect(JSON.parse(Buffer.from(q.payload).toString('utf8'))).toEqual(body);
      expect(await mismatchCount()).toBe(counted + 1);

      const line = t.daemon.logs.lines.find((l) => l.job_id === job.jobId && l.event === 'quarantined');
      expect(line).toMatchObject({
        level: 'warn',
        reason: 'SERVICE_MISMATCH',
        msg_id: msgId,
        details: expect.objectContaining({ expected: TARGET, got: IMPOSTOR.name }),
      });
    },
  );

  it("the job's own service is still applied afterwards: its ack, then its result", async () => {
    const job = await insertJob(t.db, { status: 'published' });
    for (const send of [impostor.ack(job), impostor.result(job)]) await t.svc.envelope(send.body, send.msgId);
    // The target service's envelopes carry other msg ids than the impostor's, so JetStream's
    // duplicate window does not drop them.
    await t.svc.envelope(
      { job_id: job.jobId, status: 'processing', service: { name: TARGET, version: '2.3.1' } },
      `ack:${job.jobId}:own`,
    );
    await t.svc.done(job, { msgId: `result:${job.jobId}:own` });
    await t.drained();
    const after = await jobState(job.jobId);
    expect(after.job).toMatchObject({ status: 'done', service_name: TARGET, service_version: '2.3.1' });
    expect(after.transitions.map((r) => [r.from_status, r.to_status])).toEqual([
      ['published', 'processing'],
      ['processing', 'done'],
    ]);
    expect(after.quarantine.map((q) => q.reason)).toEqual(['SERVICE_MISMATCH', 'SERVICE_MISMATCH']);
  });

  it('`quarantine list --reason SERVICE_MISMATCH` shows it, with both names', async () => {
    const job = await insertJob(t.db, { status: 'processing' });
    const { body, msgId } = impostor.result(job);
    await t.svc.envelope(body, msgId);
    await t.drained();

    const cli = spawnCli(['quarantine', 'list', '--reason', 'SERVICE_MISMATCH'], { DATABASE_URL: t.url });
    const { code } = await cli.exited;
    expect(code, cli.output()).toBe(0);
    const rows = cli.lines
      .filter((l) => l.stream === 'stdout' && l.text.startsWith('{'))
      .map((l) => JSON.parse(l.text) as Record<string, unknown>);
    expect(rows.length).toBeGreaterThan(0);
    expect(rows.every((r) => r['reason'] === 'SERVICE_MISMATCH')).toBe(true);
    const row = rows.find((r) => r['job_id'] === job.jobId);
    expect(row).toMatchObject({
      reason: 'SERVICE_MISMATCH',
      msg_id: msgId,
      details: { expected: TARGET, got: IMPOSTOR.name },
      headers: { 'Nats-Msg-Id': [msgId] },
    });
    expect(JSON.parse(row!['payload'] as string)).toEqual(body);
    expect((await loadAll(t.db, job.jobId)).job.status).toBe('processing');
  });
});

describe('both paths of the step quarantine inside a transaction', () => {
  let seq = 900_000;
  const item = (body: Record<string, unknown>, msgId: string) => {
    const raw: RawMessage = {
      subject: RESULT_SUBJECT,
      stream: RESULTS_STREAM,
      streamSeq: ++seq,
      headers: { 'Nats-Msg-Id': [msgId] },
      data: Buffer.from(JSON.stringify(body)),
    };
    return decodeItem(raw, 1024 * 1024);
  };

  it('the unlocked path hands a rejected event back without writing anything', async () => {
    const job = await insertJob(t.db, { status: 'published' });
    const before = await snapshotTables(t.db);
    const outcomes = await withPgClient(t.pool, (client) =>
      applyUnlocked(pgStepSql(client), [
        {
          jobId: job.jobId,
          event: { type: 'ENVELOPE_PROCESSING', msgId: 'ack-own', service: { name: TARGET, version: '1' } },
        },
        {
          jobId: job.jobId,
          event: {
            type: 'ENVELOPE_RESULT',
            msgId: 'result-impostor',
            status: 'error',
            service: IMPOSTOR,
            error: { code: 'HIJACKED', message: 'x' },
          },
        },
      ]),
    );
    expect(outcomes).toBeNull();
    expect(await snapshotTables(t.db)).toEqual(before);
  });

  it("a batch of one job with its own service's ack and an impostor's result: the ack applied, the result quarantined", async () => {
    const job = await insertJob(t.db, { status: 'published' });
    const own = item(
      { job_id: job.jobId, status: 'processing', service: { name: TARGET, version: '1' } },
      `ack:${job.jobId}:1`,
    );
    const { body, msgId } = impostor.result(job);
    const outcomes = await applyInboxBatchTx(t.pool, [own, item(body, msgId)], RESULTS);
    expect(outcomes).toMatchObject([
      { kind: 'step', outcome: { decision: 'applied', from: 'published', to: 'processing' } },
      {
        kind: 'quarantined',
        reason: 'SERVICE_MISMATCH',
        jobId: job.jobId,
        details: { expected: TARGET, got: IMPOSTOR.name },
      },
    ]);
    const after = await jobState(job.jobId);
    expect(after.job.status).toBe('processing');
    expect(after.quarantine).toMatchObject([{ reason: 'SERVICE_MISMATCH', msg_id: msgId }]);
  });

  it('a batch of several jobs (the locked path): each impostor envelope quarantined, the rest applied', async () => {
    const a = await insertJob(t.db, { status: 'published' });
    const b = await insertJob(t.db, { status: 'processing' });
    const items = [
      item(impostor.ack(a).body, `ack:${a.jobId}:x`),
      item(
        { job_id: b.jobId, status: 'done', service: { name: TARGET, version: '1' } },
        `result:${b.jobId}:1`,
      ),
      item(impostor.result(b).body, `result:${b.jobId}:impostor-${randomUUID()}`),
    ];
    const outcomes = await applyInboxBatchTx(t.pool, items, RESULTS);
    expect(outcomes.map((o) => (o.kind === 'step' ? o.outcome.decision : o.reason))).toEqual([
      'SERVICE_MISMATCH',
      'applied',
      'SERVICE_MISMATCH',
    ]);
    expect((await loadAll(t.db, a.jobId)).job.status).toBe('published');
    expect((await loadAll(t.db, b.jobId)).job.status).toBe('done');
  });
});
