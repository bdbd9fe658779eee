/**
 * The inbox heals when its consumer disappears under a running daemon: `core-inbox` deleted (an
 * operator's slip), or `RECOGNITION_RESULTS` deleted and re-created by infrastructure code. Where
 * the core provisions the streams it creates them again and consumes; where it does not, /readyz
 * says `consumer: false` and the log names what is missing until an operator creates it. Each test
 * then publishes a result and sees it applied. The waits poll until a bound; nothing sleeps.
 */
import { jetstreamManager, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { beforeAll, describe, expect, it } from 'vitest';
import { provisionStreams } from '../../src/nats/provision.js';
import { INBOX_CONSUMER, RESULTS_STREAM, RESULT_SUBJECT } from '../../src/nats/subjects.js';
import { insertJob, loadAll } from '../helpers/fixtures.js';
import type { ServiceClient } from '../helpers/serviceClient.js';
import { waitFor, type TestDaemon } from '../helpers/testDaemon.js';
import { useHarness, type Harness } from '../helpers/harness.js';

/** "Back within 30 s": the bound every heal must meet. */
const HEAL_WITHIN_MS = 30_000;

const PROVISION = { duplicateWindowMs: 120_000, replicas: 1, ackWaitMs: 30_000, maxAckPending: 1000 };

const t = useHarness({ database: true });

interface Setup {
  jsm: JetStreamManager;
  svc: ServiceClient;
  daemon: TestDaemon;
  base: string;
}

/** A private nats-server, a client for the test, and a daemon (inbox and HTTP) on them. */
function useSetUp(env: Record<string, string>): Setup {
  const h = useHarness({ nats: true, client: true });
  const s = {} as Setup;
  beforeAll(async () => {
    const jsm = await jetstreamManager(h.nc);
    // Provisioned before the daemon starts, as an operator does where the core does not.
    await provisionStreams(jsm, PROVISION);
    const daemon = await h.startDaemon({
      databaseUrl: t.url,
      env: { LOG_LEVEL: 'info', ...env },
      loops: { inbox: true, watchdog: false, publisher: false, deadLetters: false, http: true },
    });
    Object.assign(s, { jsm, svc: h.svc, daemon, base: `http://127.0.0.1:${daemon.http!.port}` });
  });
  return s;
}

async function consumerCheck(s: Setup): Promise<{ status: number; consumer: boolean | undefined }> {
  const res = await fetch(`${s.base}/readyz`);
  const body = (await res.json()) as { checks: Record<string, boolean> };
  return { status: res.status, consumer: body.checks.consumer };
}

/** A published job, its result sent by the "service" now, and applied by the inbox. */
async function resultApplied(s: Setup, db: Harness): Promise<void> {
  const job = await insertJob(db.db, { status: 'published' });
  await s.svc.done(job);
  await waitFor(
    async () => (await loadAll(db.db, job.jobId)).job.status === 'done',
    'a result published after the heal to be applied',
    HEAL_WITHIN_MS,
  );
}

async function consumerExists(jsm: JetStreamManager): Promise<boolean> {
  return jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER).then(
    () => true,
    () => false,
  );
}

describe('NATS_PROVISION=true: the daemon provisions what disappeared', () => {
  const s = useSetUp({});

  it('core-inbox deleted under the running daemon is back within 30 s, and results published after it are applied', async () => {
    await resultApplied(s, t);
    const logFrom = s.daemon.logs.lines.length;

    await s.jsm.consumers.delete(RESULTS_STREAM, INBOX_CONSUMER);
    await waitFor(
      async () => (await consumerExists(s.jsm)) && s.daemon.inbox!.isBound(),
      'core-inbox back and bound',
      HEAL_WITHIN_MS,
    );
    const lines = s.daemon.logs.lines.slice(logFrom);
    expect(lines.find((l) => l.event === 'inbox_consumer_missing')).toMatchObject({
      level: 'warn',
      missing: 'consumer',
      stream: RESULTS_STREAM,
      consumer: INBOX_CONSUMER,
      provision: true,
    });
    await waitFor(
      () => s.daemon.logs.lines.slice(logFrom).some((l) => l.event === 'inbox_consumer_back'),
      'the log to say core-inbox is back',
      HEAL_WITHIN_MS,
    );
    await resultApplied(s, t);
    expect((await consumerCheck(s)).status).toBe(200);
  });

  it('the results stream deleted and re-created by infrastructure code: core-inbox is created again and consumes', async () => {
    const logFrom = s.daemon.logs.lines.length;
    // Infrastructure code re-creating the stream with its own settings (and no consumers). The
    // daemon leaves it the moment it needs: the creation does not race the daemon's.
    await s.jsm.streams.delete(RESULTS_STREAM);
    await s.jsm.streams.add({
      name: RESULTS_STREAM,
      subjects: [RESULT_SUBJECT],
      storage: StorageType.File,
      max_msgs: 1_000_000,
    });

    await waitFor(
      async () => (await consumerExists(s.jsm)) && s.daemon.inbox!.isBound(),
      'core-inbox back on the re-created stream',
      HEAL_WITHIN_MS,
    );
    expect(
      s.daemon.logs.lines
        .slice(logFrom)
        .some((l) => l.event === 'inbox_consumer_missing' && l.level === 'warn'),
    ).toBe(true);
    await resultApplied(s, t);
    await waitFor(async () => (await consumerCheck(s)).status === 200, 'readiness green', HEAL_WITHIN_MS);
  });
});

describe('NATS_PROVISION=false: the daemon waits for the operator', () => {
  // At debug, every look for the missing consumer is logged (warn only every 30 s).
  const s = useSetUp({ NATS_PROVISION: 'false', LOG_LEVEL: 'debug' });

  it('core-inbox deleted: /readyz red (consumer false) and the log names it; green again once an operator re-creates it', async () => {
    await resultApplied(s, t);
    const logFrom = s.daemon.logs.lines.length;

    await s.jsm.consumers.delete(RESULTS_STREAM, INBOX_CONSUMER);
    const red = await waitFor(
      async () => {
        const r = await consumerCheck(s);
        return r.status === 503 && r.consumer === false ? r : undefined;
      },
      'readiness red with core-inbox deleted',
      HEAL_WITHIN_MS,
    );
    expect(red.consumer).toBe(false);
    const missing = s.daemon.logs.lines.slice(logFrom).filter((l) => l.event === 'inbox_consumer_missing');
    expect(missing[0]).toMatchObject({
      level: 'warn',
      missing: 'consumer',
      stream: RESULTS_STREAM,
      consumer: INBOX_CONSUMER,
      provision: false,
    });
    expect(missing[0]!.msg).toContain(`consumer ${INBOX_CONSUMER} of ${RESULTS_STREAM}`);
    // It does not create it: it keeps looking, and it stays missing.
    await waitFor(
      () =>
        s.daemon.logs.lines.slice(logFrom).filter((l) => l.event === 'inbox_consumer_missing').length >= 3,
      'the inbox to look again',
      HEAL_WITHIN_MS,
    );
    expect(await consumerExists(s.jsm)).toBe(false);
    expect((await consumerCheck(s)).consumer).toBe(false);

    // The operator re-creates it.
    await provisionStreams(s.jsm, PROVISION);
    await waitFor(
      async () => (await consumerCheck(s)).status === 200,
      'readiness green again',
      HEAL_WITHIN_MS,
    );
    await resultApplied(s, t);
  });
});
