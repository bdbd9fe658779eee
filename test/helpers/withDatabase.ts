/**
 * Each test file gets its own database, copied from the run's migrated template. It is dropped
 * after the file, unless a test failed: then it is kept, and its name printed, for inspection.
 */
import { afterAll, beforeAll, inject, onTestFailed, beforeEach } from 'vitest';
import { createDatabaseIfMissing, dropDatabase, openDb, type Db } from '../../src/db/database.js';
import { dbUrl } from './pgUrls.js';

let counter = 0;

/** A fresh migrated database for a test file; `url` and the open `db` are valid inside tests. */
export interface TestDatabase extends Db {
  url: string;
  name: string;
}

/** Register hooks that create the file's database before its tests and drop it after. */
export function useTestDatabase(): TestDatabase {
  const name = `rc_test_${process.pid}_${Date.now()}_${counter++}`;
  const url = dbUrl(name);
  const handle = { url, name } as TestDatabase;
  let failed = false;
  beforeAll(async () => {
    await createDatabaseIfMissing(url, { template: inject('templateDb') });
    Object.assign(handle, openDb(url, { max: 20 }));
  });
  beforeEach(() => {
    onTestFailed(() => {
      failed = true;
    });
  });
  afterAll(async () => {
    await handle.close?.();
    if (failed) {
      process.stderr.write(`kept database ${name} of a failed test for inspection\n`);
    } else {
      await dropDatabase(url);
    }
  });
  return handle;
}
