import { existsSync } from 'node:fs';

import { afterAll, describe, expect, it } from 'vitest';
import pg from 'pg';

import { startPgCluster, type PgClusterHandle } from '../../workshop/localServers/pgCluster.js';

async function query<R extends pg.QueryResultRow>(url: string, sql: string): Promise<R[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    return (await client.query<R>(sql)).rows;
  } finally {
    await client.end().catch(() => undefined);
  }
}

// Tag: [pg-cluster] (filter with `-t pg-cluster`). One cluster for the whole file keeps it fast (~2-4 s).
describe('[pg-cluster] startPgCluster', () => {
  let cluster: PgClusterHandle | undefined;
  afterAll(async () => {
    await cluster?.cleanup();
  });

  it('starts, survives a SIGKILL of the postmaster, starts again with the data, and cleans up', async () => {
    cluster = await startPgCluster();
    const { port } = cluster;
    expect(port).not.toBe(5432);
    expect(cluster.url()).toBe(`postgres://postgres@127.0.0.1:${port}/postgres`);
    expect(cluster.url('other')).toBe(`postgres://postgres@127.0.0.1:${port}/other`);

    const [row] = await query<{ v: string }>(
      cluster.url(),
      "select current_setting('server_version_num') as v",
    );
    expect(Number(row?.v)).toBeGreaterThanOrEqual(100000);
    await query(cluster.url(), 'create table t (id int primary key)');
    await query(cluster.url(), 'insert into t values (1), (2)');

    await cluster.kill();
    expect(cluster.isRunning()).toBe(false);
    await expect(query(cluster.url(), 'select 1')).rejects.toThrow();

    await cluster.start();
    expect(cluster.isRunning()).toBe(true);
    expect(cluster.port).toBe(port);
    expect(await query<{ n: string }>(cluster.url(), 'select count(*) as n from t')).toEqual([{ n: '2' }]);

    await cluster.stop();
    expect(cluster.isRunning()).toBe(false);
    await cluster.start();
    await query(cluster.url(), 'create database other');
    expect(await query<{ d: string }>(cluster.url('other'), 'select current_database() as d')).toEqual([
      { d: 'other' },
    ]);

    const dir = cluster.dir;
    await cluster.cleanup();
    expect(existsSync(dir)).toBe(false);
    await expect(query(cluster.url(), 'select 1')).rejects.toThrow();
    cluster = undefined;
  });
});
