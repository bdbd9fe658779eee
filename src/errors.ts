/**
 * Named errors. Every `catch` in a loop classifies what it caught: retryable (nak with a delay;
 * the message comes back) or permanent (quarantine and ack; retrying cannot fix it).
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
 * SQLSTATE classes and codes a retry can fix: connection trouble, deadlocks, serialization,
 * shutdown, and a write refused as read-only (`25006`): the server was a primary and is a standby
 * now (a switchover or a failover), and the retry reaches the new primary on a new connection.
 */
const RETRYABLE_SQLSTATE = /^(08|53|57P|40001|40P01|55P03|58|25006)/;
const RETRYABLE_NODE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
]);

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
 * standby now. Everything else is permanent.
 */
export function isRetryable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && (RETRYABLE_SQLSTATE.test(code) || RETRYABLE_NODE_CODES.has(code)))
    return true;
  const msg = err.message;
  if (
    /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error|Query read timeout|the database system is (starting up|shutting down)|terminating connection|Client was closed/i.test(
      msg,
    )
  ) {
    return true;
  }
  const cause = (err as { cause?: unknown }).cause;
  return cause !== undefined && cause !== err && isRetryable(cause);
}
