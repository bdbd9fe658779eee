/**
 * The demo: the whole exchange on one machine, for a newcomer (servers, the daemon in-process, the
 * reference service, N jobs, live progress and a summary). This module runs the steps in order and
 * stops what it started, whatever happens. It never touches a daemon's state: private servers by
 * default; with `servers: 'existing'` a database and exchange of its own (`demoNames`), deleted at
 * the end.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { loadConfig, redactUrl, secretsOf, type Config } from '../../src/config.js';
import { startDaemon, type Daemon } from '../../src/daemon/daemon.js';
import {
  createDatabaseIfMissing,
  dropDatabase,
  migrateToLatest,
  openDb,
  type Db,
} from '../../src/db/database.js';
import { addFile, createJob } from '../../src/db/jobs.js';
import { UsageError } from '../../src/errors.js';
import { createLogger, type Logger } from '../../src/logger.js';
import { provideDemoServers, type DemoServerChoice, type DemoServers } from './demoServers.js';
import { connectNats, type Nats } from '../../src/nats/connection.js';
import { CONTRACT_NAMES, demoNames, type ExchangeNames } from '../../src/nats/subjects.js';
import {
  DEFAULT_WEIGHTS,
  startTabularParser,
  TABULAR_PARSER,
  type FateWeights,
  type TabularParserService,
  type TabularParserStats,
} from '../reference/tabularParserService.js';
import { startJobCreateTrace } from '../../src/tracing/jobSpans.js';
import { runTraced } from '../../src/tracing/tracing.js';
import { watchUntilFinal, type DemoOut } from './progress.js';
import { reportRun, type DemoTrace, type Say, type StatusCount } from './report.js';

/**
 * Settings that make the whole lifecycle visible in seconds instead of minutes: a 3 s reply
 * timeout (so silent jobs time out while the newcomer watches), a watchdog every 500 ms, quick
 * publisher polls, quiet logs (progress is the demo's output) and HTTP on any free port.
 */
const DEMO_OVERRIDES = {
  REPLY_TIMEOUT_MS: '3000',
  WATCHDOG_INTERVAL_MS: '500',
  PUBLISHER_POLL_INTERVAL_MS: '500',
  PUBLISH_BACKOFF_BASE_MS: '200',
  PUBLISH_BACKOFF_MAX_MS: '2000',
  LOG_LEVEL: 'warn',
  LOG_PRETTY: 'false',
  HTTP_HOST: '127.0.0.1',
  HTTP_PORT: '0',
  NATS_PROVISION: 'true',
  CONSOLE_HOST: '127.0.0.1',
  CONSOLE_PORT: '0',
} as const;

/** The operator console's sign-in of the demo: a token file of its own, one operator, every action. */
function demoConsoleToken(): { file: string; token: string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'recognition-demo-console-'));
  const token = randomBytes(18).toString('base64url');
  const file = join(dir, 'tokens');
  writeFileSync(file, `demo:${token}\n`, { mode: 0o600 });
  return { file, token, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Files and jobs created at once: quick, without starving the daemon's pool. */
const CREATE_CONCURRENCY = 8;

export interface DemoOptions {
  /** Environment to read DATABASE_URL, NATS_URL and NATS credentials from (`servers: 'existing'`). */
  env?: NodeJS.ProcessEnv;
  /**
   * `private` (default): a PostgreSQL and a nats-server of the demo's own, removed at the end.
   * `existing`: DATABASE_URL's and NATS_URL's servers, with a database and streams of its own.
   */
  servers?: DemoServerChoice;
  /** Number of files (one job each). */
  jobs: number;
  /** Seed of the service's mix. */
  seed: number;
  /** Demo database on the PostgreSQL used; dropped and recreated. Must contain `demo`. */
  database: string;
  /** Give up waiting for final statuses after this long. */
  timeoutMs: number;
  weights?: FateWeights;
  /** Where progress and the summary go (default stdout). */
  out?: DemoOut;
  /** Where the daemon's warn/error log lines go (default stderr). */
  logTo?: NodeJS.WritableStream;
  /** Resolves (or aborts) to stop waiting early, e.g. on Ctrl-C. */
  signal?: AbortSignal;
  /**
   * `--trace`: after the summary, say where the traces went and which trace id is a job's; with
   * the local receiver `demo --trace` starts, print that job's span tree.
   */
  trace?: DemoTrace | undefined;
  /** `--hold`: once every job is final, keep the daemon and its console up until `signal` aborts. */
  hold?: boolean | undefined;
}

export interface DemoResult {
  /** `select status, count(*) from recognition_job group by status`, at the end. */
  counts: StatusCount[];
  /** Every job reached a final status within the bound. */
  allFinal: boolean;
  service: TabularParserStats;
  wallMs: number;
  databaseUrl: string;
}

/** Run `fn` over `items` with at most `n` at once. */
async function eachLimited<T>(items: readonly T[], n: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(n, items.length) }, async () => {
      while (next < items.length) await fn(items[next++]!);
    }),
  );
}

