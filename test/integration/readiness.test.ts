/**
 * `/readyz` follows the dependencies: a daemon whose PostgreSQL and NATS connections go through TCP
 * proxies the test cuts and restores. Readiness turns red within seconds naming the part that
 * failed, and green again once it is back; `/healthz` answers 200 all along. `/metrics` carries the
 * same checks as `recognition_ready{check}` (1 or 0), which the alerting rules read.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TcpProxy } from '../helpers/tcpProxy.js';
import { waitFor, type TestDaemon } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true, nats: true });
let pgProxy: TcpProxy;
let natsProxy: TcpProxy;
let daemon: TestDaemon;
let base: string;

/** Readiness must change within this bound: "within seconds" of an outage or a recovery. */
const WITHIN_MS = 10_000;

beforeAll(async () => {
  const pgTarget = new URL(t.url);
  pgProxy = await t.proxy({ host: pgTarget.hostname, port: Number(pgTarget.port || 5432) });
  natsProxy = await t.proxy({ host: '127.0.0.1', port: t.nats.port });
  const proxiedDb = new URL(t.url);
  proxiedDb.hostname = '127.0.0.1';
  proxiedDb.port = String(pgProxy.port);
  daemon = await t.startDaemon({
    databaseUrl: proxiedDb.toString(),
    natsUrl: `nats://127.0.0.1:${natsProxy.port}`,
    env: { LOG_LEVEL: 'info', WATCHDOG_INTERVAL_MS: '500', PUBLISHER_POLL_INTERVAL_MS: '500' },
    loops: { inbox: true, watchdog: true, publisher: true, deadLetters: true, http: true },
  });
  base = `http://127.0.0.1:${daemon.http!.port}`;
});

afterAll(() => {
  // The daemon stops after this, through the proxies.
  pgProxy?.restore();
  natsProxy?.restore();
});

interface Readiness {
  status: number;
  body: { ready: boolean; checks: Record<string, boolean>; reasons?: Record<string, string> };
}

async function readyz(): Promise<Readiness> {
  const res = await fetch(`${base}/readyz`);
  return { status: res.status, body: (await res.json()) as Readiness['body'] };
}

/** Poll /readyz (and check /healthz each time) until `want` holds; returns the matching answer. */
async function readinessUntil(want: (r: Readiness) => boolean, what: string): Promise<Readiness> {
  return waitFor(
    async () => {
      const health = await fetch(`${base}/healthz`);
      expect(health.status).toBe(200);
      const r = await readyz();
      return want(r) ? r : undefined;
    },
    what,
    WITHIN_MS,
  );
}

/** `recognition_ready{check}` from /metrics: check → value. */
async function readyGauge(): Promise<Record<string, number>> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^recognition_ready\{check="([a-z_]+)"\} (\S+)$/gm))
    out[m[1]!] = Number(m[2]);
  return out;
}

describe('/readyz', () => {
  it('is ready when the database, NATS and the consumer are', async () => {
    const r = await readinessUntil((x) => x.status === 200, 'ready at start');
    expect(r.body).toEqual({
      ready: true,
      checks: { database: true, nats: true, commits: true, consumer: true },
    });
    expect(await readyGauge()).toEqual({ database: 1, nats: 1, commits: 1, consumer: 1 });
  });

  it('says database false within seconds when PostgreSQL becomes unreachable, and recovers', async () => {
    const cutAt = Date.now();
    pgProxy.cut();
    const red = await readinessUntil((x) => x.status === 503, 'not ready after cutting PostgreSQL');
    expect(Date.now() - cutAt).toBeLessThan(WITHIN_MS);
    expect(red.body.ready).toBe(false);
    expect(red.body.checks.database).toBe(false);
    expect(red.body.reasons?.database).toBeTruthy();
    expect(red.body.checks.nats).toBe(true);
    const gauge = await waitFor(
      async () => {
        const g = await readyGauge();
        return g.database === 0 ? g : undefined;
      },
      'recognition_ready{check="database"} 0',
      WITHIN_MS,
    );
    expect(gauge.nats).toBe(1);

    pgProxy.restore();
    const green = await readinessUntil((x) => x.status === 200, 'ready after restoring PostgreSQL');
    expect(green.body.checks).toMatchObject({ database: true, nats: true, consumer: true });
    await waitFor(
      async () => (await readyGauge()).database === 1,
      'recognition_ready{check="database"} 1 again',
      WITHIN_MS,
    );
  });

  it('says nats false within seconds when NATS becomes unreachable, and recovers', async () => {
    const cutAt = Date.now();
    natsProxy.cut();
    const red = await readinessUntil(
      (x) => x.status === 503 && x.body.checks.nats === false,
      'not ready after cutting NATS',
    );
    expect(Date.now() - cutAt).toBeLessThan(WITHIN_MS);
    expect(red.body.checks.database).toBe(true);
    expect(daemon.logs.lines.some((l) => l.event === 'nats_disconnected')).toBe(true);

    natsProxy.restore();
    const green = await readinessUntil((x) => x.status === 200, 'ready after restoring NATS');
    expect(green.body.checks).toMatchObject({ database: true, nats: true, consumer: true });
  });

  it('says nats false while the NATS server is down (killed), and recovers when it restarts', async () => {
    await t.nats.kill();
    await readinessUntil(
      (x) => x.status === 503 && x.body.checks.nats === false,
      'not ready with NATS killed',
    );
    await t.nats.restart();
    const green = await readinessUntil((x) => x.status === 200, 'ready after NATS restarted');
    expect(green.body.ready).toBe(true);
  });

  it('reports both when both are gone', async () => {
    pgProxy.cut();
    natsProxy.cut();
    const red = await readinessUntil(
      (x) => x.body.checks.database === false && x.body.checks.nats === false,
      'both parts red',
    );
    expect(red.status).toBe(503);
    pgProxy.restore();
    natsProxy.restore();
    await readinessUntil((x) => x.status === 200, 'ready after restoring both');
  });
});
