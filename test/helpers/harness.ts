/**
 * The one set-up of an integration test file: `useHarness` registers the vitest hooks that start
 * what the options ask for before the file's (or the describe block's) tests and take it down
 * after them, and returns a handle whose parts are valid inside tests and later hooks.
 *
 *     const t = useHarness({ database: true, nats: true, client: true, daemon: { env: { … } } });
 *     // t.db, t.pool, t.url (the database), t.nats (the nats-server), t.nc, t.svc, t.daemon, t.drained()
 *
 * Set-up runs in this order: private PostgreSQL cluster, database, nats-server, client
 * connection, daemon. What a file starts itself goes through the handle's `start…`, `connect`
 * and `proxy`, so the harness takes it down too. Tear-down runs in one order whatever the start
 * order was: frozen nats-servers thawed, daemons stopped (they drain NATS and close their pool),
 * NATS connections closed, proxies closed, nats-servers stopped and their stores removed, the
 * database closed and dropped, private clusters removed last. A database whose file had a failed
 * test is kept and its name printed, for inspection. A file's own `afterAll`, registered after
 * `useHarness`, runs before the harness's (vitest runs after-hooks in reverse).
 */
import { connect, type NatsConnection, type NodeConnectionOptions } from '@nats-io/transport-node';
import { afterAll, beforeAll, beforeEach, inject, onTestFailed } from 'vitest';
import {
  createDatabaseIfMissing,
  dropDatabase,
  migrateToLatest,
  openDb,
  type Db,
} from '../../src/db/database.js';
import {
  startNatsServer,
  type NatsServerHandle,
  type NatsServerOptions,
} from '../../workshop/localServers/natsServer.js';
import {
  startPgCluster,
  type PgClusterHandle,
  type PgClusterOptions,
} from '../../workshop/localServers/pgCluster.js';
import {
  startPgbouncer,
  type PgbouncerHandle,
  type PgbouncerOptions,
} from '../../workshop/localServers/pgbouncer.js';
import { dbUrl } from './pgUrls.js';
import { createServiceClient, type ServiceClient } from './serviceClient.js';
import { startTcpProxy, type TcpProxy, type TcpProxyTarget } from './tcpProxy.js';
import { inboxDrained, startTestDaemon, type TestDaemon, type TestDaemonOptions } from './testDaemon.js';

/** A daemon's options where the harness's database and nats-server are the defaults. */
export type HarnessDaemonOptions = Partial<TestDaemonOptions>;

export interface HarnessOptions {
  /** A private PostgreSQL cluster (`h.pgCluster`); the database, if asked for, is made on it. */
  pgCluster?: true | PgClusterOptions;
  /**
   * A migrated database of the file's own: on the test server a copy of the run's template
   * (`test/helpers/globalSetup.ts`), on `pgCluster` created (`name`, default `recognition`) and
   * migrated. `max` is the pool size of the test's own connection (`h.db`, `h.pool`).
   */
  database?: true | { name?: string; max?: number };
  /** A nats-server of the file's own (`h.nats`): JetStream, a free port, a temporary store. */
  nats?: true | NatsServerOptions;
  /** A NATS connection of the test to `h.nats` (`h.nc`) and a service client on it (`h.svc`). */
  client?: true | Omit<NodeConnectionOptions, 'servers'>;
  /** An in-process daemon on the database and the nats-server (`h.daemon`); needs both. */
  daemon?: true | HarnessDaemonOptions;
}

export interface Harness {
  /** The database's open handle, for code that takes a `Db`; the harness closes it. */
  readonly database: Db;
  /** The database (kysely). */
  readonly db: Db['db'];
  /** The database's `pg` pool. */
  readonly pool: Db['pool'];
  /** The database's URL, for a daemon or the CLI (on the test server, known from the start). */
  readonly url: string;
  /** The database's name (on the test server, known from the start). */
  readonly dbName: string;
  readonly pgCluster: PgClusterHandle;
  /** The nats-server: `url`, `port`, `stop`/`restart`/`pause`/`resume` for outages. */
  readonly nats: NatsServerHandle;
  readonly nc: NatsConnection;
  /** A recognition service's messages, published on `h.nc`. */
  readonly svc: ServiceClient;
  readonly daemon: TestDaemon;
  /** `http://127.0.0.1:PORT` of `h.daemon`'s HTTP server (its `http` loop). */
  readonly baseUrl: string;
  /** Wait until `core-inbox` has acked every message published to the results stream so far. */
  drained(timeoutMs?: number): Promise<void>;
  /** Another nats-server, stopped and removed at the end. */
  startNats(opts?: NatsServerOptions): Promise<NatsServerHandle>;
  /** Another NATS connection (by default to `h.nats`), closed at the end. */
  connect(opts?: NodeConnectionOptions): Promise<NatsConnection>;
  /** Another daemon (by default on the database and `h.nats`), stopped at the end. */
  startDaemon(opts?: HarnessDaemonOptions): Promise<TestDaemon>;
  /** Another private PostgreSQL cluster, removed at the end. */
  startPgCluster(opts?: PgClusterOptions): Promise<PgClusterHandle>;
  /** A TCP proxy to `target` for outages, closed at the end (after the daemons, before the servers). */
  proxy(target: TcpProxyTarget): Promise<TcpProxy>;
  /** A PgBouncer of the file's own in front of the test server, stopped at the end (with the proxies). */
  startPgbouncer(opts: PgbouncerOptions): Promise<PgbouncerHandle>;
}

let counter = 0;

