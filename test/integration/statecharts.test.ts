/**
 * The statecharts against real PostgreSQL: the database enforces the chart (migration 0002), a real job's
 * history and a scenario reach the Stately inspector server, and the live `/statechart` page,
 * opened in headless Chromium (Debian's `chromium` package), shows the database's numbers.
 *
 * The inspector tests run the built CLI (`npm run build` first; `npm test` does it).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { networkInterfaces } from 'node:os';
import { fileURLToPath } from 'node:url';
import { sql } from 'kysely';
import type { Browser } from 'playwright-core';
import { Registry } from 'prom-client';
import WebSocket from 'ws';
import { afterAll, describe, expect, it } from 'vitest';
import { JOB_STATUSES, type JobEventInput, type JobStatus } from '../../machines/index.js';
import { applyEvent } from '../../src/step/index.js';
import { startHttpServer, type HttpServer } from '../../src/http/server.js';
import { startHttpFigures, type HttpFigures } from '../../src/http/figures.js';
import { openDb, type Db } from '../../src/db/database.js';
import { createLogger } from '../../src/logger.js';
import { legalEdges } from '../../src/statecharts/machineGraph.js';
import { createStatechartRoutes } from '../../src/statecharts/livePage.js';
import { launchChromium } from '../helpers/browser.js';
import { insertJob } from '../helpers/fixtures.js';
import { freePort } from '../../workshop/localServers/freePort.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true });
const CLI = fileURLToPath(new URL('../../bin/recognition-core.js', import.meta.url));
const BUILT = fileURLToPath(new URL('../../dist/src/cli.js', import.meta.url));
const SCENARIOS = fileURLToPath(new URL('../../visualizations/scenarios/', import.meta.url));
const service = { name: 'tabular-parser', version: '2.3.1' };

const children: ChildProcess[] = [];
afterAll(() => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
});

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/** The built CLI as a child process, its output collected. */
function runCli(args: string[], env: Record<string, string> = {}) {
  if (!existsSync(BUILT))
    throw new Error('the CLI is not built: run `npm run build` before the integration tests');
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/tmp', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let out = '';
  child.stdout!.setEncoding('utf8').on('data', (c: string) => (out += c));
  child.stderr!.setEncoding('utf8').on('data', (c: string) => (out += c));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    exited,
    output: () => out,
    /** Resolves with the first match of `re` in the output so far or to come. */
    async waitFor(re: RegExp, timeoutMs = 20_000): Promise<RegExpMatchArray> {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const m = out.match(re);
        if (m) return m;
        if (child.exitCode !== null)
          throw new Error(`the CLI exited (${child.exitCode}) before printing ${re}:\n${out}`);
        if (Date.now() > until) throw new Error(`timed out waiting for ${re}:\n${out}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
  };
}

interface InspectionMessage {
  type: '@xstate.actor' | '@xstate.event' | '@xstate.snapshot';
  sessionId: string;
  snapshot?: { value?: string; context?: Record<string, unknown> };
  event?: { type: string } & Record<string, unknown>;
  definition?: string;
}

/** Connect to the inspection server as a viewer would; resolves with the first `n` events it relays. */
function receiveInspection(
  url: string,
  n: number,
  timeoutMs = 10_000,
  origin?: string,
): Promise<InspectionMessage[]> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, origin ? { origin } : {});
    const got: InspectionMessage[] = [];
    const timer = setTimeout(() => {
      ws.terminate();
      reject(new Error(`received ${got.length} of ${n} inspection events`));
    }, timeoutMs);
    ws.on('message', (data) => {
      got.push(JSON.parse(String(data)) as InspectionMessage);
      if (got.length === n) {
        clearTimeout(timer);
        ws.close();
        resolve(got);
      }
    });
    ws.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

/** Jobs per status, every status present. */
async function jobCounts(): Promise<Record<JobStatus, number>> {
  const rows = await t.db
    .selectFrom('recognition_job')
    .select(['status', sql<string>`count(*)`.as('n')])
    .groupBy('status')
    .execute();
  const counts = Object.fromEntries(JOB_STATUSES.map((s) => [s, 0])) as Record<JobStatus, number>;
  for (const r of rows) counts[r.status] = Number(r.n);
  return counts;
}

const ack = (jobId: string): JobEventInput => ({
  type: 'ENVELOPE_PROCESSING',
  msgId: `ack:${jobId}`,
  service,
});
const done = (jobId: string): JobEventInput => ({
  type: 'ENVELOPE_RESULT',
  msgId: `result:${jobId}`,
  status: 'done',
  service,
});

// ---------------------------------------------------------------------------------------------
// The database enforces the chart
// ---------------------------------------------------------------------------------------------

describe('recognition_job_edge and its trigger (migration 0002)', () => {
  it("holds exactly the machine's legal edges", async () => {
    const rows = await t.db
      .selectFrom('recognition_job_edge')
      .selectAll()
      .orderBy('from_status')
      .orderBy('to_status')
      .execute();
    expect(rows.map((r) => ({ from: r.from_status, to: r.to_status }))).toEqual(legalEdges());
  });

  it('accepts every legal edge made directly in SQL', async () => {
    for (const { from, to } of legalEdges()) {
      const { jobId } = await insertJob(t.db, { status: from as JobStatus });
      await sql`UPDATE recognition_job SET status = ${to} WHERE id = ${jobId}`.execute(t.db);
      const row = await t.db
        .selectFrom('recognition_job')
        .select('status')
        .where('id', '=', jobId)
        .executeTakeFirstOrThrow();
      expect(row.status, `${from} → ${to}`).toBe(to);
    }
  });

  it('rejects every other status change made directly in SQL (check_violation, a clear message)', async () => {
    const legal = new Set(legalEdges().map((e) => `${e.from}>${e.to}`));
    let rejected = 0;
    for (const from of JOB_STATUSES) {
      for (const to of JOB_STATUSES) {
        if (from === to || legal.has(`${from}>${to}`)) continue;
        const { jobId } = await insertJob(t.db, { status: from });
        const attempt = sql`UPDATE recognition_job SET status = ${to} WHERE id = ${jobId}`.execute(t.db);
        await expect(attempt, `${from} → ${to}`).rejects.toMatchObject({
          code: '23514',
          message: `illegal recognition_job status change ${from} -> ${to} (job ${jobId})`,
        });
        const row = await t.db
          .selectFrom('recognition_job')
          .select('status')
          .where('id', '=', jobId)
          .executeTakeFirstOrThrow();
        expect(row.status).toBe(from);
        rejected++;
      }
    }
    expect(rejected).toBe(JOB_STATUSES.length * (JOB_STATUSES.length - 1) - legalEdges().length);
  });

  it('lets through updates that keep the status: other columns, SET status = status, a publish retry', async () => {
    const { jobId } = await insertJob(t.db, { status: 'done' });
    await sql`UPDATE recognition_job SET status = status, error_message = 'annotated' WHERE id = ${jobId}`.execute(
      t.db,
    );
    const { jobId: pending } = await insertJob(t.db, { status: 'pending' });
    const outcome = await applyEvent(t.db, pending, {
      type: 'PUBLISH_FAILED',
      error: 'no JetStream ack',
      policy: { maxAttempts: 5, baseDelayMs: 1_000, maxDelayMs: 60_000 },
    });
    expect(outcome).toMatchObject({ decision: 'applied', from: 'pending', to: 'pending' });
  });
});

// ---------------------------------------------------------------------------------------------
// The Stately inspector
// ---------------------------------------------------------------------------------------------

describe('the Stately inspector', () => {
  it('jobs history --inspect replays pending → published → processing → done, in order', async () => {
    const { jobId } = await insertJob(t.db, { status: 'pending' });
    await applyEvent(t.db, jobId, { type: 'PUBLISHED', replyTimeoutMs: 600_000 });
    await applyEvent(t.db, jobId, ack(jobId));
    await applyEvent(t.db, jobId, done(jobId));

    const port = await freePort();
    const cli = runCli(['jobs', 'history', jobId, '--inspect', '--inspect-port', String(port)], {
      DATABASE_URL: t.url,
    });
    const [, count] = await cli.waitFor(/Sent (\d+) inspection events/);
    expect(cli.output()).toContain(`open http://127.0.0.1:${port} in a browser`);
    expect(Number(count)).toBe(1 + 2 * 3);

    const events = await receiveInspection(`ws://127.0.0.1:${port}`, Number(count));
    expect(events.every((e) => e.sessionId === jobId)).toBe(true);
    expect(events[0]).toMatchObject({ type: '@xstate.actor', snapshot: { value: 'pending' } });
    expect(JSON.parse(events[0]!.definition!)).toMatchObject({ id: 'recognitionJob', initial: 'pending' });
    expect(events.filter((e) => e.type === '@xstate.event').map((e) => e.event!.type)).toEqual([
      'PUBLISHED',
      'ENVELOPE_PROCESSING',
      'ENVELOPE_RESULT',
    ]);
    expect(events.filter((e) => e.type === '@xstate.snapshot').map((e) => e.snapshot!.value)).toEqual([
      'published',
      'processing',
      'done',
    ]);
    expect(events.map((e) => e.type)).toEqual([
      '@xstate.actor',
      ...Array.from({ length: 3 }, () => ['@xstate.event', '@xstate.snapshot'] as const).flat(),
    ]);

    // Ctrl-C stops it cleanly.
    cli.child.kill('SIGINT');
    expect(await cli.exited).toBe(0);
  });

  it('simulate --inspect sends the scenario run to a local WebSocket client', async () => {
    const port = await freePort();
    const cli = runCli([
      'simulate',
      `${SCENARIOS}happy-path.json`,
      '--json',
      '--inspect',
      '--inspect-port',
      String(port),
    ]);
    const [, count] = await cli.waitFor(/Sent (\d+) inspection events/);
    const events = await receiveInspection(`ws://127.0.0.1:${port}`, Number(count));
    expect(events[0]).toMatchObject({
      type: '@xstate.actor',
      sessionId: 'simulate:happy-path',
      snapshot: { value: 'pending' },
    });
    expect(events.filter((e) => e.type === '@xstate.snapshot').map((e) => e.snapshot!.value)).toEqual([
      'published',
      'processing',
      'done',
    ]);
    expect(events.filter((e) => e.type === '@xstate.event').map((e) => e.event!.type)).toEqual([
      'PUBLISHED',
      'ENVELOPE_PROCESSING',
      'ENVELOPE_RESULT',
    ]);
    cli.child.kill('SIGINT');
    expect(await cli.exited).toBe(0);
    // With --json, stdout is the trace alone: the instructions went to stderr.
    expect(cli.output()).toContain('"scenario": "happy-path"');
  });

  // Held events are jobs' contexts (file ids, services, error messages): not for the network.
  const nonLoopback = Object.values(networkInterfaces())
    .flat()
    .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;

  it('the server listens on loopback only and serves the page that embeds the hosted inspector', async () => {
    const port = await freePort();
    const cli = runCli([
      'simulate',
      `${SCENARIOS}happy-path.json`,
      '--inspect',
      '--inspect-port',
      String(port),
    ]);
    const [, count] = await cli.waitFor(/Sent (\d+) inspection events/);
    const page = await fetch(`http://127.0.0.1:${port}/`);
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain('<iframe id="inspector" src="https://stately.ai/inspect">');
    expect(html).toContain(`new WebSocket("ws://127.0.0.1:${port}")`);
    // A page opened after the run still gets all of it.
    expect(await receiveInspection(`ws://127.0.0.1:${port}`, Number(count))).toHaveLength(Number(count));
    // So does a client claiming the page's own origin; a page of any other site is refused.
    expect(
      await receiveInspection(`ws://127.0.0.1:${port}`, Number(count), 10_000, `http://127.0.0.1:${port}`),
    ).toHaveLength(Number(count));
    await expect(
      receiveInspection(`ws://127.0.0.1:${port}`, 1, 5_000, 'https://example.com'),
    ).rejects.toThrow(/Unexpected server response: 401/);
    cli.child.kill('SIGINT');
    expect(await cli.exited).toBe(0);
  });

  // Skipped (and reported so) on a machine whose only interface is loopback.
  it.skipIf(nonLoopback === undefined)('refuses connections on the machine’s other addresses', async () => {
    const port = await freePort();
    const cli = runCli([
      'simulate',
      `${SCENARIOS}happy-path.json`,
      '--inspect',
      '--inspect-port',
      String(port),
    ]);
    await cli.waitFor(/Sent (\d+) inspection events/);
    await expect(receiveInspection(`ws://${nonLoopback}:${port}`, 1, 5_000)).rejects.toMatchObject({
      code: 'ECONNREFUSED',
    });
    await expect(fetch(`http://${nonLoopback}:${port}/`)).rejects.toThrow();
    cli.child.kill('SIGINT');
    expect(await cli.exited).toBe(0);
  });

  it('--inspect-exit returns once the server holds the run; a busy port is a usage error', async () => {
    const port = await freePort();
    const cli = runCli([
      'simulate',
      `${SCENARIOS}redelivery.json`,
      '--inspect',
      '--inspect-exit',
      '--inspect-port',
      String(port),
    ]);
    expect(await cli.exited).toBe(0);
    expect(cli.output()).toMatch(/Sent 9 inspection events/);

    const blocker = runCli([
      'simulate',
      `${SCENARIOS}error.json`,
      '--inspect',
      '--inspect-port',
      String(port),
    ]);
    await blocker.waitFor(/Sent \d+ inspection events/);
    const second = runCli([
      'simulate',
      `${SCENARIOS}error.json`,
      '--inspect',
      '--inspect-port',
      String(port),
    ]);
    expect(await second.exited).toBe(2);
    expect(second.output()).toContain(`port ${port} is in use`);
    blocker.child.kill('SIGINT');
    expect(await blocker.exited).toBe(0);
  });
});

