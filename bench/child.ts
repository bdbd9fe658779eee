/**
 * Entry point of the bench's child processes: what is measured alone in a fresh process, as the
 * daemon runs it, rather than in the bench's own process with what earlier sections left in its
 * heap. `node dist/bench/child.js memory <n1,n2,…>` or `… watchdog <json>`;
 * prints one JSON line on stdout (progress on stderr).
 */
import pg from 'pg';
import { configFor } from './env.js';
import { measureMemory } from './memory.js';
import { measureWatchdog } from './watchdog.js';

/** What the watchdog child is given: the bench's database and the section's sizes. */
export interface WatchdogChildArgs {
  databaseUrl: string;
  natsUrl: string;
  rows: number;
  dues: number[];
  idleSweeps: number;
}

async function watchdog(args: WatchdogChildArgs) {
  const pool = new pg.Pool({ connectionString: args.databaseUrl, max: 4, application_name: 'bench' });
  pool.on('connect', (client) => client.on('error', () => undefined));
  try {
    const env = { pool, config: configFor(args.databaseUrl, args.natsUrl) };
    const log = (line: string) => process.stderr.write(line + '\n');
    return await measureWatchdog(env, args.rows, args.dues, args.idleSweeps, log);
  } finally {
    await pool.end();
  }
}

const [what, arg] = process.argv.slice(2);
if (what === 'memory') {
  process.stdout.write(JSON.stringify(measureMemory(String(arg).split(',').map(Number))) + '\n');
} else if (what === 'watchdog') {
  process.stdout.write(JSON.stringify(await watchdog(JSON.parse(String(arg)) as WatchdogChildArgs)) + '\n');
} else {
  process.stderr.write('usage: child.js memory <n1,n2,...> | watchdog <json>\n');
  process.exit(2);
}
