/**
 * `jobs retry` and `jobs list` as an operator runs them (the built CLI, a real database): the next
 * attempt of a failed job through the machine and the step, both jobs' audit rows, bulk retries by
 * status, service and time with --limit and --dry-run, idempotency, refusals with exit code 2, and
 * a real daemon publishing a retried job to a private nats-server.
 */
import { randomUUID } from 'node:crypto';
import { jetstreamManager } from '@nats-io/jetstream';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { JobEventInput } from '../../machines/index.js';
import { JOBS_STREAM } from '../../src/nats/subjects.js';
import { applyEvent, applyRetries } from '../../src/step/index.js';
import { runCli } from '../helpers/cliProcess.js';
import { insertJob, loadAll, snapshotTables } from '../helpers/fixtures.js';
import { waitFor } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true });

async function cli(...args: string[]) {
  return runCli(args, { DATABASE_URL: t.url });
}

/** The JSON lines of a run's stdout. */
function jsonLines(stdout: string[]): Array<Record<string, unknown>> {
  return stdout.filter((l) => l.trim() !== '').map((l) => JSON.parse(l) as Record<string, unknown>);
}

type Failure = 'timeout' | 'error' | 'dlq';

/** A job that failed the way `how` says, through the step, its file ERROR. */
async function failedJob(how: Failure, service = 'tabular-parser') {
  const { jobId, fileId } = await insertJob(t.db, {
    status: 'published',
    target_service: service,
    reply_deadline: sql<Date>`now() - interval '1 second'` as never,
  });
  const events: Record<Failure, JobEventInput> = {
    timeout: { type: 'DEADLINE_PASSED' },
    error: {
      type: 'ENVELOPE_RESULT',
      msgId: `result:${jobId}:1`,
      status: 'error',
      service: { name: service, version: '1.0.0' },
      error: { code: 'UNSUPPORTED_FORMAT', message: 'xls 95 is not supported' },
    },
    dlq: { type: 'DELIVERY_EXHAUSTED', deliveries: 5 },
  };
  const outcome = await applyEvent(t.db, jobId, events[how]);
  expect(outcome).toMatchObject({ decision: 'applied', to: how });
  return { jobId, fileId };
}

/** Jobs of a file that are not final: a file never has more than one. */
async function openAttempts(fileId: string) {
  return t.db
    .selectFrom('recognition_job')
    .selectAll()
    .where('file_id', '=', fileId)
    .where('status', 'in', ['pending', 'published', 'processing'])
    .execute();
}

