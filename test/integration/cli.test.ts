/**
 * The `recognition-core` command as a user runs it (the built CLI, a real database): files,
 * jobs, migrations and the quarantine, including every way a user can get it wrong.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { createDatabaseIfMissing, dropDatabase } from '../../src/db/database.js';
import { insertJob, snapshotTables } from '../helpers/fixtures.js';
import { dbUrl } from '../helpers/pgUrls.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true });
const run = promisify(execFile);

async function cli(args: string[], env: Record<string, string> = {}) {
  try {
    const { stdout, stderr } = await run(process.execPath, ['bin/recognition-core.js', ...args], {
      env: { ...process.env, DATABASE_URL: t.url, ...env },
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

describe('migrate', () => {
  it('creates a missing database, migrates it, and is harmless the second time', async () => {
    const url = dbUrl(`${t.dbName}_fresh`);
    try {
      const first = await cli(['migrate'], { DATABASE_URL: url });
      expect(first).toMatchObject({ code: 0, stderr: '' });
      expect(first.stdout).toMatch(/created the database; applied 0001_initial/);
      const second = await cli(['migrate'], { DATABASE_URL: url });
      expect(second).toMatchObject({ code: 0, stdout: 'migrations are up to date\n' });
    } finally {
      await dropDatabase(url);
    }
  });

  it('start refuses a database whose migrations are behind, in one clear line', async () => {
    const url = dbUrl(`${t.dbName}_behind`);
    await createDatabaseIfMissing(url);
    try {
      const r = await cli(['start'], { DATABASE_URL: url, HTTP_PORT: '0' });
      expect(r.code).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(/pending migration.*recognition-core migrate/);
    } finally {
      await dropDatabase(url);
    }
  });
});

describe('files and jobs', () => {
  it('files add → jobs create → jobs show → jobs history', async () => {
    const added = await cli([
      'files',
      'add',
      '--bucket',
      'arm-ka',
      '--key',
      `uploads/${randomUUID()}.xlsx`,
      '--name',
      'report.xlsx',
    ]);
    expect(added.code).toBe(0);
    const file = JSON.parse(added.stdout) as { id: string; status: string };
    expect(file.status).toBe('UPLOADED');

    const created = await cli(['jobs', 'create', '--file', file.id, '--service', 'tabular-parser']);
    expect(created.code).toBe(0);
    const job = JSON.parse(created.stdout) as { id: string; status: string; attempt: number };
    expect(job).toMatchObject({ status: 'pending', attempt: 1 });

    const shown = JSON.parse((await cli(['jobs', 'show', job.id])).stdout) as {
      job: { id: string };
      file: { status: string; current_recognition_job_id: string };
    };
    expect(shown.job.id).toBe(job.id);
    expect(shown.file).toMatchObject({ status: 'QUEUED', current_recognition_job_id: job.id });

    const history = await cli(['jobs', 'history', job.id]);
    expect(history.code).toBe(0);
    expect(JSON.parse(history.stdout)).toEqual([]);

    const again = JSON.parse(
      (await cli(['jobs', 'create', '--file', file.id, '--service', 'tabular-parser'])).stdout,
    ) as { attempt: number };
    expect(again.attempt).toBe(2);
  });

  it.each([
    [
      'a missing file',
      ['jobs', 'create', '--file', randomUUID(), '--service', 'tabular-parser'],
      /no stored_file with id/,
    ],
    [
      'a malformed file id',
      ['jobs', 'create', '--file', 'not-a-uuid', '--service', 'tabular-parser'],
      /file id is not a uuid/,
    ],
    [
      'a malformed service',
      ['jobs', 'create', '--file', randomUUID(), '--service', 'bad service!'],
      /service name must be/,
    ],
    [
      'an unknown option',
      ['jobs', 'create', '--file', randomUUID(), '--service', 'x', '--frobnicate'],
      /unknown option '--frobnicate'/,
    ],
    ['a missing option', ['jobs', 'create', '--service', 'x'], /required option '--file <id>'/],
    ['an unknown job', ['jobs', 'show', randomUUID()], /no recognition_job with id/],
    ['a malformed job id', ['jobs', 'history', 'nope'], /job id is not a uuid/],
    ['an unknown command', ['frobnicate'], /unknown command 'frobnicate'/],
  ])('%s: one clear line on stderr, exit 2, nothing written', async (_what, args, message) => {
    const before = await snapshotTables(t.db);
    const r = await cli(args);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(message);
    expect(r.stderr.split('\n').filter((l) => l.trim() && !l.includes('--help'))).toHaveLength(1);
    expect(await snapshotTables(t.db)).toEqual(before);
  });
});

describe('quarantine', () => {
  it('list filters by reason; replay applies an UNKNOWN_JOB message once its job exists', async () => {
    const jobId = randomUUID();
    const payload = JSON.stringify({
      job_id: jobId,
      status: 'processing',
      service: { name: 'tabular-parser', version: '1' },
    });
    const row = await t.db
      .insertInto('inbox_quarantine')
      .values({
        stream: 'RECOGNITION_RESULTS',
        stream_seq: 999_001,
        subject: 'recognition.result',
        msg_id: `ack:${jobId}:1`,
        job_id: jobId,
        reason: 'UNKNOWN_JOB',
        details: JSON.stringify({ message: 'no job' }),
        payload: Buffer.from(payload),
        headers: JSON.stringify({ 'Nats-Msg-Id': [`ack:${jobId}:1`] }),
      })
      .returning('id')
      .executeTakeFirstOrThrow();

    const listed = await cli(['quarantine', 'list', '--reason', 'UNKNOWN_JOB']);
    expect(listed.code).toBe(0);
    const lines = listed.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { id: string; payload: string; reason: string });
    expect(lines.find((l) => l.id === row.id)).toMatchObject({ reason: 'UNKNOWN_JOB', payload });
    expect((await cli(['quarantine', 'list', '--reason', 'INVALID_JSON'])).stdout).not.toContain(jobId);
    expect((await cli(['quarantine', 'list', '--reason', 'NOPE'])).code).toBe(2);

    await insertJob(t.db, { status: 'published', jobId });
    const replayed = await cli(['quarantine', 'replay', row.id]);
    expect(replayed.code).toBe(0);
    expect(JSON.parse(replayed.stdout)).toEqual({
      id: row.id,
      outcome: 'applied: published -> processing',
      jobId,
    });
    const job = await t.db
      .selectFrom('recognition_job')
      .select('status')
      .where('id', '=', jobId)
      .executeTakeFirstOrThrow();
    expect(job.status).toBe('processing');

    expect((await cli(['quarantine', 'replay'])).stderr).toMatch(/either a quarantine id or --reason/);
  });
});
