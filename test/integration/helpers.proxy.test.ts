import { afterAll, afterEach, describe, expect, it } from 'vitest';
import pg from 'pg';

import { startTcpProxy, type TcpProxy } from '../helpers/tcpProxy.js';
import { useHarness } from '../helpers/harness.js';
import { serverUrl } from '../helpers/pgUrls.js';

/** The test PostgreSQL server (`TEST_PG_URL`, else the machine's 127.0.0.1:5432). Only read from here. */
const pgServer = new URL(serverUrl());
const PG = { host: pgServer.hostname, port: Number(pgServer.port || 5432) };

const clients: pg.Client[] = [];
function pgClient(proxy: TcpProxy): pg.Client {
  const client = new pg.Client({
    host: '127.0.0.1',
    port: proxy.port,
    user: decodeURIComponent(pgServer.username) || 'postgres',
    password: decodeURIComponent(pgServer.password) || undefined,
    database: 'postgres',
    connectionTimeoutMillis: 3_000,
  });
  // A cut connection emits 'error' on an idle client; the test observes failures through query results.
  client.on('error', () => undefined);
  clients.push(client);
  return client;
}

const proxies: TcpProxy[] = [];
async function proxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const p = await startTcpProxy(target);
  proxies.push(p);
  return p;
}

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.end().catch(() => undefined)));
});
afterAll(async () => {
  await Promise.all(proxies.map((p) => p.close()));
});

describe('startTcpProxy', () => {
  it('forwards PostgreSQL, makes it unreachable on cut() and reachable again on restore()', async () => {
    const p = await proxy(PG);
    expect(p.port).not.toBe(PG.port);

    const before = pgClient(p);
    await before.connect();
    const { rows } = await before.query<{ one: number }>('select 1 as one');
    expect(rows).toEqual([{ one: 1 }]);
    expect(p.connectionCount()).toBe(1);

    p.cut();
    expect(p.isCut()).toBe(true);
    expect(p.connectionCount()).toBe(0);
    // The established connection is gone ...
    await expect(before.query('select 1')).rejects.toThrow();
    // ... and new ones cannot get through.
    const during = pgClient(p);
    await expect(during.connect()).rejects.toThrow();

    p.restore();
    expect(p.isCut()).toBe(false);
    const after = pgClient(p);
    await after.connect();
    const again = await after.query<{ two: number }>('select 2 as two');
    expect(again.rows).toEqual([{ two: 2 }]);
  });

  it('close() drops connections and stops listening', async () => {
    const p = await proxy(PG);
    const c = pgClient(p);
    await c.connect();
    await p.close();
    await expect(c.query('select 1')).rejects.toThrow();
    await expect(pgClient(p).connect()).rejects.toThrow(/ECONNREFUSED/);
  });

  describe('with NATS behind it', () => {
    const t = useHarness({ nats: true });

    it('a client reconnects through the proxy after cut() + restore()', async () => {
      const p = await proxy({ host: '127.0.0.1', port: t.nats.port });
      const nc = await t.connect({
        servers: `nats://127.0.0.1:${p.port}`,
        reconnectTimeWait: 100,
        maxReconnectAttempts: -1,
        ignoreClusterUpdates: true,
      });
      const seen: string[] = [];
      const statuses = nc.status();
      void (async () => {
        for await (const s of statuses) seen.push(s.type);
      })();

      p.cut();
      await expect.poll(() => seen.includes('disconnect'), { timeout: 5_000 }).toBe(true);
      await expect(nc.flush()).rejects.toThrow();
      p.restore();
      await expect.poll(() => seen.includes('reconnect'), { timeout: 10_000 }).toBe(true);
      await expect(nc.flush()).resolves.toBeUndefined();
    });
  });
});
