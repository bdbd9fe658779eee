/**
 * The database of a one-shot command. Imported by actions when they run: it loads the
 * configuration and the PostgreSQL client (kysely, pg), nothing else.
 */
import { openDb, type Db } from '../db/database.js';
import type { Config } from '../config.js';
import { commandConfig } from './commandConfig.js';

/** Open the configured database for one command and close it after; `fn` gets the configuration too. */
export async function withDb<T>(fn: (db: Db, cfg: Config) => Promise<T>): Promise<T> {
  const cfg = commandConfig();
  const db = openDb(cfg.DATABASE_URL, { max: 2, unnamedStatements: cfg.DATABASE_POOLER === 'transaction' });
  try {
    return await fn(db, cfg);
  } finally {
    await db.close();
  }
}
