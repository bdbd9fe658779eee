/**
 * The ceiling's consumer (bench/ceiling.ts) as a process of its own, started the way the daemon
 * is in the `cold` section: a fresh Node on a backlog, so that it pays its own start-up, JIT and
 * first garbage collections as the daemon does. This is the bound of a cold start's work: the
 * `cold` section reads the daemon process against it as well as against the warm ceiling.
 *
 * Run as `node dist/bench/ceilingProcess.js` with `DATABASE_URL` and `NATS_URL`; it consumes until
 * SIGTERM, then stops (batches in flight finish and are acked) and exits 0.
 */
import { jetstream } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { applyV8Flags } from '../src/process/v8Flags.js';
import { CEILING_PROCESS_APPLICATION, startCeiling } from './ceiling.js';

// The same V8 settings as the daemon's process: the ceiling is what such a process allows.
applyV8Flags();

const databaseUrl = process.env['DATABASE_URL'];
const natsUrl = process.env['NATS_URL'];
if (!databaseUrl || !natsUrl) throw new Error('ceilingProcess needs DATABASE_URL and NATS_URL');

// The pool the in-process ceiling has (bench/throughput.ts).
const pool = new pg.Pool({
  connectionString: databaseUrl,
  max: 10,
  application_name: CEILING_PROCESS_APPLICATION,
});
const nc = await connect({ servers: natsUrl, name: 'bench-ceiling-process' });
const ceiling = await startCeiling(pool, jetstream(nc));
process.once('SIGTERM', () => {
  void ceiling
    .stop()
    .then(() => nc.drain())
    .then(() => pool.end())
    .then(
      () => process.exit(0),
      (err: unknown) => {
        console.error(err);
        process.exit(1);
      },
    );
});
