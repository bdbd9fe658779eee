import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { connect, PermissionViolationError, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, StorageType } from '@nats-io/jetstream';

import {
  startNatsCluster,
  startNatsServer,
  type NatsServerHandle,
} from '../../workshop/localServers/natsServer.js';

const enc = new TextEncoder();

/** Connections opened by a test; closed after it. */
const open: NatsConnection[] = [];
async function conn(opts: Parameters<typeof connect>[0]): Promise<NatsConnection> {
  const nc = await connect(opts);
  open.push(nc);
  return nc;
}
afterEach(async () => {
  await Promise.all(open.splice(0).map((nc) => nc.close().catch(() => undefined)));
});

/** Servers started by this file; cleaned up at the end even when a test fails. */
const servers: { cleanup(): Promise<void> }[] = [];
afterAll(async () => {
  await Promise.all(servers.map((s) => s.cleanup()));
});
async function server(opts?: Parameters<typeof startNatsServer>[0]): Promise<NatsServerHandle> {
  const s = await startNatsServer(opts);
  servers.push(s);
  return s;
}

describe('startNatsServer', () => {
  it('runs JetStream on a private loopback port, dedups by Nats-Msg-Id and keeps streams across kill + restart', async () => {
    const s = await server();
    expect(s.port).not.toBe(4222);
    expect(s.url).toBe(`nats://127.0.0.1:${s.port}`);

    let nc = await conn({ servers: s.url });
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: 'JOBS', subjects: ['jobs.>'], storage: StorageType.File });
    const js = jetstream(nc);
    const first = await js.publish('jobs.a', enc.encode('one'), { msgID: 'job-1' });
    const second = await js.publish('jobs.a', enc.encode('one'), { msgID: 'job-1' });
    expect(first.duplicate).toBe(false);
    expect(second.duplicate).toBe(true);
    expect(second.seq).toBe(first.seq);
    await nc.close();

    await s.kill();
    expect(s.isRunning()).toBe(false);
    await expect(connect({ servers: s.url, reconnect: false, timeout: 1_000 })).rejects.toThrow();

    await s.restart();
    expect(s.isRunning()).toBe(true);
    nc = await conn({ servers: s.url });
    const info = await (await jetstreamManager(nc)).streams.info('JOBS');
    expect(info.config.subjects).toEqual(['jobs.>']);
    expect(info.state.messages).toBe(1);
    // The dedup window survives the crash too.
    const third = await jetstream(nc).publish('jobs.a', enc.encode('one'), { msgID: 'job-1' });
    expect(third.duplicate).toBe(true);
  });

  it('stop() is graceful and restart() brings the same server back', async () => {
    const s = await server();
    await s.stop();
    await s.stop(); // idempotent
    await s.restart();
    const nc = await conn({ servers: s.url });
    await expect((await jetstreamManager(nc)).getAccountInfo()).resolves.toBeDefined();
  });

  it('user/password: rejects a connection without credentials and accepts one with them', async () => {
    const s = await server({ user: 'core', password: 's3cret' });
    await expect(connect({ servers: s.url, reconnect: false, timeout: 2_000 })).rejects.toThrow(
      /authorization/i,
    );
    await expect(
      connect({ servers: s.url, user: 'core', pass: 'wrong', reconnect: false, timeout: 2_000 }),
    ).rejects.toThrow(/authorization/i);
    const nc = await conn({ servers: s.url, user: 'core', pass: 's3cret' });
    await expect(nc.flush()).resolves.toBeUndefined();
  });

  it('token: rejects a connection without the token and accepts one with it', async () => {
    const s = await server({ token: 't0ken' });
    await expect(connect({ servers: s.url, reconnect: false, timeout: 2_000 })).rejects.toThrow(
      /authorization/i,
    );
    const nc = await conn({ servers: s.url, token: 't0ken' });
    await expect(nc.flush()).resolves.toBeUndefined();
  });

  it('configText: an authorization block with permissions is enforced', async () => {
    const s = await server({
      configText: [
        'authorization {',
        '  users: [',
        '    { user: "worker", password: "w", permissions: { publish: { allow: ["ok.>"] }, subscribe: { allow: ["ok.>", "_INBOX.>"] } } }',
        '  ]',
        '}',
      ].join('\n'),
    });
    const nc = await conn({ servers: s.url, user: 'worker', pass: 'w' });
    const denied = nc.subscribe('secret.>');
    const closed = await denied.closed;
    expect(closed).toBeInstanceOf(PermissionViolationError);
    const allowed = nc.subscribe('ok.>', { max: 1 });
    nc.publish('ok.x', enc.encode('hi'));
    for await (const m of allowed) expect(m.string()).toBe('hi');
  });

  it.skipIf(!existsSync('/usr/bin/openssl'))('tls: serves TLS with the given certificate', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'nats-tls-'));
    try {
      const cert = join(dir, 'cert.pem');
      const key = join(dir, 'key.pem');
      const subject = ['-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost'];
      execFileSync(
        'openssl',
        [
          'req',
          '-x509',
          '-newkey',
          'rsa:2048',
          '-nodes',
          '-days',
          '1',
          ...subject,
          '-keyout',
          key,
          '-out',
          cert,
        ],
        { stdio: 'ignore' },
      );
      const s = await server({ tls: { cert, key } });
      const nc = await conn({ servers: s.url, tls: { caFile: cert } });
      await expect(nc.flush()).resolves.toBeUndefined();
      expect(nc.info?.tls_required).toBe(true);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('startNatsCluster', () => {
  it('forms a 3-node JetStream cluster that survives losing one node', async () => {
    const cluster = await startNatsCluster(3);
    servers.push(cluster);
    expect(cluster.urls).toHaveLength(3);
    expect(new Set(cluster.urls).size).toBe(3);

    const nc = await conn({ servers: cluster.urls });
    const jsm = await jetstreamManager(nc);
    const si = await jsm.streams.add({ name: 'R3', subjects: ['r3.>'], num_replicas: 3 });
    expect(si.config.num_replicas).toBe(3);
    const js = jetstream(nc);
    await js.publish('r3.a', enc.encode('1'), { msgID: 'm1' });

    // Kill a follower the client is not connected to (no leader election needed): the stream still accepts
    // writes with 2 of 3 replicas.
    const connectedPort = Number(new URL(`nats://${nc.getServer()}`).port);
    const leader = (await jsm.streams.info('R3')).cluster?.leader;
    const victim = cluster.servers.find((s) => s.port !== connectedPort && s.serverName !== leader)!;
    await victim.kill();
    const deadline = Date.now() + 20_000;
    let ack: Awaited<ReturnType<typeof js.publish>> | undefined;
    while (!ack) {
      try {
        ack = await js.publish('r3.a', enc.encode('2'), { msgID: 'm2', timeout: 2_000 });
      } catch (err) {
        if (Date.now() > deadline) throw err;
      }
    }
    expect(ack.duplicate).toBe(false);
    await victim.restart();
  });
});
