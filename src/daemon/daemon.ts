/**
 * The daemon: one process running the inbox, the watchdog, the publisher and retention, with
 * health and metrics over HTTP. `startDaemon` brings it up in order and `stop` takes it down in
 * reverse.
 */
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { sql } from 'kysely';
import type { Config } from '../config.js';
import type { ClientConfig } from 'pg';
import { migrationStatus, openDb, type Db } from '../db/database.js';
import { pgConnection } from '../db/pgTls.js';
import { decisionPath, unlockedKinds } from '../../machines/index.js';
import { MigrationsPendingError } from '../errors.js';
import type { Logger } from '../logger.js';
import { createMetrics, type Metrics } from '../metrics.js';
import { connectFailureReason, connectNats, type Nats } from '../nats/connection.js';
import { oneAtATime, provisionStreams } from '../nats/provision.js';
import { CONTRACT_NAMES, type ExchangeNames } from '../nats/subjects.js';
import {
  readiness,
  startHttpServer,
  type HttpServer,
  type ReadinessChecks,
  type RouteHandler,
} from '../http/server.js';
import type { ConsoleServer } from '../console/server.js';
import { startInbox, type Inbox, type InboxOptions } from './inbox.js';
import { startCommitProbe, type CommitProbe } from './commitProbe.js';
import { createStatechartRoutes } from '../statecharts/livePage.js';
import { startHttpFigures, type HttpFigures } from '../http/figures.js';
import { sharedAnswer } from '../http/shared.js';
import { createDeadLetters, type DeadLetters } from './deadLetters.js';
import { createPublisher, type Publisher } from './publisher.js';
import { createWatchdog, type Watchdog } from './watchdog.js';
import { createRetention, retentionSettings, type Retention } from './retention.js';
import { createRollup, type RollupLoop } from './rollup.js';

export interface DaemonOptions {
  config: Config;
  logger: Logger;
  /** Which loops to run (all by default); tests and benchmarks run parts. */
  loops?: {
    inbox?: boolean;
    watchdog?: boolean;
    publisher?: boolean;
    deadLetters?: boolean;
    http?: boolean;
    /** The retention loop (also off when `RETENTION_INTERVAL_MS` is 0). */
    retention?: boolean;
    /** The transition rollup of the console's counts (also off when `ROLLUP_INTERVAL_MS` is 0). */
    rollup?: boolean;
  };
  /** Extra HTTP pages (default: the live statechart, /statechart and /statechart.json). */
  routes?: (d: { db: Db; metrics: Metrics; figures: HttpFigures }) => Record<string, RouteHandler>;
  /**
   * The streams, subjects and inbox consumer to run on: the contract's by default; the demo on
   * shared servers gives a namespaced set of its own.
   */
  names?: ExchangeNames;
  /** Test hook passed to the inbox. */
  beforeInboxBatch?: InboxOptions['beforeBatch'];
  /** Test hook passed to the inbox. */
  afterInboxCommit?: InboxOptions['afterCommit'];
}

export interface Daemon {
  db: Db;
  nats: Nats;
  metrics: Metrics;
  http: HttpServer | undefined;
  /** The operator console's listener (when `CONSOLE_PORT` is set). */
  console: ConsoleServer | undefined;
  /** The HTTP endpoints' database figures, on a connection of their own (with the `http` loop). */
  figures: HttpFigures | undefined;
  inbox: Inbox | undefined;
  watchdog: Watchdog | undefined;
  publisher: Publisher | undefined;
  deadLetters: DeadLetters | undefined;
  retention: Retention | undefined;
  rollup: RollupLoop | undefined;
  /** Graceful stop: stop pulling, finish and commit in-flight work, drain NATS, close the pool. */
  stop(): Promise<void>;
}

/** Readiness of the database: a trivial query answers. */
async function dbReachable(db: Db): Promise<boolean> {
  await sql`SELECT 1`.execute(db.db);
  return true;
}

/**
 * A connection of the HTTP endpoints (the figures', the database check's): a pool of one, apart
 * from the daemon's, so requests never take a connection the loops need. The figures read
 * bounds its own statement (src/db/figures.ts); the check waits at most its connection timeout.
 */
function openFiguresDb(cfg: Config, logger: Logger, applicationName: string): Db {
  return openDb(cfg.DATABASE_URL, {
    max: 1,
    applicationName,
    unnamedStatements: cfg.DATABASE_POOLER === 'transaction',
    connectionTimeoutMillis: cfg.HTTP_FIGURES_TIMEOUT_MS,
    onIdleError: (err) =>
      logger.warn({ err, event: 'db_idle_error' }, 'idle PostgreSQL connection (HTTP figures) failed'),
  });
}

