/**
 * `recognition-core demo`, as a newcomer runs it (the real CLI, stdout not a terminal), with a
 * small job count. On existing servers (`--servers existing`: the test's PostgreSQL and a
 * nats-server of the test) the summary it prints equals `select status, count(*) from
 * recognition_job group by status`, and every status the reference service can cause appears:
 * done, needs_check, error and timeout.
 *
 * Next to a daemon (the contract's streams, `core-inbox` and a database with unapplied envelopes
 * on the addresses the demo is given) the demo changes nothing of it: by default it runs on
 * private servers; with `--servers existing` on a database and streams of its own, deleted after.
 *
 * Where nothing answers (the CLI in a fresh network namespace: its own loopback, no server on
 * 5432 or 4222), the demo brings its own PostgreSQL and nats-server, removes them at the end, and
 * with `--servers existing` never replaces the servers it was told to use.
 */
import { execFileSync } from 'node:child_process';
import { chmod, mkdtemp, readdir, readlink, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { AckPolicy, jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FINAL_JOB_STATUSES } from '../../machines/index.js';
import { dropDatabase, openDb } from '../../src/db/database.js';
import { provisionStreams } from '../../src/nats/provision.js';
import {
  INBOX_CONSUMER,
  JOBS_STREAM,
  RESULTS_STREAM,
  jobMsgId,
  jobSubject,
} from '../../src/nats/subjects.js';
import { runCli, spawnCli } from '../helpers/cliProcess.js';
import { insertJob, snapshotTables } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';
import { dbUrl } from '../helpers/pgUrls.js';

/** Matches the stale-database cleanup of globalSetup (rc_test_<pid>_…) and the demo's "demo" rule. */
const DEMO_DB = `rc_test_${process.pid}_${Date.now()}_demo`;
const JOBS = 40;
const t = useHarness({ nats: true });

afterAll(async () => {
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
      [
        'demo',
        '--servers',
        'existing',
        '--jobs',
        String(JOBS),
        '--seed',
        '42',
        '--database',
        DEMO_DB,
        '--timeout',
        '40',
      ],
      // DATABASE_URL names the server; the demo uses its own database on it.
      { DATABASE_URL: dbUrl('postgres'), NATS_URL: t.nats.url },
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
      [
        'demo',
        '--servers',
        'existing',
        '--trace',
        '--jobs',
        '6',
        '--seed',
        '42',
        '--database',
        `${DEMO_DB}_trace`,
        '--timeout',
        '40',
      ],
      { DATABASE_URL: dbUrl('postgres'), NATS_URL: t.nats.url },
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
      // On existing servers the job subject is the run's own: demo_<id>.recognition.job.<service>.
      const jobSubjectShown = /(?:send|process) (demo_[0-9a-f]{8}\.recognition\.job\.tabular-parser)/.exec(
        tree.join('\n'),
      )?.[1];
      expect(jobSubjectShown, tree.join('\n')).toBeDefined();
      const create = depth('recognition.job create');
      expect(depth(`send ${jobSubjectShown}`)).toBeGreaterThan(create);
      expect(depth(`process ${jobSubjectShown}`)).toBeGreaterThan(depth(`send ${jobSubjectShown}`));
      // The service's send span and the inbox's span name the subject of the envelopes (the run's own).
      const resultSubjectShown = jobSubjectShown!.replace(
        /recognition\.job\.tabular-parser$/,
        'recognition.result',
      );
      expect(depth(`process ${resultSubjectShown}`)).toBeGreaterThan(depth(`send ${resultSubjectShown}`));
      expect(tree.some((l) => l.includes(`process ${resultSubjectShown}`) && l.includes('to=done'))).toBe(
        true,
      );
      expect(tree.some((l) => l.trimStart().startsWith('pg.query'))).toBe(true);
      expect(r.stdout.join('\n')).toContain('OTEL_EXPORTER_OTLP_ENDPOINT=http://<collector>:4318');
    } finally {
      await dropDatabase(dbUrl(`${DEMO_DB}_trace`));
    }
  });

  it('refuses a database name that does not say demo (it would drop it)', async () => {
    const r = await runCli(['demo', '--database', 'recognition'], {
      DATABASE_URL: dbUrl('postgres'),
      NATS_URL: t.nats.url,
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toHaveLength(1);
    expect(r.stderr[0]).toMatch(/--database must .*"demo"/);
  });
});