describe('jobs retry <id>', () => {
  it('creates the next attempt pending, moves the file to it, and writes both jobs’ audit rows', async () => {
    const { jobId, fileId } = await failedJob('timeout');
    const before = await loadAll(t.db, jobId);
    expect(before.file).toMatchObject({ status: 'ERROR', error_code: 'TIMEOUT' });

    const r = await cli('jobs', 'retry', jobId);
    expect(r.code, r.output).toBe(0);
    const [printed, ...more] = jsonLines(r.stdout);
    expect(more).toEqual([]);
    expect(printed).toMatchObject({
      file_id: fileId,
      attempt: 2,
      target_service: 'tabular-parser',
      status: 'pending',
      retry_of: jobId,
      retried_status: 'timeout',
    });
    const nextId = printed!['id'] as string;

    // The old job keeps its row and its status; one more audit row names the new attempt.
    const old = await loadAll(t.db, jobId);
    expect(old.job).toEqual(before.job);
    expect(old.transitions.map((x) => [x.from_status, x.to_status, x.event])).toEqual([
      ['published', 'timeout', 'DEADLINE_PASSED'],
      ['timeout', 'timeout', 'RETRY_REQUESTED'],
    ]);
    expect(old.transitions[1]!.detail).toEqual({
      next_job_id: nextId,
      next_attempt: 2,
      target_service: 'tabular-parser',
    });

    // The new attempt: pending, due now, its creation row naming the job it retries; the file is its.
    const next = await loadAll(t.db, nextId);
    expect(next.job).toMatchObject({
      file_id: fileId,
      attempt: 2,
      status: 'pending',
      target_service: 'tabular-parser',
      publish_attempts: 0,
      error_code: null,
      finished_at: null,
    });
    expect(next.job.next_publish_at).toBeInstanceOf(Date);
    expect(next.transitions.map((x) => [x.from_status, x.to_status, x.event, x.detail])).toEqual([
      ['pending', 'pending', 'CREATED', { retry_of: jobId, attempt: 2, target_service: 'tabular-parser' }],
    ]);
    expect(next.file).toMatchObject({
      status: 'QUEUED',
      error_code: null,
      current_recognition_job_id: nextId,
    });
  });

  it('--to-service publishes the next attempt to another service', async () => {
    const { jobId } = await failedJob('error');
    const r = await cli('jobs', 'retry', jobId, '--to-service', 'ocr-service');
    expect(r.code, r.output).toBe(0);
    const [printed] = jsonLines(r.stdout);
    const next = await loadAll(t.db, printed!['id'] as string);
    expect(next.job).toMatchObject({ target_service: 'ocr-service', attempt: 2, status: 'pending' });
  });

  it('twice: the second is refused (exit 2, one line, nothing written); the file has one open attempt', async () => {
    const { jobId, fileId } = await failedJob('dlq');
    expect((await cli('jobs', 'retry', jobId)).code).toBe(0);
    const snapshot = await snapshotTables(t.db);
    const again = await cli('jobs', 'retry', jobId);
    expect(again.code).toBe(2);
    expect(again.stdout).toEqual([]);
    expect(again.stderr).toHaveLength(1);
    expect(again.stderr[0]).toMatch(
      new RegExp(`job ${jobId} is not the current job of file ${fileId} \\(that is job [0-9a-f-]{36}\\)`),
    );
    expect(await snapshotTables(t.db)).toEqual(snapshot);
    expect(await openAttempts(fileId)).toHaveLength(1);
  });

  it('two retries of one job at once: one creates the attempt, the other is refused', async () => {
    const { jobId, fileId } = await failedJob('timeout');
    const [a, b] = await Promise.all([
      t.db.transaction().execute((tx) => applyRetries(tx, [{ jobId }])),
      t.db.transaction().execute((tx) => applyRetries(tx, [{ jobId }])),
    ]);
    const outcomes = [...a, ...b];
    expect(outcomes.filter((o) => o.decision === 'applied')).toHaveLength(1);
    expect(outcomes.filter((o) => o.reason === 'file_not_current')).toHaveLength(1);
    expect(await openAttempts(fileId)).toHaveLength(1);
  });

  it.each([
    ['done', /is done: only a failed job \(error, timeout, dlq\) is retried/],
    ['needs_check', /is needs_check: only a failed job/],
    ['pending', /is pending: only a failed job/],
    ['published', /is published: only a failed job/],
    ['processing', /is processing: only a failed job/],
  ] as const)('refuses a job in %s (exit 2, one line, nothing written)', async (status, message) => {
    const { jobId } = await insertJob(t.db, { status });
    const snapshot = await snapshotTables(t.db);
    const r = await cli('jobs', 'retry', jobId);
    expect(r.code).toBe(2);
    expect(r.stderr).toHaveLength(1);
    expect(r.stderr[0]).toMatch(message);
    expect(await snapshotTables(t.db)).toEqual(snapshot);
  });

  it('refuses a failed job that is not its file’s current one, an unknown job and a malformed id (exit 2)', async () => {
    const { jobId } = await insertJob(t.db, { status: 'error', fileIsCurrent: false });
    const snapshot = await snapshotTables(t.db);
    const notCurrent = await cli('jobs', 'retry', jobId);
    expect(notCurrent.code).toBe(2);
    expect(notCurrent.stderr[0]).toMatch(/is not the current job of file .* \(that is job none\)/);

    const unknown = randomUUID();
    const r = await cli('jobs', 'retry', unknown);
    expect(r.code).toBe(2);
    expect(r.stderr).toEqual([`recognition-core: no recognition_job with id ${unknown}`]);

    const bad = await cli('jobs', 'retry', 'not-a-uuid');
    expect(bad.code).toBe(2);
    expect(bad.stderr[0]).toMatch(/job id is not a uuid/);

    const both = await cli('jobs', 'retry', jobId, '--status', 'error');
    expect(both.code).toBe(2);
    expect(both.stderr[0]).toMatch(/either a job id or --status/);
    expect(await snapshotTables(t.db)).toEqual(snapshot);
  });

  it('--dry-run prints the attempt it would create and writes nothing', async () => {
    const { jobId, fileId } = await failedJob('error');
    const snapshot = await snapshotTables(t.db);
    const r = await cli('jobs', 'retry', jobId, '--dry-run');
    expect(r.code, r.output).toBe(0);
    expect(jsonLines(r.stdout)).toEqual([
      {
        id: null,
        file_id: fileId,
        attempt: 2,
        target_service: 'tabular-parser',
        status: 'pending',
        retry_of: jobId,
        retried_status: 'error',
      },
    ]);
    expect(await snapshotTables(t.db)).toEqual(snapshot);
  });
});

