/**
 * Errors in the log name their cause: a daemon with every loop running loses its database (cut at
 * a TCP proxy) or its nats-server (stopped) and logs for a few seconds; no line carries an error
 * without a message, and the errors say what failed.
 */
import { describe, expect, it } from 'vitest';
import { insertJob } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';
import { waitFor, type TestDaemon } from '../helpers/testDaemon.js';

const t = useHarness({ database: true, nats: true, client: true });

/** Every loop, each running every few hundred milliseconds. */
const BUSY = {
  loops: { inbox: true, watchdog: true, publisher: true, deadLetters: true, http: true, retention: true },
  env: {
    LOG_LEVEL: 'info',
    WATCHDOG_INTERVAL_MS: '200',
    PUBLISHER_POLL_INTERVAL_MS: '200',
    PUBLISH_BACKOFF_BASE_MS: '200',
    PUBLISH_BACKOFF_MAX_MS: '500',
    PUBLISH_TIMEOUT_MS: '500',
    RETENTION_INTERVAL_MS: '300',
    READINESS_COMMIT_INTERVAL_MS: '200',
    INBOX_ACK_WAIT_MS: '2000',
    DB_POOL_SIZE: '4',
  },
};

/** A key whose value is an error by its name: `err`, `error`, `cause`, `…_err`, `…Error`. */
const ERROR_KEY = /^(err|error|cause)$|(_err|_error|Err|Error)$/;

/** The error records of a line, under any error key, however deep; each with its path. */
function errorsOf(value: unknown, path = ''): Array<[string, unknown]> {
  if (value === null || typeof value !== 'object') return [];
  const out: Array<[string, unknown]> = [];
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    const at = path ? `${path}.${k}` : k;
    if (ERROR_KEY.test(k) && v !== undefined) out.push([at, v]);
    if (k === 'errors' && Array.isArray(v)) v.forEach((e, i) => out.push([`${at}[${i}]`, e]));
    out.push(...errorsOf(v, at));
  }
  return out;
}

/** What is wrong with an error as a line shows it: nothing for a non-empty text or a record with a message. */
function problem(value: unknown): string | undefined {
  if (typeof value === 'string') return value.trim() ? undefined : 'an empty text';
  if (value === null || typeof value !== 'object') return `not an error: ${JSON.stringify(value)}`;
  const { type, message } = value as { type?: unknown; message?: unknown };
  if (typeof message !== 'string' || message.trim() === '') return `no message: ${JSON.stringify(value)}`;
  if (typeof type !== 'string' || type === '') return `no type: ${JSON.stringify(value)}`;
  return undefined;
}

/** An error's message with those of its causes and aggregated errors: what it says went wrong. */
function said(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value === null || typeof value !== 'object') return '';
  const { message, cause, errors } = value as { message?: unknown; cause?: unknown; errors?: unknown };
  return [
    typeof message === 'string' ? message : '',
    said(cause),
    ...(Array.isArray(errors) ? errors.map(said) : []),
  ].join(' | ');
}

/** Lines logged since `from` that carry an error, with each error found on them. */
function errorLines(daemon: TestDaemon, from: number) {
  return daemon.logs.lines
    .slice(from)
    .map((line) => ({ line, errors: errorsOf(line) }))
    .filter((l) => l.errors.length > 0);
}

/** Assert that every error on every line has a message and says `cause`; returns the events seen. */
function checkErrorLines(lines: ReturnType<typeof errorLines>, cause: RegExp): Set<string> {
  const problems: string[] = [];
  for (const { line, errors } of lines) {
    for (const [path, value] of errors) {
      const p = problem(value);
      if (p) problems.push(`${String(line.event)} ${path}: ${p}`);
    }
    const top = errors.find(([path]) => !path.includes('.'))?.[1];
    if (!cause.test(said(top))) problems.push(`${String(line.event)}: ${JSON.stringify(top)} names no cause`);
  }
  expect(problems).toEqual([]);
  return new Set(lines.map((l) => String(l.line.event)));
}

async function seedWork(): Promise<void> {
  // Pending jobs for the publisher, jobs past their deadline for the watchdog.
  await Promise.all([
    ...Array.from({ length: 5 }, () => insertJob(t.db, { status: 'pending' })),
    ...Array.from({ length: 5 }, () =>
      insertJob(t.db, { status: 'published', reply_deadline: new Date(Date.now() + 2_000) }),
    ),
  ]);
}

describe('a daemon whose database goes away', () => {
  it('logs every error with its message and its cause, in every loop', async () => {
    const pg = new URL(t.url);
    const proxy = await t.proxy({ host: pg.hostname, port: Number(pg.port) });
    const viaProxy = new URL(t.url);
    viaProxy.port = String(proxy.port);
    const daemon = await t.startDaemon({ ...BUSY, databaseUrl: viaProxy.toString() });
    try {
      const jobs = await Promise.all(Array.from({ length: 20 }, () => insertJob(t.db)));
      await seedWork();
      const from = daemon.logs.lines.length;
      proxy.cut();
      // Results keep coming while the database is away: the inbox retries them.
      for (const j of jobs) await t.svc.done(j);
      const wanted = [
        'batch_retry',
        'commit_probe_failed',
        'publisher_round_failed',
        'watchdog_sweep_failed',
        'retention_pass_failed',
      ];
      await waitFor(
        () => {
          const events = new Set(errorLines(daemon, from).map((l) => l.line.event));
          return wanted.every((e) => events.has(e));
        },
        `lines of ${wanted.join(', ')}`,
        20_000,
      );
      // A few seconds more of the outage, for whatever else logs in it.
      await new Promise((r) => setTimeout(r, 2_000));
      const lines = errorLines(daemon, from);
      const events = checkErrorLines(lines, /ECONNRESET|ECONNREFUSED|EPIPE|connection/i);
      expect([...events]).toEqual(expect.arrayContaining(wanted));
    } finally {
      proxy.restore();
      await daemon.stop();
    }
  });
});

describe('a daemon whose nats-server is stopped', () => {
  it('logs every error with its message, and the outage with its cause', async () => {
    const nats = await t.startNats();
    const daemon = await t.startDaemon({ ...BUSY, natsUrl: nats.url });
    try {
      const from = daemon.logs.lines.length;
      await nats.stop();
      // Jobs fall due for the publisher while NATS is away, and deadlines pass for the watchdog.
      await seedWork();
      const unavailable = await waitFor(
        () => daemon.logs.lines.slice(from).find((l) => l.event === 'publisher_nats_unavailable'),
        'the publisher to report the outage',
      );
      await new Promise((r) => setTimeout(r, 3_000));
      expect(unavailable.reason).toMatch(/NATS is not connected|timeout|closed|connection/i);
      checkErrorLines(errorLines(daemon, from), /NATS|connect|closed|timeout|no responders/i);
      // The loops that need only PostgreSQL go on.
      expect(daemon.logs.lines.slice(from).some((l) => l.event === 'watchdog_sweep')).toBe(true);
    } finally {
      await nats.restart();
      await daemon.stop();
    }
  });
});
