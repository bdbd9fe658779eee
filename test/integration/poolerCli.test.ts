/**
 * The operator's commands through PgBouncer in transaction mode (`DATABASE_POOLER=transaction`):
 * `jobs list`, `jobs retry`, `quarantine replay`, `quarantine purge` and `inbox replay` work on a
 * database they reach only through the pooler.
 */
import { jetstreamManager } from '@nats-io/jetstream';
import { sql } from 'kysely';
import { beforeAll, describe, expect, it } from 'vitest';
import { provisionStreams } from '../../src/nats/provision.js';
import { runCli } from '../helpers/cliProcess.js';
import { insertJob } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';
import { insertProcessingJobs } from '../helpers/poolerScenario.js';

const t = useHarness({ database: true, nats: true, client: true });
let env: Record<string, string>;

beforeAll(async () => {
  // Two server connections for the commands' pools: each transaction may land on either.
  const bouncer = await t.startPgbouncer({ mode: 'transaction', poolSize: 2 });
  env = { DATABASE_URL: bouncer.url(t.dbName), DATABASE_POOLER: 'transaction', NATS_URL: t.nats.url };
});

const statusOf = async (id: string) =>
  (await t.db.selectFrom('recognition_job').select('status').where('id', '=', id).executeTakeFirstOrThrow())
    .status;

/** Quarantine `body` as the inbox would, for a job it did not find. */
async function quarantineUnknown(body: Record<string, unknown>, seq: number): Promise<string> {
  const { rows } = await sql<{ id: string }>`
    INSERT INTO inbox_quarantine (stream, stream_seq, subject, msg_id, job_id, reason, details, payload, headers)
    VALUES ('RECOGNITION_RESULTS', ${seq}, 'recognition.result', ${`result:${String(body.job_id)}:1`},
            ${body.job_id as string}, 'UNKNOWN_JOB', '{}', ${Buffer.from(JSON.stringify(body))},
            ${JSON.stringify({ 'Nats-Msg-Id': [`result:${String(body.job_id)}:1`] })})
    RETURNING id`.execute(t.db);
  return rows[0]!.id;
}

describe('operator commands through a transaction-mode pooler', () => {
  it('jobs list and jobs retry', async () => {
    const failed = await insertJob(t.db, {
      status: 'error',
      finished_at: sql<Date>`now()` as never,
      error_code: 'X',
    });
    const list = await runCli(['jobs', 'list', '--status', 'error', '--json'], env);
    expect(list.code, list.output).toBe(0);
    expect(list.stdout.map((l) => (JSON.parse(l) as { id: string }).id)).toContain(failed.jobId);
    const retry = await runCli(['jobs', 'retry', failed.jobId], env);
    expect(retry.code, retry.output).toBe(0);
    const attempts = await t.db
      .selectFrom('recognition_job')
      .select(['attempt', 'status'])
      .where('file_id', '=', failed.fileId)
      .orderBy('attempt')
      .execute();
    expect(attempts).toEqual([
      { attempt: 1, status: 'error' },
      { attempt: 2, status: 'pending' },
    ]);
  });

  it('quarantine replay and quarantine purge', async () => {
    const [job] = await insertProcessingJobs(t, 1);
    const body = {
      job_id: job!.jobId,
      status: 'done',
      service: { name: 'tabular-parser', version: '2.3.1' },
      result_s3: { bucket: 'arm-ka', key: `results/${job!.fileId}/${job!.jobId}/result.json` },
      result_schema_version: '1.0',
      sent_at: new Date().toISOString(),
    };
    const id = await quarantineUnknown(body, 900_001);
    const replay = await runCli(['quarantine', 'replay', id], env);
    expect(replay.code, replay.output).toBe(0);
    expect(await statusOf(job!.jobId)).toBe('done');
    const purge = await runCli(
      ['quarantine', 'purge', '--older-than', new Date(Date.now() + 60_000).toISOString()],
      env,
    );
    expect(purge.code, purge.output).toBe(0);
    expect(await t.db.selectFrom('inbox_quarantine').select('id').execute()).toEqual([]);
  });

  it('inbox replay applies the results stream', async () => {
    const jsm = await jetstreamManager(t.nc);
    await provisionStreams(jsm, {
      duplicateWindowMs: 120_000,
      replicas: 1,
      ackWaitMs: 30_000,
      maxAckPending: 1000,
    });
    const jobs = await insertProcessingJobs(t, 50);
    await Promise.all(jobs.map((j) => t.svc.done(j)));
    // Twice: the second run finds every result applied (idempotent), through other server connections.
    for (let run = 0; run < 2; run++) {
      const r = await runCli(['inbox', 'replay', '--from-seq', '1'], env, 60_000);
      expect(r.code, r.output).toBe(0);
    }
    const statuses = await t.db
      .selectFrom('recognition_job')
      .select('status')
      .where(
        'id',
        'in',
        jobs.map((j) => j.jobId),
      )
      .execute();
    expect(statuses.every((s) => s.status === 'done')).toBe(true);
    expect(
      Number(
        (
          await sql<{
            n: string;
          }>`SELECT count(*) AS n FROM recognition_job_transition WHERE to_status = 'done'
                                   AND job_id = ANY(${jobs.map((j) => j.jobId)}::uuid[])`.execute(t.db)
        ).rows[0]!.n,
      ),
    ).toBe(jobs.length);
  });
});
