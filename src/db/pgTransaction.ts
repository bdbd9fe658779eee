/**
 * A transaction on a client of a pg pool, for the hot paths that send prepared (named) statements
 * themselves (the inbox's batches, the watchdog's sweeps); everything else goes through Kysely.
 * Structural types, so callers need not import `pg`.
 */
import { isUnusableConnection } from '../errors.js';

/** A client of a pg pool. */
export interface PgPoolClient {
  query<R>(config: { name?: string; text: string; values?: unknown[] }): Promise<{ rows: R[] }>;
  release(destroy?: Error | boolean): void;
}

/** A pg pool. (The helpers below take any pool and hand `fn` its own client type, e.g. pg's.) */
export interface PgPool {
  connect(): Promise<PgPoolClient>;
}

/**
 * Run `fn` with a client of `pool`, released after; a connection that died under it, or whose
 * server is a standby or shutting down now ({@link isUnusableConnection}), is destroyed rather
 * than handed out again.
 */
export async function withPgClient<C extends PgPoolClient, T>(
  pool: { connect(): Promise<C> },
  fn: (client: C) => Promise<T>,
): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    return await fn(client);
  } catch (err) {
    if (isUnusableConnection(err)) broken = err as Error;
    throw err;
  } finally {
    client.release(broken);
  }
}

export interface PgTransactionOptions {
  /**
   * Give the transaction's prepared statements their generic plan, planned once per connection
   * (`SET LOCAL plan_cache_mode = force_generic_plan`, sent with BEGIN: no round trip more; it ends
   * with the transaction, so the connection's other users keep PostgreSQL's default). For the hot
   * paths, whose statements are written to be planned without their values (see src/step/write.ts). By
   * default PostgreSQL compares each execution's custom plan with the generic one, and for a
   * statement taking an array of a few ids the custom plan looks cheaper, so it would plan such a
   * statement anew at every execution, which costs more than running it.
   */
  genericPlans?: boolean;
}

const BEGIN = 'BEGIN';
const BEGIN_GENERIC_PLANS = 'BEGIN; SET LOCAL plan_cache_mode = force_generic_plan';

/**
 * Run `fn` in a transaction on a client of `pool`: committed when this resolves, rolled back when
 * `fn` throws (the error is rethrown). A connection that cannot even roll back, that died under
 * the transaction, or whose server is a standby or shutting down now, is destroyed rather than
 * handed out again.
 */
export async function inPgTransaction<C extends PgPoolClient, T>(
  pool: { connect(): Promise<C> },
  fn: (client: C) => Promise<T>,
  options: PgTransactionOptions = {},
): Promise<T> {
  const client = await pool.connect();
  let broken: unknown;
  try {
    await client.query({ text: options.genericPlans ? BEGIN_GENERIC_PLANS : BEGIN });
    try {
      const result = await fn(client);
      await client.query({ text: 'COMMIT' });
      return result;
    } catch (err) {
      await client.query({ text: 'ROLLBACK' }).catch((e: unknown) => (broken = e));
      throw err;
    }
  } catch (err) {
    broken ??= isUnusableConnection(err) ? err : undefined;
    throw err;
  } finally {
    client.release(broken instanceof Error ? broken : undefined);
  }
}