/** Every stream of a NATS and every consumer on it, with the state a demo must leave as it is. */
async function natsState(jsm: JetStreamManager) {
  const streams = [];
  for await (const s of jsm.streams.list()) {
    const consumers = [];
    for await (const c of jsm.consumers.list(s.config.name)) {
      consumers.push({
        name: c.name,
        filter_subject: c.config.filter_subject,
        num_pending: c.num_pending,
        num_ack_pending: c.num_ack_pending,
        num_redelivered: c.num_redelivered,
        delivered: { consumer_seq: c.delivered.consumer_seq, stream_seq: c.delivered.stream_seq },
        ack_floor: { consumer_seq: c.ack_floor.consumer_seq, stream_seq: c.ack_floor.stream_seq },
      });
    }
    streams.push({
      name: s.config.name,
      subjects: s.config.subjects,
      messages: s.state.messages,
      first_seq: s.state.first_seq,
      last_seq: s.state.last_seq,
      consumers: consumers.sort((a, b) => a.name.localeCompare(b.name)),
    });
  }
  return streams.sort((a, b) => a.name.localeCompare(b.name));
}

describe('recognition-core demo next to a daemon on the addresses it is given', () => {
  /** The daemon's database (jobs whose envelopes wait, unapplied, in RECOGNITION_RESULTS) and nats-server. */
  const daemon = useHarness({ database: true, nats: true, client: true });
  let jsm: JetStreamManager;
  let natsBefore: Awaited<ReturnType<typeof natsState>>;
  let rowsBefore: Awaited<ReturnType<typeof snapshotTables>>;

  beforeAll(async () => {
    jsm = await jetstreamManager(daemon.nc);
    // What a daemon provisions (a long ack wait: envelopes it took stay in hand), and a service's
    // durable consumer on the jobs stream.
    await provisionStreams(jsm, {
      duplicateWindowMs: 120_000,
      replicas: 1,
      ackWaitMs: 600_000,
      maxAckPending: 1_000,
    });
    await jsm.consumers.add(JOBS_STREAM, {
      durable_name: 'tabular-parser',
      filter_subject: jobSubject('tabular-parser'),
      ack_policy: AckPolicy.Explicit,
    });
    // Five published jobs, their job messages, and the service's ack and result for each.
    const js = jetstream(daemon.nc);
    for (let i = 0; i < 5; i++) {
      const job = await insertJob(daemon.db);
      await js.publish(jobSubject('tabular-parser'), JSON.stringify({ job_id: job.jobId }), {
        msgID: jobMsgId(job.jobId, 1),
      });
      await daemon.svc.ack(job);
      await daemon.svc.done(job);
    }
    // The daemon had taken three envelopes when it stopped: delivered, never acked.
    const inbox = await js.consumers.get(RESULTS_STREAM, INBOX_CONSUMER);
    const taken: number[] = [];
    while (taken.length < 3) {
      const batch = await inbox.fetch({ max_messages: 3 - taken.length, expires: 2_000 });
      for await (const m of batch) taken.push(m.seq);
    }
    natsBefore = await natsState(jsm);
    rowsBefore = await snapshotTables(daemon.db);
    expect(natsBefore.map((x) => x.name)).toEqual([JOBS_STREAM, RESULTS_STREAM]);
    expect(natsBefore[1]).toMatchObject({ messages: 10, first_seq: 1, last_seq: 10 });
    expect(natsBefore[1]!.consumers).toEqual([
      expect.objectContaining({ name: INBOX_CONSUMER, num_pending: 7, num_ack_pending: 3 }),
    ]);
    expect(rowsBefore.jobs.map((j) => j.status)).toEqual(Array(5).fill('published'));
  });

  /** The daemon's streams, consumers and rows are exactly as recorded, and no other stream is left. */
  async function expectDaemonUntouched(): Promise<void> {
    expect(await natsState(jsm)).toEqual(natsBefore);
    expect(await snapshotTables(daemon.db)).toEqual(rowsBefore);
  }

  it("by default runs on private servers of its own, whatever NATS_URL and DATABASE_URL say: the daemon's streams, consumers and database stay as they were", async () => {
    const r = await runCli(
      ['demo', '--jobs', '20', '--seed', '7', '--timeout', '30'],
      { DATABASE_URL: daemon.url, NATS_URL: daemon.nats.url },
      90_000,
    );
    expect(r.code, r.output).toBe(0);
    expect(r.stdout).toContain(
      '  servers   private: starting a PostgreSQL and a nats-server of its own for this run',
    );
    const natsLine = r.stdout.find((l) => l.startsWith('  NATS ')) ?? '';
    expect(natsLine).toMatch(
      /nats:\/\/127\.0\.0\.1:\d+ \(streams RECOGNITION_JOBS and RECOGNITION_RESULTS\)/,
    );
    expect(natsLine).not.toContain(daemon.nats.url);
    const dbLine = r.stdout.find((l) => l.startsWith('  database ')) ?? '';
    expect(dbLine).toMatch(/postgres:\/\/postgres@127\.0\.0\.1:\d+\/recognition_demo/);
    expect(dbLine).not.toContain(`@${new URL(daemon.url).host}/`);
    const printed = parseSummary(r.stdout);
    expect(printed.get('total')).toBe(20);
    printed.delete('total');
    for (const status of printed.keys()) expect(FINAL_JOB_STATUSES).toContain(status);
    expect(r.stdout.at(-1)).toBe('Stopped and removed the private PostgreSQL and nats-server.');
    await expectDaemonUntouched();
  });

  it("with --servers existing runs on a database and streams of its own there, deletes its streams, and leaves the daemon's as they were", async () => {
    const demoDb = `rc_test_${process.pid}_${Date.now()}_demo_existing`;
    try {
      const r = await runCli(
        [
          'demo',
          '--servers',
          'existing',
          '--jobs',
          '20',
          '--seed',
          '7',
          '--timeout',
          '30',
          '--database',
          demoDb,
        ],
        { DATABASE_URL: daemon.url, NATS_URL: daemon.nats.url },
        90_000,
      );
      expect(r.code, r.output).toBe(0);
      const text = r.stdout.join('\n');
      expect(text).not.toContain('private');
      expect(text).toContain(`  database  ${dbUrl(demoDb)} (dropped and recreated)`);
      const own =
        /NATS {6}(\S+) \(streams (DEMO_([0-9A-F]{8})_RECOGNITION_JOBS) and (DEMO_\3_RECOGNITION_RESULTS) of this run's own/.exec(
          text,
        );
      expect(own, text).not.toBeNull();
      expect(own![1]).toBe(daemon.nats.url);
      expect(text).toContain(`Deleted this run's streams ${own![2]} and ${own![4]} (and their consumers).`);

      // Every demo job is final, in the demo's database.
      const db = openDb(dbUrl(demoDb), { max: 1 });
      try {
        const jobs = await db.db.selectFrom('recognition_job').select('status').execute();
        expect(jobs).toHaveLength(20);
        for (const { status } of jobs) expect(FINAL_JOB_STATUSES).toContain(status);
      } finally {
        await db.close();
      }
      // The daemon's streams, core-inbox and rows are as they were, and the demo's streams are gone.
      await expectDaemonUntouched();
    } finally {
      await dropDatabase(dbUrl(demoDb));
    }
  });
});

