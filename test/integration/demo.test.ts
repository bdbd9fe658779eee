/**
 * `recognition-core demo`, as a newcomer runs it (the real CLI, stdout not a terminal), with a
 * small job count, its own demo database and a private nats-server. The summary it prints equals
 * `select status, count(*) from recognition_job group by status`, and every status the reference
 * service can cause appears: done, needs_check, error and timeout.
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropDatabase, openDb } from '../../src/db/database.js';
import { runCli } from '../helpers/cliProcess.js';
import { startNatsServer, type NatsServerHandle } from '../helpers/natsServer.js';
import { dbUrl } from '../helpers/pgUrls.js';

/** Matches the stale-database cleanup of globalSetup (rc_test_<pid>_…) and the demo's "demo" rule. */
const DEMO_DB = `rc_test_${process.pid}_${Date.now()}_demo`;
const JOBS = 40;
let nats: NatsServerHandle;

beforeAll(async () => {
  nats = await startNatsServer();
});

afterAll(async () => {
  await nats?.cleanup();
  await dropDatabase(dbUrl(DEMO_DB));
});

/** The rows of the printed summary table (between the header and the total). */
function parseSummary(stdout: string[]): Map<string, number> {
  const start = stdout.findIndex((l) => l.startsWith('Summary'));
  expect(start, stdout.join('\n')).toBeGreaterThanOrEqual(0);
  const rows = new Map<string, number>();
  for (const line of stdout.slice(start + 1)) {
    const m = /^\s*([a-z_]+)\s+\|\s+(\d+)\s*$/.exec(line);
    if (m && m[1] !== 'status') rows.set(m[1]!, Number(m[2]));
  }
  return rows;
}

describe('recognition-core demo', () => {
  it('ends with a summary that matches the database and shows every status the service causes', async () => {
    const started = Date.now();
    const r = await runCli(
      ['demo', '--jobs', String(JOBS), '--seed', '42', '--database', DEMO_DB, '--timeout', '40'],
      // DATABASE_URL names the server; the demo uses its own database on it.
      { DATABASE_URL: dbUrl('postgres'), NATS_URL: nats.url },
      60_000,
    );
    const wallMs = Date.now() - started;
    expect(r.code, r.output).toBe(0);
    expect(wallMs).toBeLessThan(40_000);

    const printed = parseSummary(r.stdout);
    const total = printed.get('total');
    printed.delete('total');
    expect(total).toBe(JOBS);

    const db = openDb(dbUrl(DEMO_DB), { max: 1 });
    try {
      const { rows } = await sql<{ status: string; count: string }>`
        select status, count(*) from recognition_job group by status`.execute(db.db);
      expect(printed).toEqual(new Map(rows.map((x) => [x.status, Number(x.count)])));
    } finally {
      await db.close();
    }
    for (const status of ['done', 'needs_check', 'error', 'timeout']) {
      expect(printed.get(status), `${status} in\n${r.output}`).toBeGreaterThan(0);
    }
    // What the service did adds up with what the core recorded: silence became timeout.
    const said = r.stdout.find((l) => l.startsWith('The service answered')) ?? '';
    expect(said).toContain(`never answered ${printed.get('timeout')} `);
    expect(said).toContain(`done ${printed.get('done')},`);

    // The newcomer is told where to look next.
    const text = r.stdout.join('\n');
    expect(text).toContain('visualizations/recognition-job.md');
    expect(text).toMatch(/recognition-core jobs show [0-9a-f-]{36}/);
    expect(text).toMatch(/recognition-core jobs history [0-9a-f-]{36}/);
    // Not a terminal: plain progress lines, no cursor control.
    expect(r.stdout.some((l) => /^\s+\[\s*[\d.]+ s\] \d+\/40 final/.test(l))).toBe(true);
    expect(text).not.toContain('\u001b[');
  });

  it("--trace exports to a receiver of its own and prints one job's trace as a tree, and where to send traces instead", async () => {
    const r = await runCli(
      ['demo', '--trace', '--jobs', '6', '--seed', '42', '--database', `${DEMO_DB}_trace`, '--timeout', '40'],
      { DATABASE_URL: dbUrl('postgres'), NATS_URL: nats.url },
      60_000,
    );
    try {
      expect(r.code, r.output).toBe(0);
      const start = r.stdout.findIndex((l) => l.startsWith("One job's trace"));
      expect(start, r.output).toBeGreaterThan(0);
      const m = /job ([0-9a-f-]{36}) \(done\), trace id ([0-9a-f]{32})/.exec(r.stdout[start]!);
      expect(m, r.stdout[start]).not.toBeNull();
      // The trace id printed is the one stored on the job's row.
      const db = openDb(dbUrl(`${DEMO_DB}_trace`), { max: 1 });
      try {
        const row = await db.db
          .selectFrom('recognition_job')
          .select('trace_parent')
          .where('id', '=', m![1]!)
          .executeTakeFirstOrThrow();
        expect(row.trace_parent?.split('-')[1]).toBe(m![2]);
      } finally {
        await db.close();
      }
      // The tree: the publish, under it the service's work, under that the inbox applying its envelopes.
      const tree = r.stdout.slice(start + 1).filter((l) => /^\s{2,}\S/.test(l));
      const depth = (name: string) => {
        const line = tree.find((l) => l.trimStart().startsWith(name));
        expect(line, `${name} in\n${tree.join('\n')}`).toBeDefined();
        return line!.length - line!.trimStart().length;
      };
      const create = depth('recognition.job create');
      expect(depth('send recognition.job.tabular-parser')).toBeGreaterThan(create);
      expect(depth('process recognition.job.tabular-parser')).toBeGreaterThan(
        depth('send recognition.job.tabular-parser'),
      );
      expect(depth('process recognition.result')).toBeGreaterThan(depth('send recognition.result'));
      expect(tree.some((l) => l.includes('process recognition.result') && l.includes('to=done'))).toBe(true);
      expect(tree.some((l) => l.trimStart().startsWith('pg.query'))).toBe(true);
      expect(r.stdout.join('\n')).toContain('OTEL_EXPORTER_OTLP_ENDPOINT=http://<collector>:4318');
    } finally {
      await dropDatabase(dbUrl(`${DEMO_DB}_trace`));
    }
  });

  it('refuses a database name that does not say demo (it would drop it)', async () => {
    const r = await runCli(['demo', '--database', 'recognition'], {
      DATABASE_URL: dbUrl('postgres'),
      NATS_URL: nats.url,
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toHaveLength(1);
    expect(r.stderr[0]).toMatch(/--database must .*"demo"/);
  });
});
