/**
 * A transaction on a client of a pg pool, for the hot paths that send prepared (named) statements
 * themselves (the inbox's batches, the watchdog's sweeps); everything else goes through Kysely.
 * Structural types, so callers need not import `pg`.
 */

/** A client of a pg pool. */
export interface PgPoolClient {
  query<R>(config: { name?: string; text: string; values?: unknown[] }): Promise<{ rows: R[] }>;
  release(destroy?: Error | boolean): void;
}

/** A pg pool. (The helpers below take any pool and hand `fn` its own client type, e.g. pg's.) */
export interface PgPool {
  connect(): Promise<PgPoolClient>;
}

/** Whether `err` says the connection itself is gone (it must not go back to the pool). */
function isBrokenConnection(err: unknown): boolean {
  return err instanceof Error && /Connection terminated|ECONNRESET|not queryable/i.test(err.message);
}

/**
 * Run `fn` with a client of `pool`, released after; a connection that died under it is
 * destroyed rather than handed out again.
 */
export async function withPgClient<C extends PgPoolClient, T>(pool: { connect(): Promise<C> }, fn: (client: C) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    return await fn(client);
  } catch (err) {
    if (isBrokenConnection(err)) broken = err as Error;
    throw err;
  } finally {
    client.release(broken);
  }
}

/**
 * Run `fn` in a transaction on a client of `pool`: committed when this resolves, rolled back when
 * `fn` throws (the error is rethrown). A connection that cannot even roll back, or that died
 * under the transaction, is destroyed rather than handed out again.
 */
export async function inPgTransaction<C extends PgPoolClient, T>(pool: { connect(): Promise<C> }, fn: (client: C) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: unknown;
  try {
    await client.query({ text: 'BEGIN' });
    try {
      const result = await fn(client);
      await client.query({ text: 'COMMIT' });
      return result;
    } catch (err) {
      await client.query({ text: 'ROLLBACK' }).catch((e: unknown) => (broken = e));
      throw err;
    }
  } catch (err) {
    broken ??= isBrokenConnection(err) ? err : undefined;
    throw err;
  } finally {
    client.release(broken instanceof Error ? broken : undefined);
  }
}