/**
 * Where the publisher LISTENs: `DATABASE_LISTEN_URL` when set; else the pool's own settings
 * (undefined), but behind a transaction-mode pooler nowhere (null): LISTEN needs a session, which
 * such a pooler gives no client beyond a transaction.
 */
function listenConnectionOf(cfg: Config): ClientConfig | null | undefined {
  if (cfg.DATABASE_LISTEN_URL) return pgConnection(cfg.DATABASE_LISTEN_URL);
  return cfg.DATABASE_POOLER === 'transaction' ? null : undefined;
}

/**
 * Start the daemon:
 *   1. open the pool; the database must answer and carry every migration of this build (else
 *      refuse); migrations it carries that this build does not know are logged and counted;
 *   2. connect to NATS; create or update the streams and core-inbox (unless NATS_PROVISION=false);
 *   3. start the watchdog, the publisher, the dead-letter consumer, retention and the rollup;
 *   4. serve /healthz, /readyz, /metrics, and the operator console when CONSOLE_PORT is set;
 *   5. start the inbox, last: a start that fails has taken no envelope (they would wait out the
 *      ack wait before another instance got them), and the first envelopes of a backlog do not
 *      share the process's one thread with the start-up of everything else.
 * A step that fails stops what the earlier ones started.
 */
export async function startDaemon(opts: DaemonOptions): Promise<Daemon> {
  const { config: cfg, logger } = opts;
  const names = opts.names ?? CONTRACT_NAMES;
  const loops = {
    inbox: true,
    watchdog: true,
    publisher: true,
    deadLetters: true,
    http: true,
    retention: true,
    rollup: true,
    ...opts.loops,
  };

  // 1. Database.
  const db = openDb(cfg.DATABASE_URL, {
    max: cfg.DB_POOL_SIZE,
    unnamedStatements: cfg.DATABASE_POOLER === 'transaction',
    onIdleError: (err) => logger.warn({ err, event: 'db_idle_error' }, 'idle PostgreSQL connection failed'),
  });
  let nats: Nats | undefined;
  let commitProbe: CommitProbe | undefined;
  let http: HttpServer | undefined;
  let figuresDb: Db | undefined;
  let checkDb: Db | undefined;
  let figures: HttpFigures | undefined;
  let inbox: Inbox | undefined;
  let consoleDb: Db | undefined;
  let operatorConsole: ConsoleServer | undefined;
  /** The loops started so far: a start that fails later stops them again. */
  const started: Array<{ stop(): Promise<void> }> = [];
  try {
    const migrations = await migrationStatus(db.db).catch((err: unknown) => {
      throw new Error(`PostgreSQL (DATABASE_URL) is not usable: ${(err as Error).message}`, { cause: err });
    });
    const pending = migrations.filter((m) => m.state === 'pending').map((m) => m.name);
    if (pending.length > 0) throw new MigrationsPendingError(pending);
    // Migrations of a newer version: it runs on (an older version tolerates additive migrations,
    // and only those are allowed, docs/operations.md), and says so once.
    const unknown = migrations.filter((m) => m.state === 'unknown').map((m) => m.name);
    if (unknown.length > 0)
      logger.warn(
        { event: 'db_unknown_migrations', migrations: unknown },
        `the database carries ${unknown.length} migration(s) this version does not know (${unknown.join(', ')}): a newer version migrated it; running on`,
      );

    // 2. NATS.
    nats = await connectNats(cfg, logger).catch((err: unknown) => {
      throw new Error(`NATS (NATS_URL) is not usable: ${connectFailureReason(cfg, err)}`, { cause: err });
    });
    const jsm = await jetstreamManager(nats.nc);
    // Provisioning again is how the loops heal a stream or consumer that disappears under them.
    const provision = cfg.NATS_PROVISION
      ? oneAtATime(() =>
          provisionStreams(jsm, {
            duplicateWindowMs: cfg.NATS_DUPLICATE_WINDOW_MS,
            replicas: cfg.NATS_STREAM_REPLICAS,
            ackWaitMs: cfg.INBOX_ACK_WAIT_MS,
            maxAckPending: cfg.INBOX_MAX_ACK_PENDING,
            maxEnvelopeBytes: cfg.MAX_ENVELOPE_BYTES,
            names,
          }),
        )
      : undefined;
    await provision?.();
    const js = jetstream(nats.nc);
    // The checks of /readyz, also exported as `recognition_ready{check}`; the commit probe's and
    // the consumer's are added below.
    const n = nats;
    // With HTTP, the database figures and the database check run on a connection of their own.
    if (loops.http) {
      figuresDb = openFiguresDb(cfg, logger, 'recognition-core-http');
      checkDb = openFiguresDb(cfg, logger, 'recognition-core-http-check');
    }
    const checks: ReadinessChecks = {
      database: () => figures?.databaseCheck() ?? dbReachable(db),
      nats: () => n.isConnected(),
    };
    // The inbox's lag, for /metrics and the console: one JetStream request a second at most.
    const inboxPending = sharedAnswer(async () => {
      const info = await jsm.consumers.info(names.resultsStream, names.inboxConsumer);
      return { pending: info.num_pending, ackPending: info.num_ack_pending };
    }, 1_000);
    const metrics = createMetrics({
      // A scrape takes the database check's last answer: it never waits for PostgreSQL.
      readiness: async () =>
        (
          await readiness({
            ...checks,
            database: () => figures?.lastDatabaseCheck() ?? checks.database!(),
          })
        ).checks,
      jobsByStatus: () => Promise.resolve(figures?.current()),
      inboxPending,
    });
    // Readiness follows progress too: `commits` is red while a write transaction cannot commit.
    if (loops.http) {
      const probe = startCommitProbe({
        pool: db.pool,
        intervalMs: cfg.READINESS_COMMIT_INTERVAL_MS,
        timeoutMs: cfg.READINESS_COMMIT_TIMEOUT_MS,
        logger,
        observe: (seconds, ok) =>
          metrics.commitProbeDuration.observe({ result: ok ? 'committed' : 'failed' }, seconds),
      });
      commitProbe = probe;
      checks.commits = () => probe.check();
    }

    metrics.unknownMigrations.set(unknown.length);

    // 3. The loops, but the inbox: it starts last (5).
    const watchdog = loops.watchdog
      ? createWatchdog({
          db: db.db,
          pool: db.pool,
          logger,
          metrics,
          intervalMs: cfg.WATCHDOG_INTERVAL_MS,
          batchSize: cfg.WATCHDOG_BATCH_SIZE,
          concurrency: cfg.WATCHDOG_CONCURRENCY,
        })
      : undefined;
    watchdog?.start();
    if (watchdog) started.push(watchdog);
    const publisher = loops.publisher
      ? createPublisher({
          db: db.db,
          pool: db.pool,
          listenConnection: listenConnectionOf(cfg),
          js,
          isConnected: nats.isConnected,
          onReconnect: nats.onReconnect,
          provision,
          logger,
          metrics,
          config: cfg,
          names,
        })
      : undefined;
    await publisher?.start();
    if (publisher) started.push(publisher);
    // NATS is red too while the publisher waits out an outage the connection does not show
    // (a frozen server, JetStream unavailable).
    if (publisher) checks.nats = () => n.isConnected() && publisher.isNatsAvailable();
    const deadLetters = loops.deadLetters
      ? createDeadLetters({ db: db.db, nc: nats.nc, jsm, logger, metrics, stream: names.jobsStream })
      : undefined;
    await deadLetters?.start();
    if (deadLetters) started.push(deadLetters);
    const retention =
      loops.retention && cfg.RETENTION_INTERVAL_MS > 0
        ? createRetention({
            db: db.db,
            logger,
            metrics,
            settings: retentionSettings(cfg),
            intervalMs: cfg.RETENTION_INTERVAL_MS,
          })
        : undefined;
    retention?.start();
    if (retention) started.push(retention);
    const rollup =
      loops.rollup && cfg.ROLLUP_INTERVAL_MS > 0
        ? createRollup({ db: db.db, logger, metrics, intervalMs: cfg.ROLLUP_INTERVAL_MS })
        : undefined;
    rollup?.start();
    if (rollup) started.push(rollup);

    // 4. HTTP. /readyz's consumer check is red until the inbox is bound, and while its batches
    // fail for a fault that is not the messages'. The first figures are read before the server
    // listens, so its first scrape has them.
    if (loops.inbox)
      checks.consumer = () => {
        if (!inbox?.isBound()) return false;
        const reason = inbox.applyFailure();
        return reason === undefined ? true : { ok: false, reason };
      };
    if (figuresDb) {
      figures = startHttpFigures({
        db: figuresDb,
        checkDb,
        intervalMs: cfg.HTTP_FIGURES_INTERVAL_MS,
        statementTimeoutMs: cfg.HTTP_FIGURES_TIMEOUT_MS,
        logger,
        onRead: (ok) => metrics.httpFiguresReads.inc({ result: ok ? 'ok' : 'failed' }),
      });
      await figures.first;
    }
    const f = figures;
    http = f
      ? await startHttpServer({
          host: cfg.HTTP_HOST,
          port: cfg.HTTP_PORT,
          logger,
          registry: metrics.registry,
          readiness: checks,
          routes: (opts.routes ?? createStatechartRoutes)({ db, metrics, figures: f }),
        })
      : undefined;
    // The operator console, on a listener and a pool of its own, when CONSOLE_PORT is set.
    if (cfg.CONSOLE_PORT !== null) {
      consoleDb = openDb(cfg.DATABASE_URL, {
        max: 2,
        applicationName: 'recognition-core-console',
        unnamedStatements: cfg.DATABASE_POOLER === 'transaction',
        connectionTimeoutMillis: cfg.CONSOLE_TIMEOUT_MS,
        onIdleError: (err) =>
          logger.warn({ err, event: 'db_idle_error' }, 'idle PostgreSQL connection (console) failed'),
      });
      const { startConsole } = await import('../console/server.js');
      operatorConsole = await startConsole({
        config: cfg,
        db: consoleDb.db,
        logger,
        inboxLag: loops.inbox ? inboxPending : undefined,
      });
    }
    // 5. The inbox, last.
    inbox = loops.inbox
      ? await startInbox({
          db: db.db,
          pool: db.pool,
          js,
          logger,
          metrics,
          batchSize: cfg.INBOX_BATCH_SIZE,
          concurrency: cfg.INBOX_CONCURRENCY,
          lingerMs: cfg.INBOX_LINGER_MS,
          maxEnvelopeBytes: cfg.MAX_ENVELOPE_BYTES,
          quarantinePayloadMaxBytes: cfg.QUARANTINE_PAYLOAD_MAX_BYTES,
          resultsBucket: cfg.RESULTS_BUCKET,
          ackWaitMs: cfg.INBOX_ACK_WAIT_MS,
          names,
          provision,
          beforeBatch: opts.beforeInboxBatch,
          afterCommit: opts.afterInboxCommit,
        })
      : undefined;

    // Which way decisions are made: the machine's compiled table, or xstate and why (decide.ts).
    const decisions = decisionPath();
    // A kind of envelope without an unlocked decision takes the inbox's locked path every time.
    const unexpected = [...unlockedKinds()].filter(([, statuses]) => typeof statuses === 'string');
    if (unexpected.length > 0) {
      logger.warn(
        { event: 'unlocked_decisions_refused', kinds: Object.fromEntries(unexpected) },
        'some envelopes have no unlocked decision: the inbox decides them on locked rows, more slowly',
      );
    }
    logger.info(
      {
        event: 'started',
        http_port: http?.port,
        console_port: operatorConsole?.port,
        loops,
        decision_path: decisions.path,
        ...(decisions.path === 'xstate' ? { decision_path_reason: decisions.reason } : {}),
      },
      `recognition-core started${http ? ` (http on port ${http.port})` : ''}`,
    );

    let stopped: Promise<void> | undefined;
    return {
      db,
      nats,
      metrics,
      http,
      console: operatorConsole,
      figures,
      inbox,
      watchdog,
      publisher,
      deadLetters,
      retention,
      rollup,
      stop() {
        stopped ??= (async () => {
          logger.info({ event: 'stopping' }, 'stopping: finishing in-flight work');
          await Promise.all([
            inbox?.stop(),
            watchdog?.stop(),
            publisher?.stop(),
            deadLetters?.stop(),
            commitProbe?.stop(),
            retention?.stop(),
            rollup?.stop(),
          ]);
          await n.nc.drain().catch(() => undefined);
          await http?.close();
          await operatorConsole?.close();
          await consoleDb?.close();
          await figures?.stop();
          await figuresDb?.close();
          await checkDb?.close();
          await db.close();
          logger.info({ event: 'stopped' }, 'stopped');
        })();
        return stopped;
      },
    };
  } catch (err) {
    await Promise.allSettled(started.map((loop) => loop.stop()));
    await http?.close().catch(() => undefined);
    await operatorConsole?.close().catch(() => undefined);
    await consoleDb?.close().catch(() => undefined);
    await figures?.stop();
    await figuresDb?.close().catch(() => undefined);
    await checkDb?.close().catch(() => undefined);
    await commitProbe?.stop();
    await nats?.nc.close().catch(() => undefined);
    await db.close().catch(() => undefined);
    throw err;
  }
}