/** Why the network-namespace tests cannot run here, or undefined when they can. */
function isolationUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root (unshare --net); CI runs as root';
  for (const tool of ['unshare', 'ip', 'mount']) {
    try {
      execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' });
    } catch {
      return `needs ${tool} (util-linux, iproute2)`;
    }
  }
  return undefined;
}
const unavailable = isolationUnavailable();

/** Run the CLI in a fresh network namespace: only its own loopback, where nothing listens. */
const ISOLATED = [
  'unshare',
  '--net',
  '--',
  'sh',
  '-c',
  'PATH=/usr/sbin:/sbin:$PATH ip link set lo up && exec "$@"',
  'sh',
];
/** The same, with the PostgreSQL and nats-server binaries hidden (a private mount namespace too). */
const WITHOUT_BINARIES = [
  'unshare',
  '--net',
  '--mount',
  '--',
  'sh',
  '-c',
  [
    'for d in "$(pg_config --bindir 2>/dev/null)" /usr/lib/postgresql; do [ -d "$d" ] && mount -t tmpfs none "$d"; done',
    'for b in /usr/sbin/nats-server /usr/bin/nats-server /usr/local/bin/nats-server; do [ -e "$b" ] && mount --bind /dev/null "$b"; done',
    'PATH=/usr/sbin:/sbin:$PATH ip link set lo up',
    'exec "$@"',
  ].join('; '),
  'sh',
];

/** Processes whose working directory or command line lies under `dir` (a server left behind). */
async function processesUnder(dir: string): Promise<number[]> {
  const found: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const [cwd, cmdline] = await Promise.all([
      readlink(`/proc/${entry}/cwd`).catch(() => ''),
      readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => ''),
    ]);
    if (cwd.startsWith(dir) || cmdline.includes(dir)) found.push(Number(entry));
  }
  return found;
}

