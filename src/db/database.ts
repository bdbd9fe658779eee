/**
 * Connections to PostgreSQL: the pool, the typed Kysely handle, creating the database and
 * running migrations. Everything that knows about `pg` lives under `src/db/`.
 */
import {
  DEFAULT_MIGRATION_TABLE,
  Kysely,
  Migrator,
  PostgresDialect,
  sql,
  type MigrationResult,
} from 'kysely';
import pg from 'pg';
import { isUnusableConnection } from '../errors.js';
import { migrations } from './migrations/index.js';
import { pgConnection } from './pgTls.js';
import type { Database } from './schema.js';

/** A typed database handle and the pool behind it. */
export interface Db {
  db: Kysely<Database>;
  pool: pg.Pool;
  close(): Promise<void>;
}

export interface DbOptions {
  /** Pool size: enough for the inbox's concurrency plus the watchdog and publisher. */
  max?: number;
  /** How long to wait for a connection before failing (a retryable error for the loops). */
  connectionTimeoutMillis?: number;
  /** Called on errors of idle clients (a restarted server), so they are logged, not thrown. */
  onIdleError?: (err: Error) => void;
  applicationName?: string;
  /**
   * Send every statement unnamed, also those the hot paths name to have them prepared once per
   * connection: behind a transaction-mode pooler (`DATABASE_POOLER=transaction`) each transaction
   * may get another server connection, where a named statement is missing or already exists.
   */
  unnamedStatements?: boolean;
}

const defaultTimestamptz = pg.types.getTypeParser(pg.types.builtins.TIMESTAMPTZ, 'text') as (
  text: string,
) => Date;

/**
 * `timestamptz` text → Date, fast: PostgreSQL's ISO output (`2026-11-30 01:43:13.123456+00`, the
 * offset `±HH` or `±HH:MM`) is made an ISO 8601 string for the engine's native parser; anything
 * else (other DateStyles, BC dates, years past 9999, `infinity`, offsets with seconds) goes to
 * pg's own parser. Same Date either way (fractions below a millisecond are dropped by both). The
 * step reads two of these per job (its reply deadline and the database clock), so the parser is
 * on the inbox's hot path (see docs/performance.md).
 */
export function parseTimestamptz(text: string): Date {
  const n = text.length;
  if (n >= 22 && text.charCodeAt(4) === 45 && text.charCodeAt(10) === 32) {
    let iso: string | undefined;
    const c3 = text.charCodeAt(n - 3);
    if (c3 === 43 || c3 === 45) iso = `${text.slice(0, 10)}T${text.slice(11)}:00`;
    else if (c3 === 58 && (text.charCodeAt(n - 6) === 43 || text.charCodeAt(n - 6) === 45))
      iso = `${text.slice(0, 10)}T${text.slice(11)}`;
    if (iso !== undefined) {
      const ms = Date.parse(iso);
      if (!Number.isNaN(ms)) return new Date(ms);
    }
  }
  return defaultTimestamptz(text);
}

/** The pool's type parsers: pg's, except {@link parseTimestamptz}. */
const types = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === pg.types.builtins.TIMESTAMPTZ && format !== 'binary'
      ? parseTimestamptz
      : pg.types.getTypeParser(oid, format ?? 'text')) as typeof pg.types.getTypeParser,
};

/**
 * Open a pool and a Kysely handle on `url`. The caller closes it. TLS follows the URL's `sslmode`,
 * `sslrootcert`, `sslcert` and `sslkey` with libpq's meaning (see `pgTls.ts`); their files are
 * read now, and one that cannot be read is a ConfigError. Every connection of the pool, and the
 * LISTEN connection that copies the pool's settings, uses the same TLS.
 */
export function openDb(url: string, opts: DbOptions = {}): Db {
  const pool = new pg.Pool({
    ...pgConnection(url),
    max: opts.max ?? 10,
    connectionTimeoutMillis: opts.connectionTimeoutMillis ?? 5_000,
    // A dead server must not hang a step forever: fail the statement and let the loop nak.
    query_timeout: 60_000,
    application_name: opts.applicationName ?? 'recognition-core',
    keepAlive: true,
    types,
  });
  pool.on('error', (err) => opts.onIdleError?.(err));
  // A connection that breaks while checked out (between two statements of a transaction) emits
  // 'error' with no listener of the pool's attached: without this it would crash the process.
  // The statement in progress, or the next one, fails and the caller retries.
  pool.on('connect', (client) => {
    client.on('error', (err) => opts.onIdleError?.(err));
    noteUnusable(client);
    if (opts.unnamedStatements) unnamed(client);
  });
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: discardingUnusable(pool) }) });
  return { db, pool, close: () => db.destroy() };
}

/** Where {@link noteUnusable} keeps the error that made a connection unusable. */
const UNUSABLE = Symbol('unusable connection');
type NotedClient = pg.PoolClient & { [UNUSABLE]?: Error };

/**
 * Remember on `client` the first error of a statement that makes it unusable
 * ({@link isUnusableConnection}): a server that became a standby (a switchover) answers every
 * write on it with `25006` for as long as it lives, so it must not go back to the pool.
 */
function noteUnusable(client: pg.PoolClient): void {
  const noted = client as NotedClient;
  const query = client.query.bind(client) as (...args: unknown[]) => unknown;
  (client as { query: unknown }).query = (...args: unknown[]): unknown => {
    const result = query(...args);
    if (result instanceof Promise)
      result.catch((err: unknown) => {
        if (noted[UNUSABLE] === undefined && isUnusableConnection(err)) noted[UNUSABLE] = err as Error;
      });
    return result;
  };
}

/**
 * Make `client` send named statements unnamed: the statement is parsed at each execution on
 * whichever server connection the pooler gives the transaction, and nothing of it outlives it.
 */