/** Register the hooks that start what `options` asks for and take it down; see the file's comment. */
export function useHarness(options: HarnessOptions = {}): Harness {
  if (options.daemon && !(options.database && options.nats))
    throw new Error('useHarness: a daemon needs { database: true, nats: true }');
  if (options.client && !options.nats) throw new Error('useHarness: a client needs { nats: true }');
  const dbOptions = options.database === true ? {} : options.database;
  // On the test server the database's name and URL are known before it exists, as in describe bodies.
  const sharedName =
    dbOptions && !options.pgCluster ? `rc_test_${process.pid}_${Date.now()}_${counter++}` : undefined;

  let database: (Db & { url: string; name: string; shared: boolean }) | undefined;
  let cluster: PgClusterHandle | undefined;
  let server: NatsServerHandle | undefined;
  let client: NatsConnection | undefined;
  let service: ServiceClient | undefined;
  let mainDaemon: TestDaemon | undefined;
  const clusters: PgClusterHandle[] = [];
  const servers: NatsServerHandle[] = [];
  const connections: NatsConnection[] = [];
  const proxies: TcpProxy[] = [];
  const bouncers: PgbouncerHandle[] = [];
  const daemons: TestDaemon[] = [];
  let failed = false;

  /** A part of the handle: its value once set up, else an error naming what is missing. */
  function part<T>(value: T | undefined, option: keyof HarnessOptions): T {
    if (value !== undefined) return value;
    throw new Error(
      options[option]
        ? `useHarness: ${option} is not up yet: use it inside tests and hooks`
        : `useHarness: no ${option}: pass { ${option}: … } to useHarness`,
    );
  }

  const handle: Harness = {
    get database() {
      return part(database, 'database');
    },
    get db() {
      return part(database, 'database').db;
    },
    get pool() {
      return part(database, 'database').pool;
    },
    get url() {
      return sharedName ? dbUrl(sharedName) : part(database, 'database').url;
    },
    get dbName() {
      return sharedName ?? part(database, 'database').name;
    },
    get pgCluster() {
      return part(cluster, 'pgCluster');
    },
    get nats() {
      return part(server, 'nats');
    },
    get nc() {
      return part(client, 'client');
    },
    get svc() {
      return part(service, 'client');
    },
    get daemon() {
      return part(mainDaemon, 'daemon');
    },
    get baseUrl() {
      const http = part(mainDaemon, 'daemon').http;
      if (!http) throw new Error('useHarness: the daemon runs no http loop');
      return `http://127.0.0.1:${http.port}`;
    },
    drained: (timeoutMs) => inboxDrained(handle.nc, timeoutMs),
    async startNats(opts) {
      const s = await startNatsServer(opts);
      servers.push(s);
      return s;
    },
    async connect(opts) {
      const nc = await connect({ ...opts, servers: opts?.servers ?? handle.nats.url });
      connections.push(nc);
      return nc;
    },
    async startDaemon(opts) {
      const d = await startTestDaemon({
        ...opts,
        databaseUrl: opts?.databaseUrl ?? handle.url,
        natsUrl: opts?.natsUrl ?? handle.nats.url,
      });
      daemons.push(d);
      return d;
    },
    async startPgCluster(opts) {
      const c = await startPgCluster(opts);
      clusters.push(c);
      return c;
    },
    async proxy(target) {
      const p = await startTcpProxy(target);
      proxies.push(p);
      return p;
    },
    async startPgbouncer(opts) {
      const b = await startPgbouncer({
        serverPort: Number(new URL(dbUrl('postgres')).port || 5432),
        ...opts,
      });
      bouncers.push(b);
      return b;
    },
  };

  beforeAll(async () => {
    if (options.pgCluster)
      cluster = await handle.startPgCluster(options.pgCluster === true ? {} : options.pgCluster);
    if (dbOptions) {
      if (cluster) {
        const name = dbOptions.name ?? 'recognition';
        const url = cluster.url(name);
        await createDatabaseIfMissing(url);
        const db = openDb(url, { max: dbOptions.max ?? 20 });
        database = { ...db, url, name, shared: false };
        await migrateToLatest(db.db);
      } else if (sharedName) {
        const url = dbUrl(sharedName);
        await createDatabaseIfMissing(url, { template: inject('templateDb') });
        database = { ...openDb(url, { max: dbOptions.max ?? 20 }), url, name: sharedName, shared: true };
      }
    }
    if (options.nats) server = await handle.startNats(options.nats === true ? {} : options.nats);
    if (options.client) {
      client = await handle.connect(options.client === true ? {} : options.client);
      service = createServiceClient(client);
    }
    if (options.daemon) mainDaemon = await handle.startDaemon(options.daemon === true ? {} : options.daemon);
  });

  beforeEach(() => {
    onTestFailed(() => {
      failed = true;
    });
  });

  afterAll(async () => {
    const errors: unknown[] = [];
    const each = async <T>(items: T[], fn: (item: T) => Promise<unknown>) => {
      for (const item of items.splice(0).reverse()) await fn(item).catch((err: unknown) => errors.push(err));
    };
    // A frozen server answers nothing: a daemon draining to it would wait for ever.
    for (const s of servers) s.resume();
    await each(daemons, (d) => d.stop());
    await each(connections, (nc) => nc.close());
    await each(proxies, (p) => p.close());
    await each(bouncers, (b) => b.cleanup());
    await each(servers, (s) => s.cleanup());
    if (database) {
      const { url, name, shared } = database;
      await each([database], (d) => d.close());
      if (failed && shared) process.stderr.write(`kept database ${name} of a failed test for inspection\n`);
      else if (shared) await each([url], dropDatabase);
    }
    await each(clusters, (c) => c.cleanup());
    if (errors.length > 0) throw errors[0];
  });

  return handle;
}