/**
 * Run the demo end to end and print as it goes. Resolves with the final counts (read from the
 * database after everything stopped) whether or not every job became final in time.
 *   1. servers: private ones, removed at the end whatever happens, or the existing ones
 *      (`provideDemoServers`);
 *   2. configuration: that PostgreSQL with the demo database, that NATS, demo overrides; the
 *      exchange's names: the contract's on private servers, the demo's own on existing ones;
 *   3. database: drop, create, migrate;
 *   4. NATS: connect (the daemon creates the streams and the inbox consumer of those names);
 *   5. the daemon, in-process;
 *   6. the reference service, on its own NATS connection as a separate process would be;
 *   7. files and jobs;
 *   8. progress until every job is final (bounded);
 *   9. stop the service and the daemon, delete the demo's own streams on existing servers; read
 *      and print the summary.
 */
export async function runDemo(opts: DemoOptions): Promise<DemoResult> {
  const started = Date.now();
  const out = opts.out ?? process.stdout;
  const say = (line = '') => out.write(`${line}\n`);
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(opts.database) || !/demo/i.test(opts.database)) {
    // The demo drops this database: never let a typo point it at real data.
    throw new UsageError(
      `--database must be a plain PostgreSQL name containing "demo" (it is dropped and recreated): ${JSON.stringify(opts.database)}`,
    );
  }
  if (!Number.isInteger(opts.jobs) || opts.jobs < 1)
    throw new UsageError('--jobs must be a whole number of at least 1');

  say(`recognition-core demo: ${opts.jobs} jobs, seed ${opts.seed}`);

  // 1. Servers: private ones unless asked for the existing ones.
  const servers = await provideDemoServers({
    env: opts.env ?? process.env,
    say,
    servers: opts.servers ?? 'private',
  });
  const consoleToken = demoConsoleToken();
  try {
    return await runOn(servers, opts, { started, out, say, consoleToken });
  } finally {
    consoleToken.remove();
    await servers.close();
    if (servers.privateServers) say('Stopped and removed the private PostgreSQL and nats-server.');
  }
}

/**
 * Delete the streams of this run's own exchange on shared servers; their consumers go with them.
 * Only names of `demoNames` (streams `DEMO_…`) are deleted, never another stream. A failure is
 * reported with the command that finishes the job, and does not fail the demo.
 */
async function deleteOwnStreams(
  admin: Nats,
  names: ExchangeNames,
  logger: Logger,
  say: (line?: string) => void,
): Promise<void> {
  const streams = [names.jobsStream, names.resultsStream];
  if (streams.some((s) => !s.startsWith('DEMO_')))
    throw new Error(`not a demo's streams: ${streams.join(', ')}`);
  const left: string[] = [];
  for (const stream of streams) {
    try {
      const jsm = await jetstreamManager(admin.nc, { checkAPI: false });
      await jsm.streams.delete(stream);
    } catch (err) {
      if (/stream not found/i.test((err as Error).message)) continue;
      logger.error({ err, stream }, 'deleting a stream of the demo failed');
      left.push(stream);
    }
  }
  if (left.length === 0) say(`Deleted this run's streams ${streams.join(' and ')} (and their consumers).`);
  else say(`Could not delete this run's ${left.join(' and ')}: nats stream rm -f ${left.join(' ')}`);
}