function unnamed(client: pg.PoolClient): void {
  const query = client.query.bind(client) as (...args: unknown[]) => unknown;
  (client as { query: unknown }).query = (config: unknown, ...rest: unknown[]): unknown => {
    if (
      typeof config === 'object' &&
      config !== null &&
      typeof (config as { name?: unknown }).name === 'string' &&
      typeof (config as { submit?: unknown }).submit !== 'function'
    ) {
      const { name: _name, ...plain } = config as { name: string };
      return query(plain, ...rest);
    }
    return query(config, ...rest);
  };
}

/**
 * The pool as Kysely sees it: Kysely releases a connection without an error, so the release
 * passes the error {@link noteUnusable} kept, and pg destroys such a connection instead of
 * handing it out again.
 */
function discardingUnusable(pool: pg.Pool): { connect(): Promise<pg.PoolClient>; end(): Promise<void> } {
  return {
    async connect() {
      const client = (await pool.connect()) as NotedClient;
      const release = client.release.bind(client);
      client.release = (err?: Error | boolean) => release(err || client[UNUSABLE]);
      return client;
    },
    end: () => pool.end(),
  };
}

/** The database name of a connection URL. */
export function databaseName(url: string): string {
  const name = decodeURIComponent(new URL(url).pathname.replace(/^\//, ''));
  if (!name) throw new Error('DATABASE_URL names no database');
  return name;
}

/**
 * Create the database named in `url` when it does not exist, through the server's `postgres`
 * database; as a copy of `template` when given. Resolves with whether it created it. An existing
 * database is found by connecting to it, so a role that may connect to its own database only (and
 * has no CREATEDB) can run this.
 */
export async function createDatabaseIfMissing(
  url: string,
  { template }: { template?: string } = {},
): Promise<boolean> {
  const name = databaseName(url);
  const own = new pg.Client(pgConnection(url));
  own.on('error', () => undefined);
  try {
    await own.connect();
    return false;
  } catch (err) {
    // 3D000: the database does not exist. Anything else (refused, TLS, password) is the answer.
    if ((err as { code?: string }).code !== '3D000') throw err;
  } finally {
    await own.end().catch(() => undefined);
  }
  const admin = new URL(url);
  admin.pathname = '/postgres';
  const client = new pg.Client(pgConnection(admin.toString()));
  await client.connect();
  try {
    const found = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (found.rowCount) return false;
    const ident = client.escapeIdentifier(name);
    const tmpl = template ? ` TEMPLATE ${client.escapeIdentifier(template)}` : '';
    try {
      await client.query(`CREATE DATABASE ${ident}${tmpl}`);
    } catch (err) {
      // Another process created it between our check and our create: that is fine.
      if ((err as { code?: string }).code !== '42P04') throw err;
      return false;
    }
    return true;
  } finally {
    await client.end();
  }
}

/** Drop the database named in `url` (tests and the demo's clean start). */
export async function dropDatabase(url: string): Promise<void> {
  const admin = new URL(url);
  const name = databaseName(url);
  admin.pathname = '/postgres';
  const client = new pg.Client(pgConnection(admin.toString()));
  await client.connect();
  try {
    await client.query(`DROP DATABASE IF EXISTS ${client.escapeIdentifier(name)} WITH (FORCE)`);
  } finally {
    await client.end();
  }
}

function migrator(db: Kysely<Database>): Migrator {
  return new Migrator({ db, provider: { getMigrations: async () => migrations } });
}

/** Apply every pending migration. Harmless when there is none. Throws on failure. */
export async function migrateToLatest(db: Kysely<Database>): Promise<MigrationResult[]> {
  const { error, results } = await migrator(db).migrateToLatest();
  if (error) throw error instanceof Error ? error : new Error(String(error));
  return results ?? [];
}

/** Names of the migrations the database has not applied yet. */
export async function pendingMigrations(db: Kysely<Database>): Promise<string[]> {
  const infos = await migrator(db).getMigrations();
  return infos.filter((m) => !m.executedAt).map((m) => m.name);
}

/**
 * One migration as this build and the database see it: `applied` (known here, applied there),
 * `pending` (known here, not applied there), `unknown` (applied there, not known here: a newer
 * version of recognition-core applied it).
 */
export interface MigrationState {
  name: string;
  state: 'applied' | 'pending' | 'unknown';
  /** When the database applied it; null while pending. */
  appliedAt: Date | null;
}

/**
 * Every migration this build knows and every one the database has applied, by name. Reads the
 * migration table directly (absent on a database never migrated: every migration is pending), so
 * that migrations unknown to this build are listed instead of refused.
 */
export async function migrationStatus(db: Kysely<Database>): Promise<MigrationState[]> {
  let applied: Array<{ name: string; timestamp: string }> = [];
  try {
    ({ rows: applied } = await sql<{ name: string; timestamp: string }>`
      SELECT name, timestamp FROM ${sql.table(DEFAULT_MIGRATION_TABLE)}`.execute(db));
  } catch (err) {
    // 42P01: undefined_table.
    if ((err as { code?: string }).code !== '42P01') throw err;
  }
  const appliedAt = new Map(applied.map((m) => [m.name, new Date(m.timestamp)]));
  const names = [...new Set([...Object.keys(migrations), ...appliedAt.keys()])].sort();
  return names.map((name) => ({
    name,
    state: !(name in migrations) ? 'unknown' : appliedAt.has(name) ? 'applied' : 'pending',
    appliedAt: appliedAt.get(name) ?? null,
  }));
}

/** The database clock; every timestamp the project writes comes from it. */
export async function dbNow(db: Kysely<Database>): Promise<Date> {
  const { rows } = await sql<{ now: Date }>`SELECT now() AS now`.execute(db);
  return rows[0]!.now;
}
