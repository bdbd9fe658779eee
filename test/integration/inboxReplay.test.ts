/**
 * `inbox replay` as an operator runs it after a restore: a daemon applies results, the database is
 * restored from a `pg_dump` taken before them (dropped, created, `pg_restore`d), and the built CLI
 * delivers the results stream again through the inbox's path, from a time (`--since`) or a
 * sequence (`--from-seq`, `--until-seq`). Every result is applied once, the jobs end as they did,
 * `core-inbox` is untouched, a second replay changes nothing, and `--dry-run` writes nothing.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { randomUUID } from 'node:crypto';
import { jetstreamManager, type ConsumerInfo } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabaseIfMissing, dropDatabase } from '../../src/db/database.js';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../../src/nats/subjects.js';
import { runCli } from '../helpers/cliProcess.js';
import { insertJob, snapshotTables, type JobFixture } from '../helpers/fixtures.js';
import type { TestDaemon } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';

const run = promisify(execFile);
const t = useHarness({ database: true, nats: true, client: true });
let daemon: TestDaemon | undefined;
let dir: string;
let dump: string;

const JOBS = 20;
/** Each job's envelopes, with their stream sequences. */
interface Answered extends JobFixture {
  ackSeq: number;
  resultSeq: number;
  resultMsgId: string;
}
const answered: Answered[] = [];
/** Messages that are quarantined: one not JSON, one for a job no database has. */
const QUARANTINED = 2;
let since: Date;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rc-replay-'));
  dump = join(dir, 'before-results.dump');
});

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function startDaemon(): Promise<void> {
  daemon = await t.startDaemon();
}

async function stopDaemon(): Promise<void> {
  await daemon?.stop();
  daemon = undefined;
}

/** Restore the test database from the dump, as after losing it: drop, create, pg_restore. */
async function restoreFromDump(): Promise<void> {
  await dropDatabase(t.url);
  await createDatabaseIfMissing(t.url);
  await run('pg_restore', ['--no-owner', '--exit-on-error', '-d', t.url, dump]);
}

async function replay(...args: string[]) {
  const r = await runCli(['inbox', 'replay', ...args], { DATABASE_URL: t.url, NATS_URL: t.nats.url }, 60_000);
  const json = r.stdout.filter((l) => l.startsWith('{'));
  return { ...r, summary: json.length === 1 ? (JSON.parse(json[0]!) as Record<string, unknown>) : undefined };
}

/** What a job ended as: everything but the times the database clock writes. */
async function jobOutcomes() {
  return t.db
    .selectFrom('recognition_job as j')
    .leftJoin('s3_object as o', 'o.id', 'j.result_s3_object_id')
    .innerJoin('stored_file as f', 'f.id', 'j.file_id')
    .select([
      'j.id',
      'j.status',
      'j.result_msg_id',
      'j.error_code',
      'j.error_message',
      'j.service_name',
      'j.service_version',
      'j.result_schema_version',
      'j.metrics',
      'o.bucket',
      'o.key',
      'f.status as file_status',
    ])
    .orderBy('j.id')
    .execute();
}

/** Transition rows per msg id, of every envelope the jobs were answered with. */
async function transitionsPerMsgId(): Promise<Map<string, number>> {
  const rows = await t.db
    .selectFrom('recognition_job_transition')
    .select(['msg_id', (eb) => eb.fn.countAll<string>().as('n')])
    .where('msg_id', 'is not', null)
    .groupBy('msg_id')
    .execute();
  return new Map(rows.map((r) => [r.msg_id!, Number(r.n)]));
}

async function inboxInfo() {
  const jsm = await jetstreamManager(t.nc);
  const pick = (i: ConsumerInfo) => ({
    delivered: i.delivered,
    ack_floor: i.ack_floor,
    num_pending: i.num_pending,
    num_ack_pending: i.num_ack_pending,
    num_redelivered: i.num_redelivered,
  });
  return pick(await jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER));
}

async function countRows(table: 'recognition_job_transition' | 's3_object' | 'inbox_quarantine') {
  const r = await t.db
    .selectFrom(table)
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .executeTakeFirstOrThrow();
  return Number(r.n);
}

