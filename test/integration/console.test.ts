/**
 * The operator console against a real daemon, PostgreSQL and nats-server: every view answers,
 * nothing acts without an identity (no form drawn, every action endpoint 403, a user header from an
 * untrusted peer ignored, a missing or wrong CSRF token refused), a signed-in retry creates the
 * next attempt and its audit row, which /audit and `recognition-core audit list` show; then the
 * same in headless Chromium, with a screenshot of each view (test-results/console/;
 * `UPDATE_DOCS_SCREENSHOT=1` also copies the overview to docs/console.png, the README's).
 */
import { copyFileSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Browser } from 'playwright-core';
import { afterAll, describe, expect, it } from 'vitest';
import type { JobEventInput } from '../../machines/index.js';
import { listAudit } from '../../src/db/audit.js';
import { applyEvent } from '../../src/step/index.js';
import { launchChromium } from '../helpers/browser.js';
import { runCli } from '../helpers/cliProcess.js';
import { insertJob } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';

const TOKENS = mkdtempSync(join(tmpdir(), 'rc-console-'));
const TOKEN_FILE = join(TOKENS, 'tokens');
const ALICE = 'alice-token-0123456789';
const BOB = 'bob-token-0123456789abc';
writeFileSync(TOKEN_FILE, `alice:${ALICE}\nbob:${BOB}:replay\n`);

const t = useHarness({
  database: true,
  nats: true,
  daemon: {
    env: {
      CONSOLE_PORT: '0',
      CONSOLE_TOKEN_FILE: TOKEN_FILE,
      // A proxy that is not this test: the header it would send is ignored from 127.0.0.1.
      CONSOLE_TRUSTED_PROXIES: '10.9.9.9',
    },
  },
});

const SHOTS = fileURLToPath(new URL('../../test-results/console/', import.meta.url));
const DOCS_SHOT = fileURLToPath(new URL('../../docs/console.png', import.meta.url));
const base = () => `http://127.0.0.1:${t.daemon.console!.port}`;
const ACTIONS = ['/actions/retry', '/actions/retry-bulk', '/actions/replay', '/actions/purge'];

const service = (name: string) => ({ name, version: '2.3.1' });

/** A job of `svc` that was published, acknowledged and failed, through the step. */
async function failedJob(svc: string) {
  const job = await insertJob(t.db, { status: 'published', target_service: svc });
  const ack: JobEventInput = {
    type: 'ENVELOPE_PROCESSING',
    msgId: `ack:${job.jobId}:1`,
    service: service(svc),
  };
  await applyEvent(t.db, job.jobId, ack);
  await applyEvent(t.db, job.jobId, {
    type: 'ENVELOPE_RESULT',
    msgId: `result:${job.jobId}:1`,
    status: 'error',
    service: service(svc),
    error: { code: 'PARSE_FAILED', message: 'sheet 2 is empty' },
  });
  return job;
}

/** An ack quarantined as UNKNOWN_JOB, for a job that exists now: a replay applies it. */
async function quarantinedAck() {
  const job = await insertJob(t.db, { status: 'published' });
  const msgId = `ack:${job.jobId}:1`;
  const row = await t.db
    .insertInto('inbox_quarantine')
    .values({
      stream: 'RECOGNITION_RESULTS',
      stream_seq: null,
      subject: 'recognition.result',
      msg_id: msgId,
      job_id: job.jobId,
      reason: 'UNKNOWN_JOB',
      details: JSON.stringify({ message: 'UNKNOWN_JOB' }),
      payload: Buffer.from(
        JSON.stringify({
          job_id: job.jobId,
          status: 'processing',
          service: service('tabular-parser'),
          sent_at: new Date().toISOString(),
        }),
      ),
      headers: JSON.stringify({ 'Nats-Msg-Id': [msgId] }),
    })
    .returning('id')
    .executeTakeFirstOrThrow();
  return { ...job, quarantineId: row.id };
}

/** A session cookie for `token`. */
async function signIn(token: string): Promise<string> {
  const res = await fetch(`${base()}/login`, {
    method: 'POST',
    body: new URLSearchParams({ token }),
    redirect: 'manual',
  });
  expect(res.status).toBe(303);
  const cookie = res.headers.get('set-cookie')!;
  expect(cookie).toMatch(/HttpOnly; SameSite=Strict; Path=\//);
  return cookie.split(';')[0]!;
}

/** The CSRF token of the forms on `path`, for `cookie`'s session. */
async function csrfOf(cookie: string, path: string): Promise<string> {
  const html = await (await fetch(`${base()}${path}`, { headers: { cookie } })).text();
  const m = /name="csrf" value="([^"]+)"/.exec(html);
  expect(m, `a form with a CSRF token on ${path}`).not.toBeNull();
  return m![1]!;
}

