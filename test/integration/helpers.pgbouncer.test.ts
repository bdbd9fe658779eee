/**
 * The PgBouncer helper: a private PgBouncer in front of the test server, in transaction mode (a
 * session's state does not outlive its transaction) and in session mode (it does).
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true });

/** Whether a session setting made outside a transaction is still there at the client's next statement. */
async function settingSurvives(url: string): Promise<boolean> {
  const a = new pg.Client({ connectionString: url });
  const b = new pg.Client({ connectionString: url });
  await a.connect();
  await b.connect();
  try {
    // b holds a server connection in a transaction, so a's two statements may not share one.
    await b.query('BEGIN');
    await a.query(`SET work_mem = '7MB'`);
    await b.query('COMMIT');
    await b.query(`SELECT 1`);
    const { rows } = await a.query<{ work_mem: string }>('SHOW work_mem');
    return rows[0]!.work_mem === '7MB';
  } finally {
    await a.end();
    await b.end();
  }
}

describe('startPgbouncer', () => {
  it('transaction mode: statements reach the database; named statements do not survive a transaction', async () => {
    const bouncer = await t.startPgbouncer({ mode: 'transaction', poolSize: 2 });
    const url = bouncer.url(t.dbName);
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      const { rows } = await c.query<{ db: string }>('SELECT current_database() AS db');
      expect(rows[0]!.db).toBe(t.dbName);
      // Two clients preparing the same name: in transaction mode they meet on one server connection.
      const other = new pg.Client({ connectionString: url });
      await other.connect();
      try {
        const results = await Promise.allSettled(
          [c, other, c, other].map((cl, i) =>
            cl.query({ name: 'probe', text: 'SELECT $1::int AS n', values: [i] }),
          ),
        );
        expect(results.some((r) => r.status === 'rejected')).toBe(true);
      } finally {
        await other.end();
      }
    } finally {
      await c.end();
    }
    expect(bouncer.isRunning()).toBe(true);
  });

  it('session mode keeps a session across transactions', async () => {
    const session = await t.startPgbouncer({ mode: 'session' });
    expect(await settingSurvives(session.url(t.dbName))).toBe(true);
  });
});