describe('inbox replay after a restore from a backup', () => {
  let before: Awaited<ReturnType<typeof jobOutcomes>>;
  let transitionsBefore: Map<string, number>;
  let objectsBefore: number;

  it('the daemon applies the results; the backup was taken before them', async () => {
    await startDaemon();
    const jobs: JobFixture[] = [];
    for (let i = 0; i < JOBS; i++) jobs.push(await insertJob(t.db, { status: 'published' }));
    await run('pg_dump', ['-Fc', '-f', dump, '-d', t.url]);
    since = new Date();
    for (const [i, j] of jobs.entries()) {
      const ack = await t.svc.ack(j);
      const result =
        i < 14
          ? await t.svc.done(j)
          : i < 17
            ? await t.svc.error(j, 'UNSUPPORTED_FORMAT', 'xls 95 is not supported')
            : await t.svc.done(j, { status: 'needs_check' });
      answered.push({ ...j, ackSeq: ack.seq, resultSeq: result.seq, resultMsgId: `result:${j.jobId}:1` });
    }
    await t.svc.raw('not json at all', { 'Nats-Msg-Id': `junk:${randomUUID()}` });
    await t.svc.done({ jobId: randomUUID(), fileId: randomUUID() });
    await t.drained();

    before = await jobOutcomes();
    expect(before.map((j) => j.status).sort()).toEqual(
      [...Array(14).fill('done'), ...Array(3).fill('error'), ...Array(3).fill('needs_check')].sort(),
    );
    transitionsBefore = await transitionsPerMsgId();
    expect(transitionsBefore.size).toBe(2 * JOBS);
    objectsBefore = await countRows('s3_object');
    expect(await countRows('inbox_quarantine')).toBe(QUARANTINED);
  });

  it('after pg_restore of that backup, `--since` applies every result once, with core-inbox untouched', async () => {
    await stopDaemon();
    await restoreFromDump();
    expect((await jobOutcomes()).every((j) => j.status === 'published')).toBe(true);
    expect(await countRows('recognition_job_transition')).toBe(0);
    // A daemon runs meanwhile: the replay is safe beside the live inbox.
    await startDaemon();
    const inboxBefore = await inboxInfo();

    const r = await replay('--since', since.toISOString());
    expect(r.code, r.output).toBe(0);
    expect(r.summary).toMatchObject({
      stream: RESULTS_STREAM,
      firstSeq: answered[0]!.ackSeq,
      delivered: 2 * JOBS + QUARANTINED,
      applied: 2 * JOBS,
      duplicates: 0,
      ignored: 0,
      late: 0,
      quarantined: QUARANTINED,
      dryRun: false,
    });
    expect(r.stderr.at(-1)).toMatch(
      new RegExp(
        `^RECOGNITION_RESULTS sequences \\d+\\.\\.\\d+: ${2 * JOBS + QUARANTINED} delivered, ${2 * JOBS} applied`,
      ),
    );

    expect(await jobOutcomes()).toEqual(before);
    expect(await transitionsPerMsgId()).toEqual(transitionsBefore);
    expect([...(await transitionsPerMsgId()).values()].every((n) => n === 1)).toBe(true);
    expect(await countRows('s3_object')).toBe(objectsBefore);
    expect(await countRows('inbox_quarantine')).toBe(QUARANTINED);
    expect(await inboxInfo()).toEqual(inboxBefore);
    // The replay's own consumer is gone: only core-inbox remains.
    const jsm = await jetstreamManager(t.nc);
    const names: string[] = [];
    for await (const c of jsm.consumers.list(RESULTS_STREAM)) names.push(c.name);
    expect(names).toEqual([INBOX_CONSUMER]);
  });

  it('a second replay changes nothing', async () => {
    const snapshot = await snapshotTables(t.db);
    // A span back from the database clock; the stream is younger than that, and says so.
    const r = await replay('--since', '1h');
    expect(r.code, r.output).toBe(0);
    expect(r.stderr[0]).toMatch(
      /^warning: the oldest message still in RECOGNITION_RESULTS is sequence 1, stored .*: results stored before it, if any, cannot be replayed$/,
    );
    expect(r.summary).toMatchObject({
      delivered: 2 * JOBS + QUARANTINED,
      applied: 0,
      quarantined: QUARANTINED,
    });
    const s = r.summary as Record<string, number>;
    expect(s.duplicates! + s.ignored! + s.late!).toBe(2 * JOBS);
    expect(await snapshotTables(t.db)).toEqual(snapshot);
  });
});

describe('inbox replay --from-seq, --until-seq, --dry-run', () => {
  it('a dry run decides every message and writes nothing', async () => {
    await stopDaemon();
    await restoreFromDump();
    const snapshot = await snapshotTables(t.db);
    const r = await replay('--from-seq', '1', '--dry-run');
    expect(r.code, r.output).toBe(0);
    expect(r.summary).toMatchObject({ applied: 2 * JOBS, quarantined: QUARANTINED, dryRun: true });
    expect(r.stderr.at(-1)).toMatch(/^dry run, nothing written: /);
    expect(await snapshotTables(t.db)).toEqual(snapshot);
  });

  it('replays exactly the sequences asked for, and the rest from where it stopped', async () => {
    const part = answered.slice(5, 10);
    const fromSeq = part[0]!.ackSeq;
    const untilSeq = part.at(-1)!.resultSeq;
    const r = await replay('--from-seq', String(fromSeq), '--until-seq', String(untilSeq));
    expect(r.code, r.output).toBe(0);
    expect(r.summary).toMatchObject({
      firstSeq: fromSeq,
      lastSeq: untilSeq,
      endSeq: untilSeq,
      delivered: untilSeq - fromSeq + 1,
      applied: 2 * part.length,
    });
    const statuses = new Map((await jobOutcomes()).map((j) => [j.id, j.status]));
    for (const [i, j] of answered.entries())
      expect(statuses.get(j.jobId), `job ${i}`).toBe(i >= 5 && i < 10 ? 'done' : 'published');

    const rest = await replay('--from-seq', String(untilSeq + 1));
    expect(rest.code, rest.output).toBe(0);
    expect(rest.summary).toMatchObject({ firstSeq: untilSeq + 1, applied: 2 * (JOBS - 10) });
    const perMsg = await transitionsPerMsgId();
    for (const [i, j] of answered.entries()) {
      const expected = i < 5 ? undefined : 1;
      expect(perMsg.get(j.resultMsgId), `job ${i}`).toBe(expected);
    }
  });

  it('refuses a call without a start, or with two, with exit code 2', async () => {
    for (const args of [[], ['--since', '1h', '--from-seq', '3'], ['--from-seq', '0']]) {
      const r = await replay(...args);
      expect(r.code, r.output).toBe(2);
      expect(r.stderr[0], r.output).toMatch(/^(recognition-core: give either|error: option)/);
      expect(r.stdout).toEqual([]);
    }
  });
});