describe('jobs retry --status (bulk)', () => {
  /** A fresh database state for a bulk test: its own service name keeps other tests' jobs out. */
  const svc = () => `bulk-${randomUUID().slice(0, 8)}`;

  it('retries the current failed jobs of the given statuses and service, skipping the rest', async () => {
    const s = svc();
    const timeouts = await Promise.all([1, 2, 3].map(() => failedJob('timeout', s)));
    const errors = await Promise.all([1, 2].map(() => failedJob('error', s)));
    const dlq = await failedJob('dlq', s);
    const otherService = await failedJob('timeout', `${s}-other`);

    const r = await cli('jobs', 'retry', '--status', 'timeout,error', '--service', s);
    expect(r.code, r.output).toBe(0);
    const printed = jsonLines(r.stdout);
    expect(printed.map((p) => p['retry_of']).sort()).toEqual(
      [...timeouts, ...errors].map((j) => j.jobId).sort(),
    );
    expect(printed.every((p) => p['attempt'] === 2 && p['status'] === 'pending')).toBe(true);
    expect(r.stderr.at(-1)).toBe('retried 5 of 5 selected job(s)');
    for (const j of [...timeouts, ...errors]) expect(await openAttempts(j.fileId)).toHaveLength(1);
    for (const j of [dlq, otherService]) expect(await openAttempts(j.fileId)).toHaveLength(0);

    // Again: those files' current jobs are pending now; nothing is selected, nothing written.
    const snapshot = await snapshotTables(t.db);
    const again = await cli('jobs', 'retry', '--status', 'timeout,error', '--service', s);
    expect(again.code, again.output).toBe(0);
    expect(again.stdout).toEqual([]);
    expect(again.stderr.at(-1)).toBe('retried 0 of 0 selected job(s)');
    expect(await snapshotTables(t.db)).toEqual(snapshot);
  });

  it('--limit bounds a run, oldest failure first; --dry-run prints the selection and writes nothing', async () => {
    const s = svc();
    const jobs = [];
    for (let i = 0; i < 4; i++) jobs.push(await failedJob('dlq', s));

    const snapshot = await snapshotTables(t.db);
    const dry = await cli('jobs', 'retry', '--status', 'dlq', '--service', s, '--limit', '3', '--dry-run');
    expect(dry.code, dry.output).toBe(0);
    expect(jsonLines(dry.stdout).map((p) => [p['id'], p['retry_of']])).toEqual(
      jobs.slice(0, 3).map((j) => [null, j.jobId]),
    );
    expect(dry.stderr.at(-1)).toBe(
      'would retry 3 of 3 selected job(s) (--limit 3 reached: run again for more)',
    );
    expect(await snapshotTables(t.db)).toEqual(snapshot);

    const r = await cli('jobs', 'retry', '--status', 'dlq', '--service', s, '--limit', '3');
    expect(r.code, r.output).toBe(0);
    expect(jsonLines(r.stdout).map((p) => p['retry_of'])).toEqual(jobs.slice(0, 3).map((j) => j.jobId));
    expect(await openAttempts(jobs[3]!.fileId)).toHaveLength(0);

    const rest = await cli('jobs', 'retry', '--status', 'dlq', '--service', s, '--limit', '3');
    expect(jsonLines(rest.stdout).map((p) => p['retry_of'])).toEqual([jobs[3]!.jobId]);
  });

  it('--since selects by when the job failed', async () => {
    const s = svc();
    const old = await failedJob('timeout', s);
    const recent = await failedJob('timeout', s);
    // The old one failed two hours ago (a fixture edit of a final row's timestamp, not of its status).
    await sql`UPDATE recognition_job SET finished_at = now() - interval '2 hours' WHERE id = ${old.jobId}`.execute(
      t.db,
    );
    const r = await cli('jobs', 'retry', '--status', 'timeout', '--service', s, '--since', '1h');
    expect(r.code, r.output).toBe(0);
    expect(jsonLines(r.stdout).map((p) => p['retry_of'])).toEqual([recent.jobId]);

    const iso = new Date(Date.now() - 3 * 3_600_000).toISOString();
    const r2 = await cli('jobs', 'retry', '--status', 'timeout', '--service', s, '--since', iso);
    expect(jsonLines(r2.stdout).map((p) => p['retry_of'])).toEqual([old.jobId]);
  });

  it('more jobs than one batch: all retried, each file once, across transactions', async () => {
    const s = svc();
    const n = 230;
    const jobs = [];
    for (let i = 0; i < n; i += 23)
      jobs.push(...(await Promise.all(Array.from({ length: 23 }, () => failedJob('error', s)))));
    const r = await cli('jobs', 'retry', '--status', 'error', '--service', s, '--limit', '5000');
    expect(r.code, r.output).toBe(0);
    expect(jsonLines(r.stdout)).toHaveLength(n);
    const { rows } = await sql<{ files: number; open: number }>`
      SELECT count(DISTINCT file_id)::int AS files, count(*)::int AS open
      FROM recognition_job WHERE target_service = ${s} AND status = 'pending'`.execute(t.db);
    expect(rows[0]).toEqual({ files: n, open: n });
  });

  it('refuses a status that is not a failure, and a malformed --since (exit 2)', async () => {
    const r = await cli('jobs', 'retry', '--status', 'done');
    expect(r.code).toBe(2);
    expect(r.output).toMatch(/must be one or more of error, timeout, dlq/);
    const since = await cli('jobs', 'retry', '--status', 'error', '--since', 'yesterday');
    expect(since.code).toBe(2);
    expect(since.output).toMatch(/span back from now/);
  });
});

