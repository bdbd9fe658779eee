/**
 * One message the database refuses, sent down every road that applies inbox messages: `quarantine
 * replay` (of the row it got as UNKNOWN_JOB before its job existed), `inbox replay` and the live
 * inbox. Each stores the refusal alike: the quarantine rows are equal column by column, but for
 * their id and times. Real PostgreSQL refuses: a trigger the test installs raises a check violation
 * for the job's transition.
 */
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { expect, it } from 'vitest';
import type { QuarantineRow } from '../../src/db/schema.js';
import { replayInbox } from '../../src/replay/inboxReplay.js';
import { replayQuarantine } from '../../src/replay/quarantineReplay.js';
import { insertJob, refuseTransitionsOf, RESULTS } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true, nats: true, client: true });

/** A stored row without what differs from road to road by nature: its id and times. */
function stored(row: QuarantineRow) {
  const { id: _id, received_at: _received, replayed_at: _replayed, replay_outcome: _outcome, ...rest } = row;
  return rest;
}

async function quarantineRows(): Promise<QuarantineRow[]> {
  return t.db.selectFrom('inbox_quarantine').selectAll().orderBy('id').execute();
}

it('a refused message is stored alike by the live inbox, `inbox replay` and `quarantine replay`', async () => {
  // The stream and core-inbox exist; no daemon reads them until the live road.
  await (await t.startDaemon()).stop();
  // The job is made and put aside, so its result names its own object but finds no job at first.
  const job = await insertJob(t.db, { status: 'processing', fileIsCurrent: false });
  const { jobId } = job;
  const saved = await t.db
    .selectFrom('recognition_job')
    .selectAll()
    .where('id', '=', jobId)
    .executeTakeFirstOrThrow();
  await t.db.deleteFrom('recognition_job').where('id', '=', jobId).execute();
  const sent = await t.svc.done(job);
  const replay = async () =>
    replayInbox({
      db: t.db,
      pool: t.pool,
      js: jetstream(t.nc),
      jsm: await jetstreamManager(t.nc),
      from: { seq: sent.seq },
      batchSize: 10,
      maxEnvelopeBytes: 1 << 20,
      resultsBucket: RESULTS.resultsBucket,
    });

  // Before its job exists the message is UNKNOWN_JOB; then the job is created, and refused.
  expect(await replay()).toMatchObject({ delivered: 1, quarantined: 1 });
  const [unknown] = await quarantineRows();
  expect(unknown).toMatchObject({ reason: 'UNKNOWN_JOB', job_id: jobId });
  await t.db
    .insertInto('recognition_job')
    .values(saved as never)
    .execute();
  await refuseTransitionsOf(t.db, jobId);

  // 1. quarantine replay: the same row takes the refusal.
  expect(await replayQuarantine(t.db, { id: unknown!.id }, 1 << 20, RESULTS)).toEqual([
    { id: unknown!.id, outcome: 'still quarantined: SCHEMA_INVALID', jobId },
  ]);
  const byQuarantineReplay = await quarantineRows();
  expect(byQuarantineReplay).toHaveLength(1);
  await t.db.deleteFrom('inbox_quarantine').execute();

  // 2. inbox replay.
  expect(await replay()).toMatchObject({ delivered: 1, quarantined: 1 });
  const byInboxReplay = await quarantineRows();
  expect(byInboxReplay).toHaveLength(1);
  await t.db.deleteFrom('inbox_quarantine').execute();

  // 3. The live inbox.
  const daemon = await t.startDaemon();
  await t.drained();
  await daemon.stop();
  const live = await quarantineRows();
  expect(live).toHaveLength(1);

  expect(stored(live[0]!)).toMatchObject({
    stream_seq: String(sent.seq),
    reason: 'SCHEMA_INVALID',
    job_id: jobId,
    msg_id: `result:${jobId}:1`,
    details: { stage: 'apply', error: 'refused by the test' },
  });
  expect(stored(byInboxReplay[0]!)).toEqual(stored(live[0]!));
  expect(stored(byQuarantineReplay[0]!)).toEqual(stored(live[0]!));
});
