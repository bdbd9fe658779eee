/**
 * The daemon's start: the inbox starts last, so a start that fails after the connections (here,
 * its HTTP port is taken) has taken no envelope from `core-inbox`; they wait there for the next
 * instance instead of for the ack wait. A start that works afterwards applies every one of them.
 */
import { createServer, type Server } from 'node:net';
import { jetstreamManager } from '@nats-io/jetstream';
import { afterAll, describe, expect, it } from 'vitest';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../../src/nats/subjects.js';
import { insertJob } from '../helpers/fixtures.js';
import { waitFor } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true, nats: true, client: true });
const ALL_LOOPS = { inbox: true, watchdog: true, publisher: true, deadLetters: true, http: true };
let taken: Server | undefined;

afterAll(() => new Promise<void>((resolve) => (taken ? taken.close(() => resolve()) : resolve())));

/** A port on 127.0.0.1 that something else listens on. */
async function takenPort(): Promise<number> {
  taken = createServer();
  await new Promise<void>((resolve) => taken!.listen(0, '127.0.0.1', resolve));
  return (taken.address() as { port: number }).port;
}

describe('a daemon whose start fails', () => {
  const N = 20;

  it('has taken no envelope, and a later start applies them all', async () => {
    // A first daemon without loops provisions the streams and core-inbox.
    await (await t.startDaemon({ loops: { inbox: false, http: false } })).stop();
    const jobs = await Promise.all(Array.from({ length: N }, () => insertJob(t.db, { status: 'published' })));
    for (const j of jobs) await t.svc.done(j);

    const port = await takenPort();
    await expect(
      t.startDaemon({ env: { HTTP_PORT: String(port), HTTP_HOST: '127.0.0.1' }, loops: ALL_LOOPS }),
    ).rejects.toThrow(/EADDRINUSE/);

    const jsm = await jetstreamManager(t.nc);
    const info = await jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER);
    expect(info.delivered.stream_seq).toBe(0);
    expect(info.num_ack_pending).toBe(0);
    expect(info.num_pending).toBe(N);
    const statuses = await t.db.selectFrom('recognition_job').select('status').execute();
    expect(new Set(statuses.map((r) => r.status))).toEqual(new Set(['published']));

    const daemon = await t.startDaemon({ loops: ALL_LOOPS });
    await waitFor(async () => {
      const rows = await t.db
        .selectFrom('recognition_job')
        .select('status')
        .where('status', '=', 'done')
        .execute();
      return rows.length === N;
    }, `all ${N} jobs done`);
    await daemon.stop();
  });
});
