/**
 * The `pooler` section: the daemon's inbox on the same backlog directly (prepared statements, and
 * unnamed ones) and through a PgBouncer of the bench's own in transaction and in session mode, in
 * turns over the rounds, each rate read against the direct one.
 */
import { execFileSync } from 'node:child_process';
import {
  findPgbouncerBinary,
  startPgbouncer,
  type PgbouncerHandle,
} from '../workshop/localServers/pgbouncer.js';
import type { BenchEnv } from './env.js';
import { measureInbox, type Compared } from './throughput.js';

/** The section's runs, each the median of its rounds, and `pgbouncer --version`'s first line. */
export type PoolerResult = Awaited<ReturnType<typeof measurePooler>>;

export async function measurePooler(env: BenchEnv, n: number, compared: Compared) {
  const version = execFileSync(findPgbouncerBinary(), ['--version'], { encoding: 'utf8' }).split('\n')[0]!;
  const serverPort = Number(new URL(env.databaseUrl).port || 5432);
  // As many server connections as the daemon's pool: the pooler never makes the inbox wait for one.
  const poolSize = env.config().DB_POOL_SIZE;
  const transaction = await startPgbouncer({ mode: 'transaction', serverPort, poolSize });
  const session = await startPgbouncer({ mode: 'session', serverPort, poolSize });
  const through = (bouncer: PgbouncerHandle, mode: string) => {
    const u = new URL(env.databaseUrl);
    [u.hostname, u.port] = ['127.0.0.1', String(bouncer.port)];
    return { DATABASE_URL: u.toString(), DATABASE_POOLER: mode };
  };
  const run = (name: string, overrides: Record<string, string>) => () =>
    measureInbox(env, { name: `inbox ${name}, LOG_LEVEL=warn`, logLevel: 'warn', overrides }, n);
  const via = (mode: 'transaction' | 'session', bouncer: PgbouncerHandle) =>
    run(`through ${version}, ${mode} mode (DATABASE_POOLER=${mode})`, through(bouncer, mode));
  try {
    const [direct, directUnnamed, t, s] = await compared([
      run('direct, prepared statements (DATABASE_POOLER=none)', {}),
      run('direct, unnamed statements', { DATABASE_POOLER: 'transaction' }),
      via('transaction', transaction),
      via('session', session),
    ]);
    return { version, direct: direct!, directUnnamed: directUnnamed!, transaction: t!, session: s! };
  } finally {
    await transaction.cleanup();
    await session.cleanup();
  }
}