// ---------------------------------------------------------------------------------------------
// The live page
// ---------------------------------------------------------------------------------------------

describe('GET /statechart in headless Chromium', () => {
  let http: HttpServer | undefined;
  let browser: Browser | undefined;
  let figuresDb: Db | undefined;
  let figures: HttpFigures | undefined;
  afterAll(async () => {
    await browser?.close();
    await http?.close();
    await figures?.stop();
    await figuresDb?.close();
  });

  it('shows every state with the counts in the database, and follows them as jobs move', async () => {
    // Jobs in several statuses, some moved through the step so there are transitions to count.
    const moving: string[] = [];
    for (const status of [
      'pending',
      'pending',
      'published',
      'published',
      'published',
      'processing',
    ] as const) {
      moving.push((await insertJob(t.db, { status })).jobId);
    }
    await applyEvent(t.db, moving[0]!, { type: 'PUBLISHED', replyTimeoutMs: 600_000 });
    await applyEvent(t.db, moving[2]!, ack(moving[2]!));

    // The daemon's figures, read every 200 ms on a connection of their own.
    const logger = createLogger({ level: 'silent' });
    figuresDb = openDb(t.url, { max: 1 });
    figures = startHttpFigures({ db: figuresDb, intervalMs: 200, logger });
    await figures.first;
    http = await startHttpServer({
      host: '127.0.0.1',
      port: 0,
      logger,
      registry: new Registry(),
      readiness: {},
      routes: createStatechartRoutes({ figures }),
    });
    browser = await launchChromium();
    const page = await browser.newPage();
    const requests: string[] = [];
    page.on('request', (r) => requests.push(r.url()));
    await page.goto(`http://127.0.0.1:${http.port}/statechart`);

    const shown = () =>
      page.$$eval('tr[data-state]', (rows) =>
        Object.fromEntries(
          rows.map((r) => [r.getAttribute('data-state'), Number(r.querySelector('td.count')?.textContent)]),
        ),
      );
    const shownEdges = () =>
      page.$$eval('tr[data-edge]', (rows) =>
        Object.fromEntries(
          rows.map((r) => [r.getAttribute('data-edge'), Number(r.querySelector('td.count')?.textContent)]),
        ),
      );
    const dbEdges = async () => {
      const rows = await t.db
        .selectFrom('recognition_job_transition')
        .select(['from_status', 'to_status', 'event', sql<string>`count(*)`.as('n')])
        .groupBy(['from_status', 'to_status', 'event'])
        .execute();
      return Object.fromEntries(rows.map((r) => [`${r.from_status}|${r.to_status}|${r.event}`, Number(r.n)]));
    };

    // Every state, with the database's count, in the table and on the diagram.
    const before = await jobCounts();
    expect(await shown()).toEqual(before);
    for (const s of JOB_STATUSES) {
      const label = await page.locator(`#chart g[id="state-${s}"] text`).allTextContents();
      expect(label.join(' '), s).toBe(`${s} ${before[s]} job${before[s] === 1 ? '' : 's'}`);
    }
    const edgesShown = await shownEdges();
    for (const [key, n] of Object.entries(await dbEdges())) expect(edgesShown[key], key).toBe(n);
    // Self-contained: nothing but the page itself and its own JSON.
    expect(requests.every((u) => u.startsWith(`http://127.0.0.1:${http!.port}/`))).toBe(true);

    // More jobs move; the open page catches up on its own.
    await applyEvent(t.db, moving[1]!, { type: 'PUBLISHED', replyTimeoutMs: 600_000 });
    await applyEvent(t.db, moving[3]!, ack(moving[3]!));
    await applyEvent(t.db, moving[5]!, done(moving[5]!));
    await applyEvent(t.db, moving[2]!, done(moving[2]!));
    const after = await jobCounts();
    expect(after).not.toEqual(before);
    await expect.poll(shown, { timeout: 15_000, interval: 250 }).toEqual(after);
    await expect
      .poll(async () => (await page.locator('#chart g[id="state-done"] text').allTextContents()).join(' '), {
        timeout: 15_000,
      })
      .toBe(`done ${after.done} job${after.done === 1 ? '' : 's'}`);
    const edgesAfter = await dbEdges();
    await expect
      .poll(async () => {
        const e = await shownEdges();
        return Object.entries(edgesAfter).every(([k, n]) => e[k] === n);
      })
      .toBe(true);
  });

  it('serves the same numbers as JSON', async () => {
    const res = await fetch(`http://127.0.0.1:${http!.port}/statechart.json`);
    expect(res.headers.get('content-type')).toBe('application/json');
    const body = (await res.json()) as { states: Array<{ name: string; count: number }>; svg: string };
    await new Promise((r) => setTimeout(r, 500)); // past the next read of the figures
    const fresh = (await (
      await fetch(`http://127.0.0.1:${http!.port}/statechart.json`)
    ).json()) as typeof body;
    expect(Object.fromEntries(fresh.states.map((s) => [s.name, s.count]))).toEqual(await jobCounts());
    expect(body.svg).toContain('<svg');
  });
});
