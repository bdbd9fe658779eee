/**
 * `recognition-core demo`, as a newcomer runs it (the real CLI, stdout not a terminal), with a
 * small job count, its own demo database and a private nats-server. The summary it prints equals
 * `select status, count(*) from recognition_job group by status`, and every status the reference
 * service can cause appears: done, needs_check, error and timeout.
 *
 * Where nothing answers (the CLI in a fresh network namespace: its own loopback, no server on
 * 5432 or 4222), the demo brings its own PostgreSQL and nats-server for unset variables, removes
 * them at the end, and never replaces a server named explicitly.
 */
import { execFileSync } from 'node:child_process';
import { chmod, mkdtemp, readdir, readlink, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { dropDatabase, openDb } from '../../src/db/database.js';
import { runCli, spawnCli } from '../helpers/cliProcess.js';
import { startNatsServer, type NatsServerHandle } from '../../src/localServers/natsServer.js';
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

    it('starts a private PostgreSQL and nats-server for unset (empty) variables, finishes, and removes them', async () => {
      const r = await runCli(
        ['demo', '--jobs', '20', '--seed', '7', '--timeout', '40'],
        { DATABASE_URL: '', NATS_URL: '', TMPDIR: tmp },
        { wrapper: ISOLATED, timeoutMs: 90_000 },
      );
      expect(r.code, r.output).toBe(0);
      const text = r.stdout.join('\n');
      expect(text).toMatch(
        /nothing answers at 127\.0\.0\.1:5432 and DATABASE_URL is unset: starting a private PostgreSQL/,
      );
      expect(text).toMatch(
        /nothing answers at 127\.0\.0\.1:4222 and NATS_URL is unset: starting a private nats-server/,
      );
      const pgLine = r.stdout.find((l) => l.includes('private PostgreSQL  postgres://')) ?? '';
      expect(pgLine).toContain(tmp);
      expect(pgLine).not.toContain(':5432/');
      expect(parseSummary(r.stdout).get('total')).toBe(20);
      expect(text).toMatch(/Finished in [\d.]+ s\./);
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

    it('never replaces a server named explicitly: one line naming the variable, nothing started', async () => {
      const r = await runCli(
        ['demo', '--jobs', '5'],
        {
          DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/recognition',
          NATS_URL: 'nats://127.0.0.1:4222',
          TMPDIR: tmp,
        },
        { wrapper: ISOLATED },
      );
      expect(r.code).toBe(1);
      expect(r.stderr).toHaveLength(1);
      expect(r.stderr[0]).toMatch(
        /^recognition-core: PostgreSQL at postgres:\/\/postgres@127\.0\.0\.1:5432\/\S+ \(DATABASE_URL\): .*ECONNREFUSED/,
      );
      expect(r.stdout.join('\n')).not.toContain('private');
      await expectNothingLeft();
    });

    it('an explicit NATS_URL that does not answer fails on it, and the private PostgreSQL started for the unset DATABASE_URL is removed', async () => {
      const r = await runCli(
        ['demo', '--jobs', '5'],
        { NATS_URL: 'nats://127.0.0.1:4222', TMPDIR: tmp },
        { wrapper: ISOLATED, timeoutMs: 60_000 },
      );
      expect(r.code, r.output).toBe(1);
      expect(r.stdout.join('\n')).toContain('starting a private PostgreSQL');
      expect(r.stdout.join('\n')).not.toContain('private nats-server');
      expect(r.stdout.at(-1)).toBe('Stopped and removed the private PostgreSQL.');
      expect(r.stderr).toHaveLength(1);
      expect(r.stderr[0]).toMatch(/^recognition-core: NATS at nats:\/\/127\.0\.0\.1:4222 \(NATS_URL\): /);
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
        /PostgreSQL \(127\.0\.0\.1:5432, DATABASE_URL unset\) and NATS \(127\.0\.0\.1:4222, NATS_URL unset\) do not answer/,
      );
      expect(r.stderr[0]).toMatch(/Install with: apt-get install -y postgresql nats-server$/);
      await expectNothingLeft();
    });
  },
);
