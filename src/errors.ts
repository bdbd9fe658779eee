/**
 * Named errors, and the one table of database failures. Every `catch` in a loop classifies what
 * it caught with {@link classifyDatabaseFailure}: the message's fault (quarantine and ack;
 * retrying cannot fix it) or not (retry with a delay; the message is applied once it is gone).
 */

/** A user-facing problem with input (CLI argument, file id): one clear line, non-zero exit. */
export class UsageError extends Error {
  override name = 'UsageError';
  constructor(
    message: string,
    readonly exitCode = 2,
  ) {
    super(message);
  }
}

/** A configuration value is missing or wrong; the process exits 2 at start. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** The database's migrations are behind the code. */
export class MigrationsPendingError extends Error {
  override name = 'MigrationsPendingError';
  constructor(readonly pending: string[]) {
    super(
      `the database has ${pending.length} pending migration(s) (${pending.join(', ')}): run \`recognition-core migrate\``,
    );
  }
}

/**
 * Who a database failure is down to, and whether waiting can end it:
 * - `fault: 'message'`: the values of the message being applied are refused (a data exception, a
 *   constraint, a value too large); applying the same message again fails the same way, so the
 *   inbox quarantines it;
 * - `fault: 'infrastructure'`: anything else (connection, permission, a prepared statement a
 *   pooler lost, an unknown SQLSTATE, an internal inconsistency); the message is valid and is
 *   applied once the fault is gone, so nothing is quarantined for it.
 * `transient` says whether a retry soon can succeed without anyone acting (connection trouble,
 * deadlocks, serialization, shutdown, a server that became a standby); the publisher, the
 * watchdog and the dead-letter loop retry only those, the inbox retries every infrastructure fault.
 */
export interface DatabaseFailureRule {
  /** A SQLSTATE class (two characters) or a longer prefix of codes; the longest match wins. */
  sqlstate: string;
  meaning: string;
  fault: 'message' | 'infrastructure';
  transient: boolean;
}

/**
 * The one table of database failures, by SQLSTATE class and the codes that differ from their
 * class. A SQLSTATE it does not list is an infrastructure fault and not transient. A row is the
 * SQLSTATE, its kind (`message`: the message's fault; `transient` or `lasting`: an infrastructure
 * fault that a retry soon can or cannot get past) and its meaning, which log lines quote.
 */
export const DATABASE_FAILURES: readonly DatabaseFailureRule[] = (
  [
    ['08', 'transient', 'connection exception'],
    ['0A', 'lasting', 'feature not supported'],
    ['22', 'message', 'data exception: a value refused'],
    ['23', 'message', 'integrity constraint violation: a constraint refuses the values'],
    ['25', 'lasting', 'invalid transaction state'],
    ['25006', 'transient', 'read-only transaction: the server is a standby now (a switchover)'],
    ['26', 'lasting', 'invalid statement name: a prepared statement is gone (a transaction-mode pooler)'],
    ['28', 'lasting', 'invalid authorization'],
    ['3D', 'lasting', 'invalid catalog name: no such database'],
    ['40', 'lasting', 'transaction rollback'],
    ['40001', 'transient', 'serialization failure'],
    ['40P01', 'transient', 'deadlock detected'],
    ['42', 'lasting', 'syntax error or access rule violation (a revoked grant, a missing table)'],
    ['42P05', 'lasting', 'duplicate prepared statement (a transaction-mode pooler)'],
    ['53', 'transient', 'insufficient resources'],
    ['54', 'lasting', 'program limit exceeded'],
    ['54000', 'message', 'a value too large for its column or index'],
    ['55', 'lasting', 'object not in prerequisite state'],
    ['55P03', 'transient', 'lock not available'],
    ['57', 'lasting', 'operator intervention'],
    ['57P', 'transient', 'the server is shutting down, restarting or unreachable'],
    ['58', 'transient', 'system error'],
    ['P0', 'lasting', 'raised by a function or trigger'],
    ['XX', 'lasting', 'internal error'],
  ] as const
).map(([sqlstate, kind, meaning]) => ({
  sqlstate,
  meaning,
  fault: kind === 'message' ? 'message' : 'infrastructure',
  transient: kind === 'transient',
}));

/** A failure that is no SQLSTATE's: the default for codes the table does not list and for errors without one. */
const UNKNOWN_FAILURE: Omit<DatabaseFailureRule, 'sqlstate'> = {
  meaning: 'unknown',
  fault: 'infrastructure',
  transient: false,
};