const post = (path: string, form: Record<string, string>, headers: Record<string, string> = {}) =>
  fetch(`${base()}${path}`, { method: 'POST', body: new URLSearchParams(form), headers, redirect: 'manual' });

describe('the console over HTTP', () => {
  it('answers every view read-only, with no form that acts', async () => {
    const job = await failedJob('tabular-parser');
    const q = await quarantinedAck();
    const views: Array<[string, RegExp]> = [
      ['/', /Open jobs now[\s\S]*Inbox lag[\s\S]*Waiting in core-inbox[\s\S]*Quarantine: 1 held/],
      ['/jobs', new RegExp(job.jobId)],
      ['/jobs?status=error&service=tabular-parser', new RegExp(job.jobId)],
      [`/jobs/${job.jobId}`, /<svg[\s\S]*id="state&#45;error"[\s\S]*ENVELOPE_RESULT[\s\S]*result:/],
      ['/quarantine', new RegExp(`Message ${q.quarantineId}: UNKNOWN_JOB`)],
      ['/services', /Last hour[\s\S]*tabular-parser/],
      ['/audit', /Audit log/],
      ['/login', /Token/],
    ];
    for (const [path, expected] of views) {
      const res = await fetch(`${base()}${path}`);
      const html = await res.text();
      expect(res.status, path).toBe(200);
      expect(html, path).toMatch(expected);
      expect(html, path).not.toMatch(/action="\/actions/);
      expect(html, path).not.toMatch(/name="csrf"/);
      expect(res.headers.get('content-security-policy'), path).toContain("script-src 'self'");
    }
    for (const asset of ['/assets/uPlot.iife.min.js', '/assets/uPlot.min.css', '/assets/console.js']) {
      expect((await fetch(`${base()}${asset}`)).status, asset).toBe(200);
    }
  });

  it('finds a job by its id, its file id and a message id', async () => {
    const job = await failedJob('tabular-parser');
    for (const id of [job.jobId, job.fileId, `ack:${job.jobId}:1`, `result:${job.jobId}:1`]) {
      const res = await fetch(`${base()}/find?id=${encodeURIComponent(id)}`, { redirect: 'manual' });
      expect(res.status, id).toBe(303);
      expect(res.headers.get('location'), id).toBe(`/jobs/${job.jobId}`);
    }
    const res = await fetch(`${base()}/find?id=${encodeURIComponent(`ack:${job.jobId}:7`)}`);
    expect(res.status).toBe(404);
  });

  it('refuses every action without an identity, and from a user header of an untrusted peer', async () => {
    const job = await failedJob('tabular-parser');
    const form = {
      job_id: job.jobId,
      note: 'x',
      status: 'error',
      id: '1',
      older_than: '0s',
      dry_run: 'false',
    };
    for (const path of ACTIONS) {
      expect((await post(path, form)).status, path).toBe(403);
      expect((await post(path, form, { 'X-Forwarded-User': 'mallory' })).status, path).toBe(403);
    }
    const html = await (
      await fetch(`${base()}/jobs/${job.jobId}`, { headers: { 'X-Forwarded-User': 'mallory' } })
    ).text();
    expect(html).not.toMatch(/action="\/actions/);
    expect(html).toContain('Read-only');
    expect(
      (await t.db.selectFrom('recognition_job').select('id').where('file_id', '=', job.fileId).execute())
        .length,
    ).toBe(1);
  });

  it('refuses a wrong or missing CSRF token, a foreign origin and an action the token does not allow', async () => {
    const job = await failedJob('tabular-parser');
    const cookie = await signIn(ALICE);
    const csrf = await csrfOf(cookie, `/jobs/${job.jobId}`);
    const form = { job_id: job.jobId, note: 'x' };
    expect((await post('/actions/retry', form, { cookie })).status).toBe(403);
    expect((await post('/actions/retry', { ...form, csrf: csrf.slice(1) + 'A' }, { cookie })).status).toBe(
      403,
    );
    expect(
      (await post('/actions/retry', { ...form, csrf }, { cookie, origin: 'http://evil.example' })).status,
    ).toBe(403);
    // Another session's token does not fit this one.
    const other = await csrfOf(await signIn(ALICE), `/jobs/${job.jobId}`);
    expect((await post('/actions/retry', { ...form, csrf: other }, { cookie })).status).toBe(403);
    // bob may replay only: no retry form, and a retry refused.
    const bob = await signIn(BOB);
    const bobPage = await (await fetch(`${base()}/jobs/${job.jobId}`, { headers: { cookie: bob } })).text();
    expect(bobPage).not.toMatch(/action="\/actions\/retry"/);
    const bobCsrf = await csrfOf(bob, '/quarantine?reason=UNKNOWN_JOB');
    expect((await post('/actions/retry', { ...form, csrf: bobCsrf }, { cookie: bob })).status).toBe(403);
    // A wrong token signs nobody in.
    expect((await post('/login', { token: 'nobody-0123456789abcdef' })).status).toBe(401);
    expect(
      (await t.db.selectFrom('recognition_job').select('id').where('file_id', '=', job.fileId).execute())
        .length,
    ).toBe(1);
  });

  it('retries a job for a signed-in operator: attempt + 1, audited with actor and reason', async () => {
    const job = await failedJob('tabular-parser');
    const cookie = await signIn(ALICE);
    const csrf = await csrfOf(cookie, `/jobs/${job.jobId}`);
    const res = await post(
      '/actions/retry',
      { job_id: job.jobId, note: 'parser 2.3.2 fixed it', csrf },
      {
        cookie,
        origin: base(),
      },
    );
    expect(res.status).toBe(303);
    const next = /^\/jobs\/([0-9a-f-]{36})\?retry_of=/.exec(res.headers.get('location') ?? '')![1]!;
    const attempt = await t.db
      .selectFrom('recognition_job')
      .selectAll()
      .where('id', '=', next)
      .executeTakeFirstOrThrow();
    expect(attempt).toMatchObject({ file_id: job.fileId, attempt: 2, status: 'pending' });
    const [row] = await listAudit(t.db, { limit: 1 });
    expect(row).toMatchObject({
      actor: 'alice',
      via: 'console',
      action: 'jobs retry',
      selection: { job_id: job.jobId },
      affected: 1,
      outcome: { selected: 1, attempts: [next] },
      note: 'parser 2.3.2 fixed it',
    });
    expect(await (await fetch(`${base()}/audit`)).text()).toMatch(
      /alice<\/td><td>console<\/td><td>jobs retry[\s\S]*parser 2\.3\.2 fixed it/,
    );
    const cli = await runCli(['audit', 'list', '--json', '--limit', '1'], { DATABASE_URL: t.url });
    expect(cli.code, cli.output).toBe(0);
    expect(JSON.parse(cli.stdout[0]!)).toMatchObject({
      actor: 'alice',
      via: 'console',
      note: 'parser 2.3.2 fixed it',
    });
    // The retried job offers no retry any more: its file has a newer job.
    const again = await (await fetch(`${base()}/jobs/${job.jobId}`, { headers: { cookie } })).text();
    expect(again).not.toMatch(/action="\/actions\/retry"/);
  });

  it('counts a bulk retry in a dry run first, then runs it', async () => {
    const a = await failedJob('bulk-svc');
    const b = await failedJob('bulk-svc');
    const cookie = await signIn(ALICE);
    const csrf = await csrfOf(cookie, '/jobs?status=error&service=bulk-svc');
    const form = { status: 'error', service: 'bulk-svc', limit: '100', csrf };
    const dry = await post('/actions/retry-bulk', { ...form, dry_run: 'true' }, { cookie });
    expect(dry.status).toBe(200);
    expect(await dry.text()).toMatch(/Would retry 2 of 2 selected/);
    const count = await t.db
      .selectFrom('recognition_job')
      .select('id')
      .where('target_service', '=', 'bulk-svc')
      .execute();
    expect(count.length).toBe(2);
    const done = await post(
      '/actions/retry-bulk',
      { ...form, dry_run: 'false', note: 'outage over' },
      { cookie },
    );
    expect(await done.text()).toMatch(/Retried 2 of 2 selected/);
    for (const j of [a, b]) {
      const attempts = await t.db
        .selectFrom('recognition_job')
        .select('attempt')
        .where('file_id', '=', j.fileId)
        .execute();
      expect(attempts.map((x) => x.attempt).sort()).toEqual([1, 2]);
    }
    const [row] = await listAudit(t.db, { limit: 1 });
    expect(row).toMatchObject({
      via: 'console',
      affected: 2,
      note: 'outage over',
      selection: { service: 'bulk-svc' },
    });
  });
});

describe('the console in headless Chromium', () => {
  let browser: Browser | undefined;
  afterAll(async () => {
    await browser?.close();
  });

  it('filters, opens a job, steps through its path, retries it, replays a quarantined message', async () => {
    mkdirSync(SHOTS, { recursive: true });
    const target = await failedJob('ocr-engine');
    await failedJob('tabular-parser');
    const q = await quarantinedAck();
    browser = await launchChromium();
    const page = await browser.newPage({ viewport: { width: 1366, height: 768 } });
    const requests: string[] = [];
    page.on('request', (r) => requests.push(r.url()));
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));

    await page.goto(`${base()}/login`);
    await page.getByLabel('Token').fill(ALICE);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(`${base()}/`);
    await expect.poll(() => page.locator('#quarantine-chart canvas').count()).toBeGreaterThan(0);
    await page.screenshot({ path: join(SHOTS, 'overview.png'), fullPage: true });
    // The README's picture is refreshed on request only, so a test run leaves the checkout as it was.
    if (process.env.UPDATE_DOCS_SCREENSHOT === '1') copyFileSync(join(SHOTS, 'overview.png'), DOCS_SHOT);

    // The failed jobs of one service.
    await page.getByRole('link', { name: 'Jobs', exact: true }).click();
    await page.getByLabel('error').check();
    await page.getByLabel('Service').fill('ocr-engine');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/status=error/);
    const rows = page.locator('main table tbody tr');
    await expect.poll(() => rows.count()).toBe(1);
    expect(await rows.first().textContent()).toContain('ocr-engine');
    await page.screenshot({ path: join(SHOTS, 'jobs.png'), fullPage: true });

    // One job, and its path on the chart: the last step first, then back and forth.
    await page.getByRole('link', { name: target.jobId }).click();
    await page.waitForURL(`${base()}/jobs/${target.jobId}`);
    const label = page.locator('#step-label');
    await expect.poll(() => label.textContent()).toMatch(/^Step 2 of 2: ENVELOPE_RESULT: processing → error/);
    expect(await page.locator('#statechart g.node.current').getAttribute('id')).toBe('state-error');
    expect(await page.locator('#statechart g.edge.taken').getAttribute('id')).toBe(
      'edge-processing-error-ENVELOPE_RESULT',
    );
    await page.getByRole('button', { name: 'Previous' }).click();
    expect(await label.textContent()).toMatch(/^Step 1 of 2: ENVELOPE_PROCESSING: published → processing/);
    expect(await page.locator('#statechart g.node.current').getAttribute('id')).toBe('state-processing');
    await page.locator('#statechart').focus();
    await page.keyboard.press('ArrowLeft');
    expect(await label.textContent()).toMatch(/^Step 0 of 2: start in published/);
    expect(await page.getByRole('button', { name: 'Previous' }).isDisabled()).toBe(true);
    await page.keyboard.press('ArrowRight');
    expect(await label.textContent()).toMatch(/^Step 1 of 2/);
    await page.screenshot({ path: join(SHOTS, 'job.png'), fullPage: true });

    // Retry it with a reason: the new attempt's page, then the audit entry.
    await page.getByLabel('Reason (recorded in the audit log)').fill('ocr-engine 4.1 reads empty sheets');
    await page.getByRole('button', { name: /^Retry: create attempt 2/ }).click();
    await page.waitForURL(/retry_of=/);
    expect(await page.locator('main').textContent()).toContain(
      `Attempt 2 created: a retry of job ${target.jobId}`,
    );
    expect(await page.locator('main').textContent()).toContain('attempt 2 (this job)');
    await page.getByRole('link', { name: 'Audit', exact: true }).click();
    expect(await page.locator('main table tbody tr').first().textContent()).toMatch(
      /alice\s*console\s*jobs retry[\s\S]*ocr-engine 4\.1 reads empty sheets/,
    );
    await page.screenshot({ path: join(SHOTS, 'audit.png'), fullPage: true });

    // Quarantine: replay the message; it is applied.
    await page.getByRole('link', { name: 'Quarantine', exact: true }).click();
    await page.screenshot({ path: join(SHOTS, 'quarantine.png'), fullPage: true });
    const form = page.getByRole('form', { name: `Replay message ${q.quarantineId}` });
    await form.getByLabel('Reason (recorded in the audit log)').fill('the job exists now');
    await form.getByRole('button', { name: `Replay message ${q.quarantineId}` }).click();
    await page.waitForURL(/replayed=/);
    expect(await page.locator('.notice').textContent()).toContain(
      `Message ${q.quarantineId}: applied: published -> processing`,
    );
    const job = await t.db
      .selectFrom('recognition_job')
      .select('status')
      .where('id', '=', q.jobId)
      .executeTakeFirstOrThrow();
    expect(job.status).toBe('processing');

    // The services' figures are as old as the rollup's last run and the console's shared read.
    await page.getByRole('link', { name: 'Services', exact: true }).click();
    await expect
      .poll(async () => (await page.reload(), await page.locator('main').textContent()), {
        timeout: 20_000,
        interval: 500,
      })
      .toContain('ocr-engine');
    await page.screenshot({ path: join(SHOTS, 'services.png'), fullPage: true });

    // Self-contained: nothing but the console itself.
    expect(requests.filter((u) => !u.startsWith(`${base()}/`))).toEqual([]);
    expect(errors).toEqual([]);
  });
});
