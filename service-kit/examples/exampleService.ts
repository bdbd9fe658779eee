/**
 * A recognition service written with the kit: docs/contract.md shows the region below, and
 * test/integration/serviceKit.test.ts runs this file against a real core. NATS_URL names the
 * server (default 127.0.0.1:4222).
 */
// #region service
import { connect } from '@nats-io/transport-node';
import { serve } from '../src/index.js';
import { formatOf, recognise, store } from './exampleWork.js';

const nats = await connect({ servers: process.env.NATS_URL ?? '127.0.0.1:4222' });

const running = await serve({
  service: 'example-parser',
  version: '1.0.0',
  nats,
  handle: async (job, ctx) => {
    const format = formatOf(job.source_s3.key);
    if (!format) return ctx.fail('UNSUPPORTED_FORMAT', `not a table: ${job.source_s3.key}`);
    const table = await recognise(job.source_s3, format); // a throw is retried, then answered `error`
    const where = ctx.resultKey('table.json'); // results/<file_id>/<job_id>/table.json
    await store(where, JSON.stringify(table));
    const fields = { result_s3: where, metrics: { rows: table.rows.length, confidence: table.confidence } };
    return table.confidence < 0.9 ? ctx.needsCheck(fields) : ctx.done(fields);
  },
});

await running.stopped; // SIGTERM or SIGINT: the jobs in hand are finished first
await nats.drain();
// #endregion service