const RETRYABLE_NODE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
]);

/** Messages of the driver and the pool for a connection that failed: they carry no SQLSTATE. */
const TRANSIENT_MESSAGE =
  /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error|Query read timeout|the database system is (starting up|shutting down)|terminating connection|Client was closed/i;

/** A failure as {@link classifyDatabaseFailure} reads it. */
export interface DatabaseFailure extends Omit<DatabaseFailureRule, 'sqlstate'> {
  /** The SQLSTATE (or Node.js error code) found on the error or its causes; null when none. */
  code: string | null;
}

/** The table's rule for `sqlstate`: the longest prefix listed, else the unknown one. */
export function databaseFailureRule(sqlstate: string): Omit<DatabaseFailureRule, 'sqlstate'> {
  let best: DatabaseFailureRule | undefined;
  for (const rule of DATABASE_FAILURES)
    if (sqlstate.startsWith(rule.sqlstate) && (!best || rule.sqlstate.length > best.sqlstate.length))
      best = rule;
  return best ?? UNKNOWN_FAILURE;
}

/**
 * Classify a failure of database work by {@link DATABASE_FAILURES}, looking through its `cause`
 * chain. A constraint violation (class 23) counts as the message's only when it names the table
 * or constraint that refused the values; one raised by a trigger without them (the legal-edges
 * trigger's refusal of a status change the machine did not make) is an internal inconsistency.
 * An error without a SQLSTATE is transient when it is a connection's failure, else an unknown
 * infrastructure fault.
 */
export function classifyDatabaseFailure(err: unknown): DatabaseFailure {
  const seen = new Set<unknown>();
  for (let e: unknown = err; e instanceof Error && !seen.has(e); e = (e as { cause?: unknown }).cause) {
    seen.add(e);
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && RETRYABLE_NODE_CODES.has(code))
      return { code, meaning: 'connection failure', fault: 'infrastructure', transient: true };
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) {
      const rule = databaseFailureRule(code);
      if (rule.fault === 'message' && code.startsWith('23')) {
        const { table, constraint, column } = e as {
          table?: unknown;
          constraint?: unknown;
          column?: unknown;
        };
        if (!table && !constraint && !column)
          return { code, meaning: 'refused by a trigger', fault: 'infrastructure', transient: false };
      }
      return { code, ...rule };
    }
    if (TRANSIENT_MESSAGE.test(e.message))
      return { code: null, meaning: 'connection failure', fault: 'infrastructure', transient: true };
  }
  return { code: null, ...UNKNOWN_FAILURE };
}

/** True when the database refused the values of the message being applied ({@link classifyDatabaseFailure}). */
export function isMessageFault(err: unknown): boolean {
  return classifyDatabaseFailure(err).fault === 'message';
}

/**
 * The unlocked path found what its write returned not as its plan said (a row missing, a status
 * absent): a bug, never the message's fault. The inbox applies the batch through the locked path
 * instead.
 */
export class InconsistencyError extends Error {
  override name = 'InconsistencyError';
}

/**
 * SQLSTATEs after which a connection must not go back to the pool: it is broken (class 08), its
 * server is shutting down or restarting (`57P01`, `57P02`, `57P03`), or its server is a standby now
 * and refuses every write (`25006`; behind a load balancer, a new connection reaches the primary).
 */
const UNUSABLE_CONNECTION_SQLSTATE = /^(08|57P0[123]|25006)/;

/**
 * True when `err` says the connection it came from cannot serve the next user: the connection is
 * gone (terminated, reset, not queryable) or its server is a standby or shutting down. Such a
 * connection is destroyed on release instead of going back to the pool.
 */
export function isUnusableConnection(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && (UNUSABLE_CONNECTION_SQLSTATE.test(code) || code === 'ECONNRESET'))
    return true;
  return /Connection terminated|ECONNRESET|not queryable/i.test(err.message);
}

/**
 * True when retrying the same work later can succeed: the database is unreachable or restarting,
 * a deadlock or serialization failure, a pool timeout, a write refused by a server that is a
 * standby now ({@link DATABASE_FAILURES}'s `transient`). Everything else is permanent.
 */
export function isRetryable(err: unknown): boolean {
  return classifyDatabaseFailure(err).transient;
}
