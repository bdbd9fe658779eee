/**
 * No secret ever reaches the output: the real CLI with a password in DATABASE_URL and
 * NATS_PASSWORD set (a nats-server that requires them), errors forced on both connections (the
 * PostgreSQL proxy cut while an envelope waits, the nats-server killed), start-up failures on
 * both (wrong NATS password, PostgreSQL unreachable), every line of stdout and stderr collected:
 * neither secret appears, in any spelling.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertJob } from '../helpers/fixtures.js';
import { spawnCli, runCli, type CliProcess } from '../helpers/cliProcess.js';
import type { TcpProxy } from '../helpers/tcpProxy.js';
import { waitFor } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';

/** With characters that URLs encode, so the encoded spelling is checked too. */
const PG_SECRET = 'pgS3cr3t/Zq9:Lm';
const NATS_SECRET = 'natsS3cr3t-Kw7xV';
const WRONG_NATS_SECRET = 'wrongS3cr3t-Hp2';
const SECRETS = [
  PG_SECRET,
  encodeURIComponent(PG_SECRET),
  NATS_SECRET,
  encodeURIComponent(NATS_SECRET),
  WRONG_NATS_SECRET,
];

const t = useHarness({
  database: true,
  nats: { user: 'core', password: NATS_SECRET },
  client: { user: 'core', pass: NATS_SECRET, maxReconnectAttempts: -1, reconnectTimeWait: 200 },
});
let pgProxy: TcpProxy;
/** Every line every CLI run printed, both streams. */
const allOutput: string[] = [];
const children: CliProcess[] = [];

/** DATABASE_URL through the proxy, with a password (PostgreSQL here trusts, so any password works). */
function databaseUrl(): string {
  const u = new URL(t.url);
  u.username = 'postgres';
  u.password = encodeURIComponent(PG_SECRET);
  u.hostname = '127.0.0.1';
  u.port = String(pgProxy.port);
  return u.toString();
}

const env = (natsPassword = NATS_SECRET) => ({
  DATABASE_URL: databaseUrl(),
  NATS_URL: t.nats.url,
  NATS_USER: 'core',
  NATS_PASSWORD: natsPassword,
  HTTP_HOST: '127.0.0.1',
  HTTP_PORT: '0',
  LOG_LEVEL: 'debug',
  // A nak lost while NATS is down leaves the envelope to the ack wait: keep that short.
  INBOX_ACK_WAIT_MS: '3000',
});

beforeAll(async () => {
  const target = new URL(t.url);
  pgProxy = await t.proxy({ host: target.hostname, port: Number(target.port || 5432) });
});

afterAll(async () => {
  for (const c of children) if (c.child.exitCode === null) c.child.kill('SIGKILL');
});

describe('secrets never reach the output', () => {
  it('while the daemon runs through database and NATS failures', async () => {
    expect(databaseUrl()).toContain(encodeURIComponent(PG_SECRET));
    const cli = spawnCli(['start'], env());
    children.push(cli);
    const started = await cli.waitForLog((l) => l.event === 'started');
    const port = Number(started.http_port);

    // Work goes through while everything is up.
    const job = await insertJob(t.db, { status: 'published' });
    await t.svc.ack(job);
    await cli.waitForLog((l) => l.job_id === job.jobId && l.decision === 'applied');

    // PostgreSQL unreachable while an envelope waits: the inbox fails and retries, readiness red.
    pgProxy.cut();
    await t.svc.done(job);
    await cli.waitForLog((l) => l.event === 'batch_retry' && l.level === 'warn');
    expect((await fetch(`http://127.0.0.1:${port}/readyz`)).status).toBe(503);
    await fetch(`http://127.0.0.1:${port}/metrics`);

    // NATS gone: the client reports the disconnect and keeps trying.
    await t.nats.kill();
    await cli.waitForLog((l) => l.event === 'nats_disconnected');
    await new Promise((r) => setTimeout(r, 1_500)); // a few failed reconnect attempts
    await t.nats.restart();
    await cli.waitForLog((l) => l.event === 'nats_reconnected');
    pgProxy.restore();
    await waitFor(
      async () =>
        (
          await t.db
            .selectFrom('recognition_job')
            .select('status')
            .where('id', '=', job.jobId)
            .executeTakeFirst()
        )?.status === 'done',
      'the result applied once PostgreSQL is back',
      30_000,
    );

    cli.child.kill('SIGTERM');
    expect(await cli.exited).toEqual({ code: 0, signal: null });
    allOutput.push(...cli.lines.map((l) => l.text));
    // The failures really were logged (with their errors), so the check below means something.
    expect(cli.logs().some((l) => l.event === 'batch_retry' && l.err)).toBe(true);
  });

  it('with the NATS credentials inside NATS_URL, through a NATS restart', async () => {
    const { NATS_USER: _u, NATS_PASSWORD: _p, ...rest } = env();
    const u = new URL(t.nats.url);
    u.username = 'core';
    u.password = encodeURIComponent(NATS_SECRET);
    const cli = spawnCli(['start'], { ...rest, NATS_URL: u.toString() });
    children.push(cli);
    await cli.waitForLog((l) => l.event === 'started');
    await t.nats.kill();
    await cli.waitForLog((l) => l.event === 'nats_disconnected');
    await t.nats.restart();
    await cli.waitForLog((l) => l.event === 'nats_reconnected');
    cli.child.kill('SIGTERM');
    expect(await cli.exited).toEqual({ code: 0, signal: null });
    allOutput.push(...cli.lines.map((l) => l.text));
  });

  it('when start fails on a wrong NATS password', async () => {
    const r = await runCli(['start'], env(WRONG_NATS_SECRET));
    expect(r.code, r.output).toBe(1);
    expect(r.stderr).toHaveLength(1);
    expect(r.stderr[0]).toMatch(/authori[sz]ation/i);
    allOutput.push(...r.stdout, ...r.stderr);
  });

  it('when start fails on an unreachable PostgreSQL', async () => {
    pgProxy.cut();
    try {
      const r = await runCli(['start'], env());
      expect(r.code, r.output).toBe(1);
      expect(r.stderr).toHaveLength(1);
      allOutput.push(...r.stdout, ...r.stderr);
    } finally {
      pgProxy.restore();
    }
  });

  it('in none of the lines collected', () => {
    expect(allOutput.length).toBeGreaterThan(10);
    for (const secret of SECRETS) {
      expect(allOutput.filter((line) => line.includes(secret))).toEqual([]);
    }
    // A redacted URL still shows where it pointed.
    expect(allOutput.join('\n')).not.toMatch(/postgres:\/\/postgres:(?!\[REDACTED\])[^@\s]+@/);
  });
});
