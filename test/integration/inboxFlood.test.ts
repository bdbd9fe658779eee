/**
 * A hostile or broken sender cannot stall the inbox: every message is settled once, in a bounded
 * and storable quarantine row or terminated, and the good results published after it are applied.
 * Real PostgreSQL refuses what jsonb cannot hold (U+0000); real JetStream enforces the results
 * stream's `max_msg_size`.
 */
import { jetstreamManager } from '@nats-io/jetstream';
import { sql } from 'kysely';
import { expect, it } from 'vitest';
import { insertJob, loadAll } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';
import { waitFor } from '../helpers/testDaemon.js';
import { RESULTS_STREAM } from '../../src/nats/subjects.js';

const t = useHarness({ database: true, nats: true, client: true });

/** How often each stream sequence reached a batch of `daemon`. */
function deliveries(): {
  seen: Map<number, number>;
  hook: (items: readonly { raw: { streamSeq: number | null } }[]) => void;
} {
  const seen = new Map<number, number>();
  return {
    seen,
    hook: (items) => {
      for (const item of items) {
        const seq = item.raw.streamSeq ?? -1;
        seen.set(seq, (seen.get(seq) ?? 0) + 1);
      }
    },
  };
}

it('a malformed envelope with a U+0000 header value is quarantined once, escaped and flagged; the good result after it is applied', async () => {
  const counted = deliveries();
  const daemon = await t.startDaemon({ beforeInboxBatch: counted.hook });
  const job = await insertJob(t.db, { status: 'processing' });

  const bad = await t.svc.raw('{"job_id": not json', { 'X-Evil': 'a\u0000b', 'Nats-Msg-Id': 'bad:1' });
  await t.svc.done(job);
  await t.drained();

  expect((await loadAll(t.db, job.jobId)).job.status).toBe('done');
  expect(counted.seen.get(bad.seq)).toBeLessThanOrEqual(2);
  const rows = await t.db.selectFrom('inbox_quarantine').selectAll().execute();
  expect(rows).toHaveLength(1);
  expect(rows[0]).toMatchObject({
    reason: 'INVALID_JSON',
    stream_seq: String(bad.seq),
    msg_id: 'bad:1',
    headers: expect.objectContaining({ 'X-Evil': ['a\\u0000b'] }),
    details: expect.objectContaining({ headers_altered: true }),
  });
  expect(daemon.logs.lines).not.toContainEqual(expect.objectContaining({ event: 'quarantine_failed' }));
  await daemon.stop();
});

it('a message whose quarantine record the database refuses is terminated, logged and counted, and never comes back', async () => {
  const counted = deliveries();
  // Every quarantine insert fails for a reason a retry cannot fix.
  await sql`
    CREATE FUNCTION test_refuse_quarantine() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'quarantine refused by the test'; END $$`.execute(t.db);
  await sql`
    CREATE TRIGGER test_refuse_quarantine BEFORE INSERT ON inbox_quarantine
    FOR EACH ROW EXECUTE FUNCTION test_refuse_quarantine()`.execute(t.db);
  try {
    const daemon = await t.startDaemon({ beforeInboxBatch: counted.hook });
    const job = await insertJob(t.db, { status: 'processing' });
    const bad = await t.svc.raw('not json at all');
    await t.svc.done(job);
    await t.drained();

    expect((await loadAll(t.db, job.jobId)).job.status).toBe('done');
    // Its own batch with the good result, then alone, then its fallback record: then terminated.
    expect(counted.seen.get(bad.seq)).toBeLessThanOrEqual(3);
    expect(daemon.logs.lines).toContainEqual(
      expect.objectContaining({ event: 'envelope_terminated', stream_seq: bad.seq, reason: 'INVALID_JSON' }),
    );
    const text = await daemon.metrics.registry.metrics();
    expect(text).toMatch(/^recognition_inbox_terminated_total 1$/m);
    // Not delivered again: nothing is pending or waiting for an ack a while later.
    await new Promise((r) => setTimeout(r, 1500));
    const seenBefore = counted.seen.get(bad.seq);
    await t.drained();
    expect(counted.seen.get(bad.seq)).toBe(seenBefore);
    await daemon.stop();
  } finally {
    await sql`DROP TRIGGER test_refuse_quarantine ON inbox_quarantine`.execute(t.db);
    await sql`DROP FUNCTION test_refuse_quarantine()`.execute(t.db);
  }
});

