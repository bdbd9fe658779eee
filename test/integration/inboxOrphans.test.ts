/**
 * A stopped instance's unacked envelopes (orphans) at start, with no other instance pulling: the
 * inbox lets them be redelivered before it takes newer ones, so a job's result never overtakes
 * its ack; and it stops waiting as soon as none is left unacked. Real NATS JetStream (the
 * "stopped instance" is a client that fetched from `core-inbox` and never acked), real PostgreSQL.
 */
import { jetstream, type JsMsg } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../../src/nats/subjects.js';
import { insertJob, loadAll } from '../helpers/fixtures.js';
import { createLogSink } from '../helpers/logSink.js';
import { waitFor } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true, nats: true, client: true });

/** Provision the streams and `core-inbox` with this ack wait (a daemon without loops does). */
async function provision(ackWaitMs: number): Promise<void> {
  const env = { INBOX_ACK_WAIT_MS: String(ackWaitMs) };
  await (await t.startDaemon({ env, loops: { inbox: false, http: false } })).stop();
}

/** Take `n` envelopes from `core-inbox` as an instance would, and never ack them. */
async function takeUnacked(n: number): Promise<JsMsg[]> {
  const nc = await t.connect();
  const consumer = await jetstream(nc).consumers.get(RESULTS_STREAM, INBOX_CONSUMER);
  const taken: JsMsg[] = [];
  for await (const m of await consumer.fetch({ max_messages: n, expires: 5_000 })) {
    taken.push(m);
    if (taken.length === n) break;
  }
  expect(taken).toHaveLength(n);
  return taken;
}

describe('envelopes a stopped instance left unacked', () => {
  it('are applied before newer ones: the ack the stopped instance held comes before the result', async () => {
    const ackWaitMs = 2_000;
    await provision(ackWaitMs);
    const job = await insertJob(t.db, { status: 'published' });
    await t.svc.ack(job);
    const [held] = await takeUnacked(1);
    expect(held!.json<{ status: string }>().status).toBe('processing');
    // The instance that took the ack is gone; the service's result follows.
    await t.svc.done(job);

    const daemon = await t.startDaemon({ env: { INBOX_ACK_WAIT_MS: String(ackWaitMs) } });
    await t.drained();

    // In stream order: published → processing (the redelivered ack), then processing → done.
    // Taken at once, the result would have made it published → done and the ack come too late.
    const { job: row, transitions } = await loadAll(t.db, job.jobId);
    await daemon.stop();
    expect(row.status).toBe('done');
    expect(transitions.map((r) => [r.from_status, r.to_status])).toEqual([
      ['published', 'processing'],
      ['processing', 'done'],
    ]);
    expect(daemon.logs.lines.find((l) => l.event === 'orphans_wait')).toMatchObject({ ack_pending: 1 });
  });

  it('are waited for only while one is unacked: the start goes on once the last is acked', async () => {
    // An ack wait far longer than the test may run: only the look at the consumer can end the wait.
    const ackWaitMs = 600_000;
    await provision(ackWaitMs);
    const job = await insertJob(t.db, { status: 'published' });
    await t.svc.ack(job);
    const held = await takeUnacked(1);

    const logs = createLogSink();
    const starting = t.startDaemon({ env: { INBOX_ACK_WAIT_MS: String(ackWaitMs) }, logs });
    await waitFor(() => logs.lines.some((l) => l.event === 'orphans_wait'), 'the orphans wait');
    // The stopped instance's ack arrives late.
    for (const m of held) await m.ackAck();

    const daemon = await starting;
    expect(daemon.logs.lines.find((l) => l.event === 'orphans_gone')).toMatchObject({ ack_pending: 0 });
    // It consumes: the service's result is applied.
    await t.svc.done(job);
    await t.drained();
    expect((await loadAll(t.db, job.jobId)).job.status).toBe('done');
    await daemon.stop();
  });
});
