/**
 * The database-backed figures of the HTTP endpoints (`recognition_jobs` on /metrics, the counts of
 * /statechart, the `database` check of /readyz), read on connections of their own and served from
 * memory: a request never queries the database. One statement every `intervalMs`; a failed read
 * keeps the last figures (docs/operations.md).
 */
import { sql } from 'kysely';
import type { Db } from '../db/database.js';
import { readFigures, type DbFigures } from '../db/figures.js';
import type { Logger } from '../logger.js';
import { sharedAnswer } from './shared.js';

/** The `database` check's answer is reused for this long. */
export const DATABASE_CHECK_REUSE_MS = 1_000;

export interface HttpFigures {
  /** The last figures read, or undefined when none could be read yet. Never waits. */
  current(): DbFigures | undefined;
  /** Resolves once the first read has ended, whether or not it succeeded. */
  readonly first: Promise<void>;
  /** Why the last read failed, while it did; undefined after a success. */
  lastError(): string | undefined;
  /** The `database` readiness check: `SELECT 1` on the check's connection, shared, at most once a second. */
  databaseCheck(): Promise<boolean>;
  /**
   * The last answer of {@link HttpFigures.databaseCheck} without waiting (a new check is started
   * when due); undefined before the first answer.
   */
  lastDatabaseCheck(): boolean | undefined;
  /** Stop the loop and wait for a read in flight. The caller closes the connection. */
  stop(): Promise<void>;
}

export interface HttpFiguresOptions {
  /** A pool of one connection, of its own (never the daemon's). */
  db: Db;
  /** Another pool of one connection, for the `database` check (default: `db`). */
  checkDb?: Db | undefined;
  intervalMs: number;
  /** Bound of each figures read (its statement timeout). */
  statementTimeoutMs?: number;
  logger: Logger;
  /** Called after each read: whether it succeeded. */
  onRead?: (ok: boolean) => void;
  /** The read itself (tests count or slow it). */
  read?: (db: Db['db']) => Promise<DbFigures>;
}

/** Start the loop; its first read starts now. */
export function startHttpFigures(opts: HttpFiguresOptions): HttpFigures {
  const read =
    opts.read ?? ((db: Db['db']) => readFigures(db, { statementTimeoutMs: opts.statementTimeoutMs }));
  let figures: DbFigures | undefined;
  let error: string | undefined;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let wake: (() => void) | undefined;
  let markFirst!: () => void;
  const first = new Promise<void>((resolve) => (markFirst = resolve));

  const readOnce = async () => {
    try {
      figures = await read(opts.db.db);
      if (error !== undefined)
        opts.logger.info({ event: 'http_figures_recovered' }, 'HTTP figures read again');
      error = undefined;
      opts.onRead?.(true);
    } catch (err) {
      // One line per failure streak: a database that stays away does not fill the log.
      if (error === undefined)
        opts.logger.warn(
          { err, event: 'http_figures_failed' },
          'reading the HTTP figures failed; serving the last ones',
        );
      error = err instanceof Error ? err.message : String(err);
      opts.onRead?.(false);
    }
  };
  const loop = (async () => {
    while (!stopped) {
      const started = Date.now();
      await readOnce();
      markFirst();
      // The next read starts an interval after this one started: at most one per interval.
      const wait = Math.max(0, opts.intervalMs - (Date.now() - started));
      await new Promise<void>((resolve) => {
        wake = resolve;
        timer = setTimeout(resolve, wait);
      });
    }
  })();

  let lastCheck: boolean | undefined;
  const checkDb = opts.checkDb ?? opts.db;
  const databaseCheck = sharedAnswer(
    () =>
      sql`SELECT 1`.execute(checkDb.db).then(
        () => (lastCheck = true),
        (err: unknown) => {
          lastCheck = false;
          throw err;
        },
      ),
    DATABASE_CHECK_REUSE_MS,
  );
  return {
    current: () => figures,
    first,
    lastError: () => error,
    databaseCheck,
    lastDatabaseCheck() {
      databaseCheck().catch(() => undefined);
      return lastCheck;
    },
    async stop() {
      stopped = true;
      clearTimeout(timer);
      wake?.();
      await loop;
    },
  };
}