describe('jobs list', () => {
  it('filters by status, service, file, created and finished since; JSON lines off a terminal', async () => {
    const s = `list-${randomUUID().slice(0, 8)}`;
    const a = await failedJob('timeout', s);
    const b = await failedJob('error', s);
    const { jobId: open } = await insertJob(t.db, { status: 'processing', target_service: s });

    const all = await cli('jobs', 'list', '--service', s);
    expect(all.code, all.output).toBe(0);
    const rows = jsonLines(all.stdout);
    expect(rows.map((x) => x['id']).sort()).toEqual([a.jobId, b.jobId, open].sort());
    expect(rows[0]).toHaveProperty('status');
    expect(rows[0]).toHaveProperty('created_at');

    const byStatus = await cli('jobs', 'list', '--service', s, '--status', 'timeout,processing', '--json');
    expect(
      jsonLines(byStatus.stdout)
        .map((x) => x['id'])
        .sort(),
    ).toEqual([a.jobId, open].sort());

    const byFile = await cli('jobs', 'list', '--file', b.fileId);
    expect(jsonLines(byFile.stdout).map((x) => x['id'])).toEqual([b.jobId]);

    await sql`UPDATE recognition_job SET finished_at = now() - interval '3 hours' WHERE id = ${a.jobId}`.execute(
      t.db,
    );
    const finished = await cli('jobs', 'list', '--service', s, '--finished-since', '30m');
    expect(jsonLines(finished.stdout).map((x) => x['id'])).toEqual([b.jobId]);

    const created = await cli('jobs', 'list', '--service', s, '--created-since', '2d', '--limit', '2');
    expect(jsonLines(created.stdout)).toHaveLength(2);
    const future = await cli('jobs', 'list', '--service', s, '--created-since', '2999-01-01T00:00:00Z');
    expect(future.stdout).toEqual([]);
  });

  it('--table prints aligned columns under a header', async () => {
    const s = `table-${randomUUID().slice(0, 8)}`;
    const a = await failedJob('timeout', s);
    const r = await cli('jobs', 'list', '--service', s, '--table');
    expect(r.code, r.output).toBe(0);
    expect(r.stdout).toHaveLength(2);
    expect(r.stdout[0]).toMatch(/^ID\s+FILE\s+ATTEMPT\s+SERVICE\s+STATUS\s+ERROR\s+CREATED\s+FINISHED$/);
    expect(r.stdout[1]).toMatch(
      new RegExp(`^${a.jobId}\\s+${a.fileId}\\s+1\\s+${s}\\s+timeout\\s+TIMEOUT\\s`),
    );
    expect(r.stdout[1]!.indexOf('timeout')).toBe(r.stdout[0]!.indexOf('STATUS'));
  });

  it('refuses bad filters with exit 2', async () => {
    for (const args of [
      ['--status', 'cancelled'],
      ['--limit', '0'],
      ['--file', 'nope'],
      ['--created-since', '5 minutes'],
    ]) {
      const r = await cli('jobs', 'list', ...args);
      expect(r.code, `${args.join(' ')}: ${r.output}`).toBe(2);
    }
  });
});

