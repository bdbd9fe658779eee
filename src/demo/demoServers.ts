/**
 * The servers the demo runs against. PostgreSQL at DATABASE_URL and NATS at NATS_URL when
 * something answers there; for a variable left unset (or empty) whose default address answers
 * nothing, a private server for this run: PostgreSQL by `initdb` into a temporary directory, a
 * nats-server with JetStream, each on a free loopback port, removed at the end.
 *
 * A variable set explicitly is never replaced: the user asked for that server, so when it does not
 * answer the demo fails on it with one line. Binaries missing for a private server end the demo
 * with the one command that installs them.
 */
import { connect as netConnect } from 'node:net';
import { loadConfig, redactUrl } from '../config.js';
import {
  installCommand,
  MissingServerBinaryError,
  type ServerPackage,
} from '../localServers/missingBinary.js';
import { findNatsServerBinary, startNatsServer, type NatsServerHandle } from '../localServers/natsServer.js';
import { findPgBinDir, startPgCluster, type PgClusterHandle } from '../localServers/pgCluster.js';

/** How long a default address may take to accept a TCP connection before it counts as silent. */
const PROBE_TIMEOUT_MS = 1_000;
/** The NATS variables a private nats-server has no use for (it asks for no credentials, no TLS). */
const NATS_SECURITY_VARIABLES = [
  'NATS_USER',
  'NATS_PASSWORD',
  'NATS_TOKEN',
  'NATS_CREDS',
  'NATS_TLS_CA',
  'NATS_TLS_CERT',
  'NATS_TLS_KEY',
] as const;

export interface DemoServers {
  /** The environment to run the demo with: DATABASE_URL and NATS_URL name the servers to use. */
  env: NodeJS.ProcessEnv;
  /** The demo database lives on a private PostgreSQL and goes away with it. */
  privateDatabase: boolean;
  /** The private servers started (`PostgreSQL`, `nats-server`), for the demo's output. */
  privateServers: string[];
  /** Stop and remove the private servers (none: nothing to do). Idempotent. */
  close(): Promise<void>;
}

/** The variable is set to something: the user chose that server. */
const isSet = (env: NodeJS.ProcessEnv, name: string): boolean => (env[name] ?? '') !== '';

/** Resolves true when host:port accepts a TCP connection within {@link PROBE_TIMEOUT_MS}. */
function answers(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = netConnect({ host, port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
    socket.setTimeout(PROBE_TIMEOUT_MS, () => done(false));
  });
}

/** Host and port of a server URL, with the scheme's default port. */
function addressOf(url: string, defaultPort: number): { host: string; port: number } {
  const u = new URL(url);
  return { host: u.hostname.replace(/^\[|\]$/g, ''), port: u.port ? Number(u.port) : defaultPort };
}

/**
 * Decide which servers the demo uses and start the private ones; `say` tells the user.
 *   1. for each of DATABASE_URL and NATS_URL left unset, whether its default address answers;
 *   2. for those that do not, the binaries (missing: fail with the install command);
 *   3. start the private servers, both at once (a failure removes whichever started);
 *   4. the environment pointing at them.
 */
export async function provideDemoServers(opts: {
  env: NodeJS.ProcessEnv;
  say: (line: string) => void;
}): Promise<DemoServers> {
  const { env, say } = opts;
  const cfg = loadConfig(env);

  // 1. Only an unset variable may be replaced, and only when nothing answers at its address.
  const db = addressOf(cfg.DATABASE_URL, 5432);
  const nats = addressOf(cfg.NATS_URL.split(',')[0]!.trim(), 4222);
  const [needPg, needNats] = await Promise.all([
    isSet(env, 'DATABASE_URL') ? false : answers(db.host, db.port).then((ok) => !ok),
    isSet(env, 'NATS_URL') ? false : answers(nats.host, nats.port).then((ok) => !ok),
  ]);
  if (!needPg && !needNats)
    return { env, privateDatabase: false, privateServers: [], close: async () => undefined };

  // 2. The binaries, before anything starts.
  const missing: ServerPackage[] = [];
  const check = (find: () => unknown) => {
    try {
      find();
    } catch (err) {
      if (!(err instanceof MissingServerBinaryError)) throw err;
      missing.push(err.debianPackage);
    }
  };
  if (needPg) check(findPgBinDir);
  if (needNats) check(findNatsServerBinary);
  if (missing.length > 0) {
    const silent = [
      ...(needPg ? [`PostgreSQL (${db.host}:${db.port}, DATABASE_URL unset)`] : []),
      ...(needNats ? [`NATS (${nats.host}:${nats.port}, NATS_URL unset)`] : []),
    ];
    const one = silent.length === 1;
    throw new Error(
      `${silent.join(' and ')} ${one ? 'does' : 'do'} not answer, and the demo cannot start ${one ? 'a private one' : 'private ones'}: ${missing.join(' and ')} ${missing.length === 1 ? 'is' : 'are'} not installed. Install with: ${installCommand(missing)}`,
    );
  }

  // 3. Start them; each in its own process group, so a Ctrl-C reaches only the demo, which then
  //    stops them after its summary.
  if (needPg)
    say(
      `  nothing answers at ${db.host}:${db.port} and DATABASE_URL is unset: starting a private PostgreSQL`,
    );
  if (needNats)
    say(
      `  nothing answers at ${nats.host}:${nats.port} and NATS_URL is unset: starting a private nats-server`,
    );
  const [pg, ns] = await Promise.allSettled([
    needPg ? startPgCluster({ ownProcessGroup: true }) : Promise.resolve(undefined),
    needNats
      ? startNatsServer({ ownProcessGroup: true, serverName: 'recognition-demo' })
      : Promise.resolve(undefined),
  ]);
  const started: Array<PgClusterHandle | NatsServerHandle> = [];
  for (const r of [pg, ns]) if (r.status === 'fulfilled' && r.value) started.push(r.value);
  let closed: Promise<void> | undefined;
  const close = () => (closed ??= Promise.all(started.map((s) => s.cleanup())).then(() => undefined));
  const failed = [pg, ns].find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) {
    await close();
    const reason = failed.reason as Error;
    throw new Error(`starting a private server for the demo failed: ${reason.message.split('\n')[0]}`, {
      cause: reason,
    });
  }

  // 4. The environment.
  const privateEnv: NodeJS.ProcessEnv = { ...env };
  if (pg.status === 'fulfilled' && pg.value) {
    privateEnv['DATABASE_URL'] = pg.value.url('postgres');
    say(
      `  private PostgreSQL  ${redactUrl(pg.value.url('postgres'))} (data in ${pg.value.dir}; removed at the end)`,
    );
  }
  if (ns.status === 'fulfilled' && ns.value) {
    privateEnv['NATS_URL'] = ns.value.url;
    for (const name of NATS_SECURITY_VARIABLES) delete privateEnv[name];
    say(
      `  private nats-server ${ns.value.url} with JetStream (store in ${ns.value.storeDir}; removed at the end)`,
    );
  }
  const privateServers = [...(needPg ? ['PostgreSQL'] : []), ...(needNats ? ['nats-server'] : [])];
  return { env: privateEnv, privateDatabase: needPg, privateServers, close };
}
