/**
 * The `recognition-core` command as a user runs it (the built CLI, a real database): files,
 * jobs, migrations and the quarantine, including every way a user can get it wrong; and the
 * command of an installation without the workshop, as the container image has it.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabaseIfMissing, dropDatabase } from '../../src/db/database.js';
import { insertJob, snapshotTables } from '../helpers/fixtures.js';
import { dbUrl } from '../helpers/pgUrls.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true });
const run = promisify(execFile);

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Run `bin/recognition-core.js` of `root` (this checkout by default). */
async function cli(args: string[], env: Record<string, string> = {}, root = ROOT) {
  try {
    const { stdout, stderr } = await run(process.execPath, [join(root, 'bin/recognition-core.js'), ...args], {
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

describe('an installation without the workshop (the container image)', () => {
  const WORKSHOP = ['statecharts', 'simulate', 'demo', 'service', 'conformance'];
  let image: string;
  beforeAll(() => {
    // What the runtime stage of deploy/Dockerfile copies: bin/, package.json and the compiled
    // trees it takes from the build stage; the dependencies are this checkout's.
    image = mkdtempSync(join(tmpdir(), 'recognition-core-image-'));
    const dockerfile = readFileSync(join(ROOT, 'deploy/Dockerfile'), 'utf8');
    const trees = [...dockerfile.matchAll(/^COPY --from=build \/src\/(dist\/\S+) /gm)].map((m) => m[1]!);
    expect(trees).toContain('dist/src');
    for (const path of ['bin', 'package.json', ...trees])
      cpSync(join(ROOT, path), join(image, path), { recursive: true });
    symlinkSync(join(ROOT, 'node_modules'), join(image, 'node_modules'));
  });
  afterAll(() => {
    if (image) rmSync(image, { recursive: true, force: true });
  });

  const commandsOf = (help: string) =>
    [...help.slice(help.indexOf('Commands:')).matchAll(/^ {2}(\S+)/gm)].map((m) => m[1]!);

  it("lists the operator's commands and none of the workshop's; a checkout lists both", async () => {
    const installed = commandsOf((await cli(['--help'], {}, image)).stdout);
    expect(installed).toEqual(expect.arrayContaining(['start', 'migrate', 'jobs', 'quarantine', 'inbox']));
    expect(installed.filter((c) => WORKSHOP.includes(c))).toEqual([]);
    const checkout = commandsOf((await cli(['--help'])).stdout);
    expect(checkout).toEqual(expect.arrayContaining([...installed, ...WORKSHOP]));
  });

  it.each([
    ['demo'],
    ['simulate', 'visualizations/scenarios/happy-path.json'],
    ['statecharts', '--check'],
    ['service', 'tabular-parser'],
    ['conformance', '--service', 'tabular-parser', '--', 'true'],
  ])('%s: one line naming the development checkout, exit 2', async (...args) => {
    const r = await cli(args, {}, image);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe(
      `recognition-core: ${args[0]} is part of a development checkout (npm ci && npm run build there); this installation has the operator's commands only (recognition-core --help)\n`,
    );
  });

  it("runs the operator's commands", async () => {
    const r = await cli(['migrate', '--status'], {}, image);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/0001_initial/);
    expect(r.stderr).toMatch(/applied, 0 pending/);
  });
});
