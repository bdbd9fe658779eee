/**
 * The `pooler` section: the daemon's inbox on the same backlog directly and through PgBouncer, in
 * turns over the rounds. Directly with prepared (named) statements, as the daemon runs by default,
 * and with unnamed ones (`DATABASE_POOLER=transaction` on a direct connection: the cost of the
 * statements alone); through a PgBouncer of the bench's own in transaction mode
 * (`DATABASE_POOLER=transaction`: unnamed statements) and in session mode (prepared statements).
 * Each rate is read against the direct one.
 */
import { execFileSync } from 'node:child_process';
import {
  findPgbouncerBinary,
  startPgbouncer,
  type PgbouncerHandle,
} from '../workshop/localServers/pgbouncer.js';
import type { BenchEnv } from './env.js';
import { measureInbox, type ThroughputResult } from './throughput.js';

/** The section's runs, each the median of its rounds. */
export interface PoolerResult {
  /** `pgbouncer --version`'s first line. */
  version: string;
  direct: ThroughputResult;
  directUnnamed: ThroughputResult;
  transaction: ThroughputResult;
  session: ThroughputResult;
}

/** `env`'s database URL, through `bouncer`. */
function through(env: BenchEnv, bouncer: PgbouncerHandle): string {
  const u = new URL(env.databaseUrl);
  u.hostname = '127.0.0.1';
  u.port = String(bouncer.port);
  return u.toString();
}

/** Measure the section on `n` results; `compared` takes the runs in turns (bench/run.ts). */
export async function measurePooler(
  env: BenchEnv,
  n: number,
  compared: (runs: Array<() => Promise<ThroughputResult>>) => Promise<ThroughputResult[]>,
): Promise<PoolerResult> {
  const version = execFileSync(findPgbouncerBinary(), ['--version'], { encoding: 'utf8' }).split('\n')[0]!;
  const serverPort = Number(new URL(env.databaseUrl).port || 5432);
  const pool = env.config().DB_POOL_SIZE;
  // As many server connections as the daemon's pool: the pooler never makes the inbox wait for one.
  const transaction = await startPgbouncer({ mode: 'transaction', serverPort, poolSize: pool });
  const session = await startPgbouncer({ mode: 'session', serverPort, poolSize: pool });
  try {
    const run = (name: string, overrides: Record<string, string>) => () =>
      measureInbox(env, { name, logLevel: 'warn', overrides }, n);
    const [d, du, t, s] = await compared([
      run('inbox direct, prepared statements (DATABASE_POOLER=none), LOG_LEVEL=warn', {}),
      run('inbox direct, unnamed statements, LOG_LEVEL=warn', { DATABASE_POOLER: 'transaction' }),
      run(`inbox through ${version}, transaction mode (DATABASE_POOLER=transaction), LOG_LEVEL=warn`, {
        DATABASE_URL: through(env, transaction),
        DATABASE_POOLER: 'transaction',
      }),
      run(`inbox through ${version}, session mode (DATABASE_POOLER=session), LOG_LEVEL=warn`, {
        DATABASE_URL: through(env, session),
        DATABASE_POOLER: 'session',
      }),
    ]);
    return { version, direct: d!, directUnnamed: du!, transaction: t!, session: s! };
  } finally {
    await transaction.cleanup();
    await session.cleanup();
  }
}
