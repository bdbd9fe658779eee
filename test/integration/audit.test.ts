/**
 * The audit log as an operator meets it: the built CLI records each retry, quarantine replay and
 * purge it runs (who, what, on which selection, how many, the note), records no dry run, keeps an
 * action that failed part-way with its error, and `audit list` prints the rows newest first.
 */
import { userInfo } from 'node:os';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { listAudit } from '../../src/db/audit.js';
import { audited } from '../../src/cli/auditActions.js';
import { runCli } from '../helpers/cliProcess.js';
import { insertJob } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true });

const cli = (args: string[]) => runCli(args, { DATABASE_URL: t.url });

/** The audit rows newest first, without their ids and times. */
async function auditRows() {
  return (await listAudit(t.db, { limit: 100 })).map(({ id: _id, at: _at, ...row }) => row);
}

async function quarantinedUnknownJob(seq: number) {
  const jobId = '00000000-0000-4000-8000-00000000000' + String(seq % 10);
  return t.db
    .insertInto('inbox_quarantine')
    .values({
      stream: 'RECOGNITION_RESULTS',
      stream_seq: seq,
      subject: 'recognition.result',
      msg_id: `ack:${jobId}:1`,
      job_id: jobId,
      reason: 'UNKNOWN_JOB',
      details: JSON.stringify({ message: 'UNKNOWN_JOB' }),
      payload: Buffer.from(
        JSON.stringify({
          job_id: jobId,
          status: 'processing',
          service: { name: 'tabular-parser', version: '1' },
        }),
      ),
      headers: JSON.stringify({ 'Nats-Msg-Id': [`ack:${jobId}:1`] }),
    })
    .returning('id')
    .executeTakeFirstOrThrow();
}

describe('the audit log', () => {
  it('records a retry with its actor, selection, count, new attempt and note; a dry run not at all', async () => {
    await sql`TRUNCATE recognition_audit`.execute(t.db);
    const failed = await insertJob(t.db, { status: 'error', error_code: 'SERVICE_ERROR' });
    const dry = await cli(['jobs', 'retry', failed.jobId, '--dry-run', '--note', 'just looking']);
    expect(dry.code, dry.output).toBe(0);
    expect(await auditRows()).toEqual([]);

    const r = await cli(['jobs', 'retry', failed.jobId, '--json', '--note', 'parser fixed in 2.3']);
    expect(r.code, r.output).toBe(0);
    const attempt = (JSON.parse(r.stdout[0]!) as { id: string }).id;
    expect(await auditRows()).toEqual([
      {
        actor: userInfo().username,
        via: 'cli',
        action: 'jobs retry',
        selection: { job_id: failed.jobId },
        affected: 1,
        outcome: { selected: 1, attempts: [attempt] },
        note: 'parser fixed in 2.3',
      },
    ]);
  });

  it('records a bulk retry with its filter and how many it retried', async () => {
    await sql`TRUNCATE recognition_audit`.execute(t.db);
    for (let i = 0; i < 3; i++) await insertJob(t.db, { status: 'timeout', error_code: 'TIMEOUT' });
    const r = await cli(['jobs', 'retry', '--status', 'timeout', '--limit', '2', '--json']);
    expect(r.code, r.output).toBe(0);
    const [row] = await auditRows();
    expect(row).toMatchObject({
      action: 'jobs retry',
      selection: { status: ['timeout'], service: null, since: null, limit: 2 },
      affected: 2,
      note: null,
    });
    expect((row!.outcome as { attempts: string[] }).attempts).toHaveLength(2);
  });

  it('records a quarantine replay with its outcomes and a purge with how many went', async () => {
    await sql`TRUNCATE recognition_audit`.execute(t.db);
    const { id } = await quarantinedUnknownJob(880_001);
    const replay = await cli(['quarantine', 'replay', id, '--note', 'after the restore']);
    // The job is still unknown: the message stays quarantined, and the command says so.
    expect(replay.code, replay.output).toBe(1);
    await quarantinedUnknownJob(880_002);
    const purge = await cli(['quarantine', 'purge', '--older-than', '2000-01-01', '--dry-run']);
    expect(purge.code, purge.output).toBe(0);
    await sql`UPDATE inbox_quarantine SET received_at = now() - interval '10 days'`.execute(t.db);
    const purged = await cli(['quarantine', 'purge', '--older-than', '7d', '--reason', 'UNKNOWN_JOB']);
    expect(purged.code, purged.output).toBe(0);
    expect(await auditRows()).toEqual([
      expect.objectContaining({
        action: 'quarantine purge',
        selection: { older_than: { agoMs: 7 * 86_400_000 }, reason: 'UNKNOWN_JOB' },
        affected: 2,
      }),
      expect.objectContaining({
        action: 'quarantine replay',
        selection: { id },
        affected: 1,
        outcome: { 'still quarantined: UNKNOWN_JOB': 1 },
        note: 'after the restore',
      }),
    ]);
  });

  it('keeps an action that failed part-way, with its error and what it had done', async () => {
    await sql`TRUNCATE recognition_audit`.execute(t.db);
    const entry = { action: 'quarantine purge', selection: { reason: null }, affected: 0 } as const;
    await expect(
      audited(t.db, { ...entry }, async (e) => {
        e.affected = 3;
        throw new Error('connection lost');
      }),
    ).rejects.toThrow('connection lost');
    expect(await auditRows()).toEqual([
      expect.objectContaining({
        action: 'quarantine purge',
        affected: 3,
        outcome: { error: 'connection lost' },
      }),
    ]);
  });

  it('audit list prints the rows newest first, filtered, as JSON lines or a table', async () => {
    await sql`TRUNCATE recognition_audit`.execute(t.db);
    for (const action of ['quarantine purge', 'jobs retry'] as const)
      await t.db
        .insertInto('recognition_audit')
        .values({ actor: 'alice', via: 'console', action, selection: '{}', affected: 1, note: 'n' })
        .execute();
    const all = await cli(['audit', 'list', '--json']);
    expect(all.code, all.output).toBe(0);
    expect(all.stdout.map((l) => (JSON.parse(l) as { action: string }).action)).toEqual([
      'jobs retry',
      'quarantine purge',
    ]);
    const one = await cli(['audit', 'list', '--json', '--action', 'quarantine purge', '--since', '1h']);
    expect(one.stdout.map((l) => (JSON.parse(l) as { action: string }).action)).toEqual(['quarantine purge']);
    const none = await cli(['audit', 'list', '--json', '--actor', 'bob']);
    expect(none.stdout).toEqual([]);
    const table = await cli(['audit', 'list', '--table']);
    expect(table.stdout[0]).toMatch(/^ID +AT +ACTOR +VIA +ACTION +AFFECTED +SELECTION +NOTE$/);
    const wrong = await cli(['audit', 'list', '--action', 'jobs delete']);
    expect(wrong.code).toBe(2);
  });
});