/** Steps 2 to 9 of {@link runDemo}, on the servers chosen. */
async function runOn(
  servers: DemoServers,
  opts: DemoOptions,
  {
    started,
    out,
    say,
    consoleToken,
  }: { started: number; out: DemoOut; say: Say; consoleToken: { file: string; token: string } },
): Promise<DemoResult> {
  // 2. Configuration.
  const env = servers.env;
  const base = loadConfig(env);
  const dbUrl = new URL(base.DATABASE_URL);
  dbUrl.pathname = `/${opts.database}`;
  const config: Config = loadConfig({
    ...env,
    ...DEMO_OVERRIDES,
    DATABASE_URL: dbUrl.toString(),
    CONSOLE_TOKEN_FILE: consoleToken.file,
  });
  const logger: Logger = createLogger({
    level: config.LOG_LEVEL,
    secrets: secretsOf(config),
    destination: (opts.logTo ?? process.stderr) as { write(s: string): void },
  });
  const weights = opts.weights ?? DEFAULT_WEIGHTS;
  const shownDb = redactUrl(config.DATABASE_URL);
  // One id names this run's exchange on shared servers (and its files' keys): its streams cannot
  // overlap a daemon's or another demo's.
  const run = randomUUID().replace(/-/g, '').slice(0, 8);
  const names: ExchangeNames = servers.privateServers ? CONTRACT_NAMES : demoNames(run);
  say(`  database  ${shownDb} (dropped and recreated)`);
  say(
    servers.privateServers
      ? `  NATS      ${redactUrl(config.NATS_URL)} (streams ${names.jobsStream} and ${names.resultsStream})`
      : `  NATS      ${redactUrl(config.NATS_URL)} (streams ${names.jobsStream} and ${names.resultsStream} of this run's own, deleted at the end; no other stream is touched)`,
  );

  // 3. Database.
  try {
    await dropDatabase(config.DATABASE_URL);
    await createDatabaseIfMissing(config.DATABASE_URL);
  } catch (err) {
    throw new Error(`PostgreSQL at ${shownDb} (DATABASE_URL): ${(err as Error).message}`, { cause: err });
  }
  const db = openDb(config.DATABASE_URL, {
    max: CREATE_CONCURRENCY + 1,
    applicationName: 'recognition-core-demo',
  });
  let admin: Nats | undefined;
  let daemon: Daemon | undefined;
  let serviceNats: Nats | undefined;
  let service: TabularParserService | undefined;
  let allFinal = false;
  try {
    try {
      await migrateToLatest(db.db);

      // 4. NATS: reachable (the daemon provisions the streams of `names`).
      admin = await connectNats(config, logger, { name: 'recognition-core-demo' }).catch((err: unknown) => {
        throw new Error(`NATS at ${redactUrl(config.NATS_URL)} (NATS_URL): ${(err as Error).message}`, {
          cause: err,
        });
      });

      // 5. The daemon.
      daemon = await startDaemon({ config, logger, names });
      say(
        `  daemon    reply timeout ${config.REPLY_TIMEOUT_MS} ms, watchdog every ${config.WATCHDOG_INTERVAL_MS} ms, metrics http://127.0.0.1:${daemon.http?.port}/metrics`,
      );
      if (daemon.console)
        say(
          `  console   http://127.0.0.1:${daemon.console.port}/ (sign in with the token ${consoleToken.token}; open while the demo runs)`,
        );

      // 6. The reference service.
      serviceNats = await connectNats(config, logger, { name: TABULAR_PARSER });
      service = await startTabularParser({
        nc: serviceNats.nc,
        seed: opts.seed,
        weights,
        replyDelayMs: 300,
        logger,
        names,
      });
      const mix = Object.entries(weights)
        .map(([k, v]) => `${k === 'silent' ? 'never answers' : k} ${v}`)
        .join(' / ');
      say(`  service   ${TABULAR_PARSER} (seed ${opts.seed}): ${mix}`);
      say();

      // 7. Files and jobs, created while 8. the progress is shown until every job is final, or the bound.
      let createFailed: unknown;
      const creating = createFilesAndJobs(db, run, opts).catch((err: unknown) => {
        createFailed = err ?? new Error('creating jobs failed');
      });
      allFinal = await watchUntilFinal({
        db,
        out,
        total: opts.jobs,
        deadline: started + opts.timeoutMs,
        signal: opts.signal,
        failed: () => createFailed,
      });
      await creating;
      const signal = opts.signal;
      if (opts.hold && signal && !signal.aborted) {
        say();
        say('holding: the daemon and its console stay up until Ctrl-C');
        await new Promise<void>((resolve) =>
          signal.addEventListener('abort', () => resolve(), { once: true }),
        );
      }
      if (!allFinal) {
        say();
        say(
          opts.signal?.aborted
            ? 'interrupted: stopping before every job is final'
            : `not every job became final within ${opts.timeoutMs / 1000} s`,
        );
      }
    } finally {
      // 9. Stop everything (service first: it holds jobs in hand), then read the summary.
      await service?.stop().catch((err: unknown) => logger.error({ err }, 'stopping the service failed'));
      await serviceNats?.nc.drain().catch(() => undefined);
      await daemon?.stop().catch((err: unknown) => logger.error({ err }, 'stopping the daemon failed'));
      if (admin && names !== CONTRACT_NAMES) await deleteOwnStreams(admin, names, logger, say);
      await admin?.nc.close().catch(() => undefined);
    }
    const stats = service!.stats();
    const { counts, wallMs } = await reportRun({
      db,
      out,
      say,
      started,
      stats,
      privateServers: servers.privateServers,
      shownDb,
      trace: opts.trace,
    });
    return { counts, allFinal, service: stats, wallMs, databaseUrl: config.DATABASE_URL };
  } finally {
    await db.close();
  }
}

/**
 * Step 7 of {@link runDemo}: `opts.jobs` files and a job for each, a few at once, until done or
 * `opts.signal` aborts. With tracing on, each job's creation is a span and the row keeps its
 * context: the job's publish, the service's work and the inbox's apply join its trace.
 */
async function createFilesAndJobs(db: Db, run: string, opts: DemoOptions): Promise<void> {
  const indexes = Array.from({ length: opts.jobs }, (_, i) => i + 1);
  await eachLimited(indexes, CREATE_CONCURRENCY, async (i) => {
    if (opts.signal?.aborted) return;
    const n = String(i).padStart(4, '0');
    const file = await addFile(db.db, {
      bucket: 'arm-ka',
      key: `uploads/demo-${run}/statement-${n}.xlsx`,
      name: `statement-${n}.xlsx`,
      createdBy: 'demo',
    });
    const traced = startJobCreateTrace({ parent: undefined, fileId: file.id, targetService: TABULAR_PARSER });
    const job = await runTraced(traced, () =>
      createJob(db.db, { fileId: file.id, targetService: TABULAR_PARSER, traceContext: traced?.carrier }),
    );
    traced?.end(job.id);
  });
}