it('a schema-invalid envelope with thousands of extra keys and a long msg id is stored bounded and counted per service', async () => {
  const daemon = await t.startDaemon({ env: { QUARANTINE_PAYLOAD_MAX_BYTES: '1000' } });
  const job = await insertJob(t.db, { status: 'processing' });
  // A good result first: `tabular-parser` becomes a known service label.
  const first = await t.svc.done(job);
  await t.drained();

  const extra: Record<string, number> = {};
  for (let i = 0; i < 5000; i++) extra[`k${i}`] = i;
  const known = {
    job_id: job.jobId,
    status: 'done',
    service: { name: 'tabular-parser', version: '1', ...extra },
  };
  const hostile = { ...known, service: { name: 'made-up-by-the-sender', version: '1', ...extra } };
  const payload = JSON.stringify(known);
  await t.svc.raw(payload, { 'Nats-Msg-Id': 'r'.repeat(5000) });
  await t.svc.raw(JSON.stringify(hostile), { 'Nats-Msg-Id': 'x:1' });
  await t.drained();

  const rows = await t.db
    .selectFrom('inbox_quarantine')
    .select(['msg_id', 'details', sql<number>`length(payload)`.as('bytes')])
    .where('stream_seq', '>', String(first.seq))
    .orderBy('id')
    .execute();
  expect(rows).toHaveLength(2);
  for (const row of rows) {
    expect(row.bytes).toBe(1000);
    expect(row.details).toMatchObject({ error_count: 5000, payload_truncated: true });
    expect((row.details as { errors: unknown[] }).errors.length).toBeLessThanOrEqual(10);
    expect(JSON.stringify(row.details).length).toBeLessThan(16 * 1024);
    expect(row.msg_id!.length).toBeLessThanOrEqual(256);
  }
  expect(rows[0]!.details).toMatchObject({ payload_bytes: Buffer.byteLength(payload) });
  const text = await daemon.metrics.registry.metrics();
  expect(text).toContain(
    'recognition_inbox_quarantined_by_service_total{service="tabular-parser",reason="SCHEMA_INVALID"} 1',
  );
  expect(text).toContain(
    'recognition_inbox_quarantined_by_service_total{service="other",reason="SCHEMA_INVALID"} 1',
  );
  expect(text).not.toContain('made-up-by-the-sender');
  const lines = daemon.logs.lines.filter((l) => (l as { event?: string }).event === 'quarantined');
  expect(lines.length).toBeGreaterThanOrEqual(2);
  for (const line of lines) expect(JSON.stringify(line).length).toBeLessThan(16 * 1024);
  await daemon.stop();
});

it('the results stream refuses what the inbox would refuse by size: max_msg_size is MAX_ENVELOPE_BYTES and room for headers', async () => {
  await (await t.startDaemon({ env: { MAX_ENVELOPE_BYTES: '4096' } })).stop();
  const jsm = await jetstreamManager(t.nc);
  await waitFor(
    async () => (await jsm.streams.info(RESULTS_STREAM)).config.max_msg_size === 4096 + 4096,
    'max_msg_size',
  );
  await expect(t.svc.raw('x'.repeat(8193))).rejects.toThrow(/maximum|size/i);
  // An envelope of exactly MAX_ENVELOPE_BYTES with its headers is stored.
  await t.svc.raw('x'.repeat(4096), { 'Nats-Msg-Id': 'm'.repeat(256) });
  // A later start with another limit updates the stream.
  await (await t.startDaemon({ env: { MAX_ENVELOPE_BYTES: '8192' } })).stop();
  expect((await jsm.streams.info(RESULTS_STREAM)).config.max_msg_size).toBe(8192 + 4096);
});
