/**
 * A batch with a message whose values the database refuses: the inbox applies the batch's messages
 * one by one, so the message that fails is rolled back and quarantined alone, acked, and its
 * neighbours are applied. Real PostgreSQL refuses: a trigger the test installs raises a check
 * violation, naming its table and constraint, for one job's transition.
 */
import { expect, it } from 'vitest';
import { insertJob, loadAll, refuseTransitionsOf, type JobFixture } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true, nats: true, client: true });

it('one refused message in a batch: quarantined alone (SCHEMA_INVALID, stage apply) and acked; the others applied', async () => {
  const env = { INBOX_BATCH_SIZE: '50', INBOX_CONCURRENCY: '1' };
  // Provision the stream and consumer, then stop: the results wait in the stream, so the next
  // start receives them together, in one batch.
  await (await t.startDaemon({ env })).stop();

  const jobs: JobFixture[] = [];
  for (let i = 0; i < 5; i++) jobs.push(await insertJob(t.db, { status: 'processing' }));
  const refused = jobs[2]!;
  await refuseTransitionsOf(t.db, refused.jobId);

  for (const job of jobs) await t.svc.done(job);

  const batchSizes: number[] = [];
  const daemon = await t.startDaemon({
    env,
    beforeInboxBatch: (items) => void batchSizes.push(items.length),
  });
  await t.drained();

  // The five came in one batch, which failed and was applied one message at a time.
  expect(batchSizes[0]).toBe(5);
  expect(batchSizes.slice(1)).toEqual([1, 1, 1, 1, 1]);
  expect(daemon.logs.lines).toContainEqual(expect.objectContaining({ event: 'batch_isolate', size: 5 }));

  for (const job of jobs) {
    const { job: row, transitions } = await loadAll(t.db, job.jobId);
    if (job === refused) {
      expect(row.status).toBe('processing');
      expect(transitions).toEqual([]);
    } else {
      expect(row.status).toBe('done');
      expect(transitions.map((tr) => tr.to_status)).toEqual(['done']);
    }
  }
  const quarantined = await t.db.selectFrom('inbox_quarantine').selectAll().execute();
  expect(quarantined).toHaveLength(1);
  expect(quarantined[0]).toMatchObject({
    reason: 'SCHEMA_INVALID',
    job_id: refused.jobId,
    msg_id: `result:${refused.jobId}:1`,
  });
  expect(quarantined[0]!.details).toMatchObject({ stage: 'apply', error: 'refused by the test' });
});
