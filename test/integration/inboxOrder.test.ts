/**
 * Per-job order with several batch transactions in flight: a job's envelopes are applied in
 * stream order and never two at once, even when its ack and its result land in different batches
 * — the later one waits until the earlier one's batch has committed. Real NATS JetStream, real
 * PostgreSQL, small batches so that a job's two envelopes are often split.
 */
import { jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import type { InboxItem } from '../../src/daemon/inboxBatch.js';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../../src/nats/subjects.js';
import { insertJob, loadAll } from '../helpers/fixtures.js';
import { waitFor } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';

const msgIdOf = (item: InboxItem): string | null => (item.decoded.ok ? item.decoded.msgId : null);
const jobOf = (item: InboxItem): string | null => (item.decoded.ok ? item.decoded.envelope.job_id : null);

/** What the hooks saw, in order. */
const seen = {
  /** Each batch's msg ids, in the order the batches started. */
  batches: [] as string[][],
  /** Jobs whose envelopes are in a batch that has started and not committed. */
  busy: new Set<string>(),
  /** A job found in two batches at once (must stay empty). */
  overlaps: [] as string[],
  running: 0,
  maxRunning: 0,
  /** Start and commit of batches, by the msg ids they hold: `start <id>`, `commit <id>`. */
  events: [] as string[],
};

/** A batch holding this msg id waits before its transaction until `release()` is called. */
let hold: { msgId: string; entered: () => void; released: Promise<void> } | undefined;

const t = useHarness({
  database: true,
  nats: true,
  client: true,
  daemon: {
    env: { INBOX_BATCH_SIZE: '5', INBOX_CONCURRENCY: '4', INBOX_LINGER_MS: '1' },
    beforeInboxBatch: async (items) => {
      const ids = items.map(msgIdOf).filter((id): id is string => id !== null);
      seen.batches.push(ids);
      for (const id of ids) seen.events.push(`start ${id}`);
      for (const job of new Set(items.map(jobOf))) {
        if (job === null) continue;
        if (seen.busy.has(job)) seen.overlaps.push(job);
        seen.busy.add(job);
      }
      seen.running += 1;
      seen.maxRunning = Math.max(seen.maxRunning, seen.running);
      const h = hold;
      if (h && ids.includes(h.msgId)) {
        h.entered();
        await h.released;
      }
    },
    afterInboxCommit: (items) => {
      for (const item of items) {
        const id = msgIdOf(item);
        if (id !== null) seen.events.push(`commit ${id}`);
        const job = jobOf(item);
        if (job !== null) seen.busy.delete(job);
      }
      seen.running -= 1;
    },
  },
});

/** The transitions of a job, as `event from→to`. */
async function transitionsOf(jobId: string): Promise<string[]> {
  const { transitions } = await loadAll(t.db, jobId);
  return transitions.map((tr) => `${tr.event} ${tr.from_status}→${tr.to_status}`);
}

const IN_ORDER = ['ENVELOPE_PROCESSING published→processing', 'ENVELOPE_RESULT processing→done'];

describe('per-job order with several transactions in flight', () => {
  it('300 jobs, each ack then result back to back: every job done through processing, no ack ignored', async () => {
    const jobs = await Promise.all(
      Array.from({ length: 300 }, () => insertJob(t.db, { status: 'published' })),
    );
    // One connection publishes in order: each job's ack is in the stream before its result.
    await Promise.all(jobs.flatMap((j) => [t.svc.ack(j), t.svc.done(j)]));
    await t.drained(60_000);

    for (const j of jobs) expect(await transitionsOf(j.jobId)).toEqual(IN_ORDER);
    const ids = new Set(jobs.map((j) => j.jobId));
    const acks = t.daemon.logs.lines.filter(
      (l) => l['loop'] === 'inbox' && l['event'] === 'ENVELOPE_PROCESSING' && ids.has(l['job_id'] as string),
    );
    expect(acks).toHaveLength(300);
    expect(acks.filter((l) => l['decision'] !== 'applied')).toEqual([]);
    expect(seen.overlaps).toEqual([]);
    // What the test is about did happen: batches ran side by side, and many jobs had their ack
    // and their result in different batches.
    expect(seen.maxRunning).toBeGreaterThan(1);
    const batchOf = new Map<string, number>();
    seen.batches.forEach((b, n) => b.forEach((id) => batchOf.set(id, n)));
    const split = jobs.filter((j) => batchOf.get(`ack:${j.jobId}:1`) !== batchOf.get(`result:${j.jobId}:1`));
    expect(split.length).toBeGreaterThan(0);
  });

  it('a result arriving while its ack’s batch is slow waits for that commit; other jobs go on', async () => {
    const slow = await insertJob(t.db, { status: 'published' });
    const other = await insertJob(t.db, { status: 'published' });
    const ackId = `ack:${slow.jobId}:1`;
    const resultId = `result:${slow.jobId}:1`;
    let entered!: () => void;
    const enteredP = new Promise<void>((resolve) => (entered = resolve));
    let release!: () => void;
    hold = { msgId: ackId, entered, released: new Promise<void>((resolve) => (release = resolve)) };
    try {
      await t.svc.ack(slow);
      await enteredP; // the ack's batch is running, held before its transaction
      const resultSeq = (await t.svc.done(slow)).seq;
      await t.svc.ack(other);
      // Another job's batch commits meanwhile, so the inbox is not stalled; the result has been
      // delivered to the inbox (its stream sequence is before the other job's ack) and waits.
      await waitFor(async () => (await loadAll(t.db, other.jobId)).job.status === 'processing', 'other job');
      const jsm = await jetstreamManager(t.nc);
      const info = await jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER);
      expect(info.delivered.stream_seq).toBeGreaterThanOrEqual(resultSeq);
      expect(seen.events).not.toContain(`start ${resultId}`);
      expect((await loadAll(t.db, slow.jobId)).job.status).toBe('published');
    } finally {
      hold = undefined;
      release();
    }
    await t.drained();
    expect(await transitionsOf(slow.jobId)).toEqual(IN_ORDER);
    expect(seen.events.indexOf(`commit ${ackId}`)).toBeGreaterThanOrEqual(0);
    expect(seen.events.indexOf(`start ${resultId}`)).toBeGreaterThan(seen.events.indexOf(`commit ${ackId}`));
    expect(seen.overlaps).toEqual([]);
  });
});
