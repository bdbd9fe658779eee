/**
 * The NATS permissions of the shipped configuration (deploy/nats/recognition.conf, whose
 * authorization block docs/nats-permissions.md shows), on the real nats-server started as compose
 * starts it (test/helpers/composeNats.ts), with the daemon as the core user:
 * - the core provisions the streams, publishes jobs, applies envelopes, and turns the
 *   max-deliveries advisory the server sends into `dlq`;
 * - the reference service, run by the CLI as compose runs it, takes a job, acks it and answers;
 * - no user of the file may publish on `$JS.EVENT.>`: a forged advisory is refused by the server
 *   and reaches no subscriber;
 * - the service may not publish jobs, read another service's jobs (subscription, consumer, stream
 *   reads), nor manage streams or consumers (purge, delete, update);
 * - what permissions cannot bind: the `service.name` of a payload; the core's check does.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { nanos, PermissionViolationError, type NatsConnection } from '@nats-io/nats-core';
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  INBOX_CONSUMER,
  JOBS_STREAM,
  RESULTS_STREAM,
  RESULT_SUBJECT,
  maxDeliveriesAdvisory,
  serviceInboxPrefix,
} from '../../src/nats/subjects.js';
import { spawnCli } from '../helpers/cliProcess.js';
import { startComposeNats, type ComposeNats } from '../helpers/composeNats.js';
import { insertJob, loadAll } from '../helpers/fixtures.js';
import { waitFor } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';

const SERVICE = 'tabular-parser';
const CORE = 'recognition-core';

let server: ComposeNats | undefined;
// Registered before the harness's hooks, so it runs after them: the daemon and the connections
// are gone before the server stops.
afterAll(async () => {
  await server?.stop();
});
const t = useHarness({ database: true });

let coreConn: NatsConnection;
let svcConn: NatsConnection;
/** The permission violations the server reported to each connection. */
const violations = new Map<NatsConnection, PermissionViolationError[]>();

async function connectAs(user: string): Promise<NatsConnection> {
  const nc = await t.connect({
    servers: server!.url,
    user,
    pass: server!.password(user),
    ...(user === CORE ? {} : { inboxPrefix: serviceInboxPrefix(user) }),
  });
  const seen: PermissionViolationError[] = [];
  violations.set(nc, seen);
  void (async () => {
    for await (const st of nc.status())
      if (st.type === 'error' && st.error instanceof PermissionViolationError) seen.push(st.error);
  })();
  return nc;
}

const refusedPublish = (nc: NatsConnection, subject: string) =>
  waitFor(
    () => violations.get(nc)!.some((v) => v.operation === 'publish' && v.subject === subject),
    `the publish on ${subject} refused`,
    5_000,
  );

beforeAll(async () => {
  server = await startComposeNats();
  // The core as compose runs it: its user, its password from the secret file.
  await t.startDaemon({
    natsUrl: server.url,
    env: {
      NATS_USER: CORE,
      NATS_PASSWORD_FILE: join(server.secretsDir, 'nats-core-password'),
      PUBLISHER_POLL_INTERVAL_MS: '200',
    },
    loops: { inbox: true, publisher: true, watchdog: false, deadLetters: true, http: false },
  });
  coreConn = await connectAs(CORE);
  svcConn = await connectAs(SERVICE);
});