describe('a retried job reaches the stream', () => {
  const n = useHarness({ nats: true, client: true });

  it('the running daemon publishes the new attempt (woken by its insert) with the next attempt’s msg id', async () => {
    const daemon = await n.startDaemon({
      databaseUrl: t.url,
      // A poll this long leaves only the insert's NOTIFY to wake the publisher in time.
      env: { PUBLISHER_POLL_INTERVAL_MS: '600000' },
      loops: { inbox: false, watchdog: false, publisher: true, deadLetters: false, http: false },
    });
    try {
      const { jobId } = await failedJob('timeout');
      const r = await cli('jobs', 'retry', jobId);
      expect(r.code, r.output).toBe(0);
      const nextId = jsonLines(r.stdout)[0]!['id'] as string;
      await waitFor(
        async () => (await loadAll(t.db, nextId)).job.status === 'published',
        'the retry published',
      );
      const jsm = await jetstreamManager(n.nc);
      const m = await jsm.streams.getMessage(JOBS_STREAM, { last_by_subj: 'recognition.job.tabular-parser' });
      expect(m?.header.get('Nats-Msg-Id')).toBe(`job:${nextId}:2`);
      expect(m?.json()).toMatchObject({ job_id: nextId, attempt: 2 });
      const next = await loadAll(t.db, nextId);
      expect(next.transitions.map((x) => [x.from_status, x.to_status, x.event])).toEqual([
        ['pending', 'pending', 'CREATED'],
        ['pending', 'published', 'PUBLISHED'],
      ]);
    } finally {
      await daemon.stop();
    }
  });
});