describe.skipIf(unavailable !== undefined)(
  `recognition-core demo where nothing answers${unavailable ? ` (skipped: ${unavailable})` : ''}`,
  () => {
    /** The CLI's TMPDIR: every private server's directory goes here, so leftovers are visible. */
    let tmp: string;
    beforeEach(async () => {
      tmp = await mkdtemp(join(tmpdir(), 'rc-demo-tmp-'));
      // initdb runs as the postgres user when the demo is root: it must reach its directory.
      await chmod(tmp, 0o755);
    });
    afterEach(async () => {
      // A CLI killed at the time bound cannot clean up: stop what it left, then remove the dir.
      for (const pid of await processesUnder(tmp)) process.kill(pid, 'SIGKILL');
      await rm(tmp, { recursive: true, force: true });
    });

    /** Nothing of the private servers remains: no directory in TMPDIR, no process using it. */
    async function expectNothingLeft(): Promise<void> {
      expect(await readdir(tmp)).toEqual([]);
      expect(await processesUnder(tmp)).toEqual([]);
    }

    it('on a machine where nothing runs, starts a private PostgreSQL and nats-server, finishes, and removes them', async () => {
      const r = await runCli(
        ['demo', '--jobs', '20', '--seed', '7', '--timeout', '40'],
        { DATABASE_URL: '', NATS_URL: '', TMPDIR: tmp },
        { wrapper: ISOLATED, timeoutMs: 90_000 },
      );
      expect(r.code, r.output).toBe(0);
      expect(r.stdout).toContain(
        '  servers   private: starting a PostgreSQL and a nats-server of its own for this run',
      );
      const pgLine = r.stdout.find((l) => l.includes('private PostgreSQL  postgres://')) ?? '';
      expect(pgLine).toContain(tmp);
      expect(pgLine).not.toContain(':5432/');
      expect(parseSummary(r.stdout).get('total')).toBe(20);
      expect(r.stdout.join('\n')).toMatch(/Finished in [\d.]+ s\./);
      expect(r.stdout.at(-1)).toBe('Stopped and removed the private PostgreSQL and nats-server.');
      expect(r.stderr).toEqual([]);
      await expectNothingLeft();
    });

    it('Ctrl-C stops the run, prints the summary and still removes the private servers', async () => {
      const cli = spawnCli(
        ['demo', '--jobs', '3000', '--timeout', '60'],
        { TMPDIR: tmp },
        { wrapper: ISOLATED },
      );
      const progress = new Promise<void>((resolve, reject) => {
        const poll = setInterval(() => {
          if (cli.lines.some((l) => / final · /.test(l.text))) {
            clearInterval(poll);
            resolve();
          }
        }, 50);
        void cli.exited.then(() => {
          clearInterval(poll);
          reject(new Error(`the demo exited before showing progress:\n${cli.output()}`));
        });
      });
      await progress;
      cli.child.kill('SIGINT');
      const { code } = await cli.exited;
      const stdout = cli.lines.filter((l) => l.stream === 'stdout').map((l) => l.text);
      expect(code, cli.output()).toBe(1);
      expect(stdout).toContain('interrupted: stopping before every job is final');
      expect(parseSummary(stdout).get('total')).toBeGreaterThan(0);
      expect(stdout.at(-1)).toBe('Stopped and removed the private PostgreSQL and nats-server.');
      await expectNothingLeft();
    });

    it('--servers existing never replaces the servers it was told to use: one line naming the variable, nothing started', async () => {
      const r = await runCli(
        ['demo', '--servers', 'existing', '--jobs', '5'],
        { DATABASE_URL: '', NATS_URL: '', TMPDIR: tmp },
        { wrapper: ISOLATED },
      );
      expect(r.code).toBe(1);
      expect(r.stderr).toHaveLength(1);
      expect(r.stderr[0]).toMatch(
        /^recognition-core: PostgreSQL at postgres:\/\/postgres@127\.0\.0\.1:5432\/recognition_demo \(DATABASE_URL\): .*ECONNREFUSED/,
      );
      expect(r.stdout.join('\n')).not.toContain('private');
      await expectNothingLeft();
    });

    it('without the binaries it prints the one command that installs them and exits 1', async () => {
      const r = await runCli(
        ['demo', '--jobs', '5'],
        { PATH: '/usr/bin:/bin', TMPDIR: tmp },
        { wrapper: WITHOUT_BINARIES },
      );
      expect(r.code, r.output).toBe(1);
      expect(r.stderr).toHaveLength(1);
      expect(r.stderr[0]).toMatch(
        /a private PostgreSQL and nats-server of its own, but postgresql and nats-server are not installed \(or run it on your servers with --servers existing\)/,
      );
      expect(r.stderr[0]).toMatch(/Install with: apt-get install -y postgresql nats-server$/);
      await expectNothingLeft();
    });
  },
);
