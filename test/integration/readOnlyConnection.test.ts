/**
 * A pooled connection whose server turned read-only (a primary demoted to a standby by a
 * switchover answers every write with SQLSTATE 25006 on the connections it keeps) is retryable
 * and leaves the pool: the next attempt gets a new connection, which a load balancer sends to the
 * new primary. Here the read-only server is one session with `default_transaction_read_only`, on
 * a pool of one connection, so "the next connection" is provably a new one.
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDb, type Db } from '../../src/db/database.js';
import { inPgTransaction } from '../../src/db/pgTransaction.js';
import { isRetryable, isUnusableConnection } from '../../src/errors.js';
import { useHarness } from '../helpers/harness.js';

const database = useHarness({ database: true });
let db: Db;

beforeAll(async () => {
  await sql`CREATE TABLE read_only_probe (n int)`.execute(database.db);
  db = openDb(database.url, { max: 1 });
});

afterAll(async () => {
  await db?.close();
});

/** The backend pid of the pool's one connection, and make that session read-only. */
async function readOnlySession(): Promise<number> {
  const { rows } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(db.db);
  await sql`SET default_transaction_read_only = on`.execute(db.db);
  return rows[0]!.pid;
}

async function backendPid(): Promise<number> {
  const { rows } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(db.db);
  return rows[0]!.pid;
}

describe('a connection whose server refuses writes (25006)', () => {
  it('through Kysely: the write fails retryably, the connection is discarded, the retry writes', async () => {
    const pid = await readOnlySession();
    const err = await sql`INSERT INTO read_only_probe VALUES (1)`.execute(db.db).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect((err as { code?: string }).code).toBe('25006');
    expect(isRetryable(err)).toBe(true);
    expect(isUnusableConnection(err)).toBe(true);
    // A new connection: not the read-only session.
    expect(await backendPid()).not.toBe(pid);
    await sql`INSERT INTO read_only_probe VALUES (2)`.execute(db.db);
  });

  it('in a transaction of the hot paths (inPgTransaction): the same', async () => {
    const pid = await readOnlySession();
    const err = await inPgTransaction(db.pool, (c) =>
      c.query({ text: 'INSERT INTO read_only_probe VALUES (3)' }),
    ).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect((err as { code?: string }).code).toBe('25006');
    expect(isRetryable(err)).toBe(true);
    expect(await backendPid()).not.toBe(pid);
    await inPgTransaction(db.pool, (c) => c.query({ text: 'INSERT INTO read_only_probe VALUES (4)' }));
    const { rows } = await sql<{ n: number }>`SELECT n FROM read_only_probe ORDER BY n`.execute(db.db);
    expect(rows.map((r) => r.n)).toEqual([2, 4]);
  });

  it('an ordinary statement error keeps the connection', async () => {
    const pid = await backendPid();
    await expect(sql`SELECT 1/0`.execute(db.db)).rejects.toThrow(/division by zero/);
    expect(await backendPid()).toBe(pid);
  });

  it('classifies administrator shutdown and lost connections as retryable and unusable', () => {
    const pgError = (code: string, message = 'x') => Object.assign(new Error(message), { code });
    for (const code of ['57P01', '57P02', '57P03', '08006', '25006']) {
      expect(isRetryable(pgError(code)), code).toBe(true);
      expect(isUnusableConnection(pgError(code)), code).toBe(true);
    }
    expect(isUnusableConnection(new Error('Connection terminated unexpectedly'))).toBe(true);
    expect(isRetryable(pgError('40001'))).toBe(true);
    expect(isUnusableConnection(pgError('40001'))).toBe(false);
    expect(isRetryable(pgError('23505'))).toBe(false);
    expect(isUnusableConnection(pgError('23505'))).toBe(false);
  });
});