describe('the shipped NATS configuration', () => {
  it('the core: a job message its service pulled and never acked ends dlq through the advisory the server sends', async () => {
    // The service's own durable, created by the service, giving up after two deliveries.
    await (
      await jetstreamManager(svcConn)
    ).consumers.add(JOBS_STREAM, {
      durable_name: SERVICE,
      filter_subject: `recognition.job.${SERVICE}`,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      ack_wait: nanos(1_000),
      max_deliver: 2,
    });
    const messages = await (await jetstream(svcConn).consumers.get(JOBS_STREAM, SERVICE)).consume();
    const deliveries: number[] = [];
    void (async () => {
      for await (const m of messages) deliveries.push(m.info.deliveryCount);
    })();
    try {
      const job = await insertJob(t.db, { status: 'pending' });
      await waitFor(
        async () => (await loadAll(t.db, job.jobId)).job.status === 'dlq',
        'the job dead-lettered',
        20_000,
      );
      const { job: row, file } = await loadAll(t.db, job.jobId);
      expect(row.error_code).toBe('MAX_DELIVERIES');
      expect(file.status).toBe('ERROR');
      expect(deliveries).toEqual([1, 2]);
    } finally {
      messages.stop();
    }
    // The reference service below creates its durable as it ships.
    await (await jetstreamManager(coreConn)).consumers.delete(JOBS_STREAM, SERVICE);
    expect(violations.get(svcConn)).toEqual([]);
    expect(violations.get(coreConn)).toEqual([]);
  });

  it('the reference service, run as compose runs it, takes its job, acks it and answers', async () => {
    const service = spawnCli(['service', SERVICE, '--weights', 'done=1', '--delay', '20'], {
      NATS_URL: server!.url,
      NATS_USER: SERVICE,
      NATS_PASSWORD_FILE: join(server!.secretsDir, 'nats-service-password'),
      LOG_LEVEL: 'info',
      LOG_PRETTY: 'false',
    });
    try {
      await service.waitForLog((l) => l.event === 'ready', 20_000);
      const job = await insertJob(t.db, { status: 'pending' });
      await waitFor(
        async () => (await loadAll(t.db, job.jobId)).job.status === 'done',
        'the job done through the limited service',
        30_000,
      );
      const { job: row, transitions } = await loadAll(t.db, job.jobId);
      expect(row.service_name).toBe(SERVICE);
      expect(transitions.map((x) => x.to_status)).toEqual(['published', 'processing', 'done']);
    } finally {
      service.child.kill('SIGTERM');
    }
    expect(await service.exited, service.output()).toEqual({ code: 0, signal: null });
    expect(service.output()).not.toMatch(/Permissions Violation/i);
  });

  it('no user of the file may publish on $JS.EVENT.>: a forged advisory is refused and reaches no one', async () => {
    const job = await insertJob(t.db, { status: 'published' });
    const seq = (await (await jetstreamManager(coreConn)).streams.info(JOBS_STREAM)).state.last_seq;
    const heard: string[] = [];
    const listener = coreConn.subscribe('$JS.EVENT.>', {
      callback: (_e, m) => {
        heard.push(m.subject);
      },
    });
    await coreConn.flush();
    const forged = maxDeliveriesAdvisory(JOBS_STREAM, { consumer: SERVICE });
    const body = JSON.stringify({
      type: 'io.nats.jetstream.advisory.v1.max_deliver',
      stream: JOBS_STREAM,
      consumer: SERVICE,
      stream_seq: seq,
      deliveries: 5,
    });
    expect(server!.users).toEqual([CORE, SERVICE]);
    for (const user of server!.users) {
      const nc = user === CORE ? coreConn : user === SERVICE ? svcConn : await connectAs(user);
      for (const subject of [forged, `$JS.EVENT.METRIC.CONSUMER.ACK.${JOBS_STREAM}.${SERVICE}`]) {
        nc.publish(subject, body);
        await nc.flush();
        await refusedPublish(nc, subject);
      }
    }
    // A message the server let through would have reached the listener before this round trip.
    await coreConn.flush();
    listener.unsubscribe();
    expect(heard.filter((s) => s === forged || s.startsWith('$JS.EVENT.METRIC'))).toEqual([]);
    expect((await loadAll(t.db, job.jobId)).job.status).toBe('published');
  });

  it("the service may not publish jobs, read other services' jobs, nor manage streams and consumers", async () => {
    const jsm = await jetstreamManager(coreConn);
    const jobsBefore = (await jsm.streams.info(JOBS_STREAM)).state;
    const resultsBefore = (await jsm.streams.info(RESULTS_STREAM)).state;
    // A job of another service, in the stream.
    await jetstream(coreConn).publish('recognition.job.ocr', JSON.stringify({ job_id: randomUUID() }));
    const js = jetstream(svcConn);
    const svcJsm = await jetstreamManager(svcConn);
    const denied = /Permissions Violation for Publish/;

    // Publishing job messages, through JetStream or plainly.
    await expect(js.publish(`recognition.job.${SERVICE}`, '{}')).rejects.toThrow(denied);
    await expect(js.publish('recognition.job.ocr', '{}')).rejects.toThrow(denied);
    svcConn.publish('recognition.job.ocr', '{}');
    await svcConn.flush();
    await refusedPublish(svcConn, 'recognition.job.ocr');

    // Subscribing to what is not its own.
    // (The core's advisories among them: a subscriber in its queue group would take them away.)
    for (const subject of [
      'recognition.job.ocr',
      'recognition.job.>',
      RESULT_SUBJECT,
      '_INBOX.>',
      '$JS.EVENT.>',
      '>',
    ]) {
      const sub = svcConn.subscribe(subject);
      const closedWith = await sub.closed;
      expect(closedWith, subject).toBeInstanceOf(PermissionViolationError);
      expect((closedWith as PermissionViolationError).operation).toBe('subscription');
    }

    // Reading jobs other than through its own consumer: another consumer, a consumer of its own
    // name on every job subject, the inbox's consumer, messages straight from the stream.
    const consumer = (name: string, filter: string) =>
      svcJsm.consumers.add(JOBS_STREAM, {
        durable_name: name,
        filter_subject: filter,
        ack_policy: AckPolicy.Explicit,
      });
    await expect(consumer('ocr', 'recognition.job.ocr')).rejects.toThrow(denied);
    await expect(consumer(SERVICE, 'recognition.job.>')).rejects.toThrow(denied);
    await expect(js.consumers.get(RESULTS_STREAM, INBOX_CONSUMER)).rejects.toThrow(denied);
    await expect(svcJsm.streams.getMessage(JOBS_STREAM, { seq: jobsBefore.last_seq })).rejects.toThrow(
      denied,
    );
    await expect(
      svcConn.request(`$JS.API.DIRECT.GET.${JOBS_STREAM}`, JSON.stringify({ seq: jobsBefore.last_seq })),
    ).rejects.toThrow(denied);

    // Managing streams and consumers.
    await expect(svcJsm.streams.purge(JOBS_STREAM)).rejects.toThrow(denied);
    await expect(svcJsm.streams.purge(RESULTS_STREAM)).rejects.toThrow(denied);
    await expect(svcJsm.streams.delete(JOBS_STREAM)).rejects.toThrow(denied);
    await expect(svcJsm.streams.update(RESULTS_STREAM, { max_age: nanos(1_000) })).rejects.toThrow(denied);
    await expect(svcJsm.consumers.delete(RESULTS_STREAM, INBOX_CONSUMER)).rejects.toThrow(denied);
    await expect(svcJsm.consumers.delete(JOBS_STREAM, SERVICE)).rejects.toThrow(denied);

    // Nothing of it had an effect.
    const jobsAfter = (await jsm.streams.info(JOBS_STREAM)).state;
    expect(jobsAfter.messages).toBe(jobsBefore.messages + 1);
    expect((await jsm.streams.info(RESULTS_STREAM)).state.messages).toBe(resultsBefore.messages);
    expect((await jsm.streams.info(RESULTS_STREAM)).config.max_age).toBe(nanos(7 * 24 * 3600 * 1000));
    expect((await jsm.consumers.list(JOBS_STREAM).next()).map((c) => c.name)).toEqual([SERVICE]);
    expect((await jsm.consumers.list(RESULTS_STREAM).next()).map((c) => c.name)).toEqual([INBOX_CONSUMER]);
  });

  it("what permissions cannot bind: service.name in a payload; the core's target_service check does", async () => {
    const refusedBefore = violations.get(svcConn)!.length;
    const own = await insertJob(t.db, { status: 'published' });
    const ocrJob = await insertJob(t.db, { status: 'published', target_service: 'ocr' });
    const js = jetstream(svcConn);
    const envelope = (jobId: string, name: string) =>
      JSON.stringify({ job_id: jobId, status: 'processing', service: { name, version: '1' } });

    // NATS accepts both: the user may publish on recognition.result, whatever the payload says.
    await js.publish(RESULT_SUBJECT, envelope(own.jobId, 'ocr'), { msgID: `ack:${own.jobId}:1` });
    await js.publish(RESULT_SUBJECT, envelope(ocrJob.jobId, 'ocr'), { msgID: `ack:${ocrJob.jobId}:1` });

    // The core quarantines the envelope whose name is not its job's target_service …
    const row = await waitFor(
      () =>
        t.db.selectFrom('inbox_quarantine').selectAll().where('job_id', '=', own.jobId).executeTakeFirst(),
      'the mismatching envelope quarantined',
    );
    expect(row).toMatchObject({
      reason: 'SERVICE_MISMATCH',
      details: expect.objectContaining({ expected: SERVICE, got: 'ocr' }),
    });
    expect((await loadAll(t.db, own.jobId)).job.status).toBe('published');
    // … but a user allowed to publish envelopes can still claim another service's name for that
    // service's job: the name is not bound to the NATS user (docs/nats-permissions.md).
    await waitFor(
      async () => (await loadAll(t.db, ocrJob.jobId)).job.status === 'processing',
      "the other service's job acked under its name",
    );
    expect(violations.get(svcConn)!.length).toBe(refusedBefore);
  });
});
