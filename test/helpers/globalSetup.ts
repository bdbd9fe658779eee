/**
 * Once per test run: build a migrated template database, so each test file gets its own database
 * as a cheap copy (`CREATE DATABASE … TEMPLATE …`) and files can run in parallel.
 */
import type { TestProject } from 'vitest/node';
import pg from 'pg';
import { createDatabaseIfMissing, dropDatabase, migrateToLatest, openDb } from '../../src/db/database.js';
import { adminUrl, dbUrl } from './pgUrls.js';

declare module 'vitest' {
  export interface ProvidedContext {
    templateDb: string;
  }
}

/** Drop databases left by earlier runs whose process is gone (a killed run cannot clean up). */
async function dropStale(): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl() });
  await client.connect();
  try {
    const { rows } = await client.query<{ datname: string }>(
      `SELECT datname FROM pg_database WHERE datname ~ '^rc_(test|tmpl)_[0-9]+_'`,
    );
    for (const { datname } of rows) {
      const pid = Number(datname.split('_')[2]);
      let alive = true;
      try {
        process.kill(pid, 0);
      } catch {
        alive = false;
      }
      if (!alive)
        await client.query(`DROP DATABASE IF EXISTS ${client.escapeIdentifier(datname)} WITH (FORCE)`);
    }
  } finally {
    await client.end();
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  await dropStale();
  const name = `rc_tmpl_${process.pid}_${Date.now()}`;
  const url = dbUrl(name);
  await createDatabaseIfMissing(url);
  const { db, close } = openDb(url, { max: 1 });
  try {
    await migrateToLatest(db);
  } finally {
    await close();
  }
  project.provide('templateDb', name);
  return async () => {
    await dropDatabase(url);
  };
}
