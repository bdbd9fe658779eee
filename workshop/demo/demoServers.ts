/**
 * The servers the demo runs against. `private` (the default): a PostgreSQL and a nats-server on free
 * loopback ports, started for this run and removed at the end, so the demo cannot reach a daemon it
 * did not start. `existing`: the servers DATABASE_URL and NATS_URL name, where the demo keeps to a
 * database and streams of its own (`runDemo`).
 */
import { loadConfig, redactUrl } from '../../src/config.js';
import {
  installCommand,
  MissingServerBinaryError,
  type ServerPackage,
} from '../localServers/missingBinary.js';
import { findNatsServerBinary, startNatsServer, type NatsServerHandle } from '../localServers/natsServer.js';
import { findPgBinDir, startPgCluster, type PgClusterHandle } from '../localServers/pgCluster.js';

import type { DemoServerChoice } from './demoServerChoices.js';

export { DEMO_SERVER_CHOICES, type DemoServerChoice } from './demoServerChoices.js';

/**
 * Variables of the user's NATS that a private nats-server has no use for: it asks for no
 * credentials and no TLS, and is a single server (one replica).
 */
const NATS_VARIABLES_DROPPED = [
  'NATS_USER',
  'NATS_PASSWORD',
  'NATS_TOKEN',
  'NATS_CREDS',
  'NATS_TLS_CA',
  'NATS_TLS_CERT',
  'NATS_TLS_KEY',
  'NATS_STREAM_REPLICAS',
] as const;

export interface DemoServers {
  /** The environment to run the demo with: DATABASE_URL and NATS_URL name the servers to use. */
  env: NodeJS.ProcessEnv;
  /** The servers are the demo's own (private), removed at the end with everything on them. */
  privateServers: boolean;
  /** Stop and remove the private servers (none: nothing to do). Idempotent. */
  close(): Promise<void>;
}

/**
 * Provide the servers `servers` asks for; `say` tells the user.
 *   existing: the environment as it is;
 *   private:  1. the binaries (missing: fail with the install command);
 *             2. start both at once (a failure removes whichever started);
 *             3. the environment pointing at them.
 */
export async function provideDemoServers(opts: {
  env: NodeJS.ProcessEnv;
  say: (line: string) => void;
  servers: DemoServerChoice;
}): Promise<DemoServers> {
  const { env, say } = opts;
  if (opts.servers === 'existing') {
    const cfg = loadConfig(env);
    say(`  servers   existing: PostgreSQL at DATABASE_URL, NATS at NATS_URL (${redactUrl(cfg.NATS_URL)})`);
    return { env, privateServers: false, close: async () => undefined };
  }

  // 1. The binaries, before anything starts.
  const missing: ServerPackage[] = [];
  for (const find of [findPgBinDir, findNatsServerBinary]) {
    try {
      find();
    } catch (err) {
      if (!(err instanceof MissingServerBinaryError)) throw err;
      missing.push(err.debianPackage);
    }
  }
  if (missing.length > 0) {
    throw new Error(
      `the demo runs on a private PostgreSQL and nats-server of its own, but ${missing.join(' and ')} ${missing.length === 1 ? 'is' : 'are'} not installed (or run it on your servers with --servers existing). Install with: ${installCommand(missing)}`,
    );
  }

  // 2. Start them; each in its own process group, so a Ctrl-C reaches only the demo, which then
  //    stops them after its summary.
  say('  servers   private: starting a PostgreSQL and a nats-server of its own for this run');
  const [pg, ns] = await Promise.allSettled([
    startPgCluster({ ownProcessGroup: true }),
    startNatsServer({ ownProcessGroup: true, serverName: 'recognition-demo' }),
  ]);
  const started: Array<PgClusterHandle | NatsServerHandle> = [];
  for (const r of [pg, ns]) if (r.status === 'fulfilled') started.push(r.value);
  let closed: Promise<void> | undefined;
  const close = () => (closed ??= Promise.all(started.map((s) => s.cleanup())).then(() => undefined));
  if (pg.status === 'rejected' || ns.status === 'rejected') {
    await close();
    const reason = (pg.status === 'rejected' ? pg.reason : (ns as PromiseRejectedResult).reason) as Error;
    throw new Error(`starting a private server for the demo failed: ${reason.message.split('\n')[0]}`, {
      cause: reason,
    });
  }

  // 3. The environment.
  const privateEnv: NodeJS.ProcessEnv = {
    ...env,
    DATABASE_URL: pg.value.url('postgres'),
    NATS_URL: ns.value.url,
  };
  for (const name of NATS_VARIABLES_DROPPED) delete privateEnv[name];
  say(
    `  private PostgreSQL  ${redactUrl(pg.value.url('postgres'))} (data in ${pg.value.dir}; removed at the end)`,
  );
  say(
    `  private nats-server ${ns.value.url} with JetStream (store in ${ns.value.storeDir}; removed at the end)`,
  );
  return { env: privateEnv, privateServers: true, close };
}
