/**
 * `--only flood` (bench/README.md, "flood"): a daemon process as shipped against backlogs published
 * before it starts, the good results spread evenly among the bad: 300 envelopes of about 1 MiB
 * (90 000 schema errors each) among 200 results, then 20 000 small invalid ones among 100. It logs.
 */
import { headers as natsHeaders } from '@nats-io/nats-core';
import { newId } from '../src/db/ids.js';
import { RESULT_SUBJECT } from '../src/nats/subjects.js';
import { doneEnvelope, resultHeaders, seedPublishedJobs } from '../workshop/benchFixtures.js';
import { firstDelivery, resetStream, sleep, waitAllAcked, type BenchEnv } from './env.js';
import { startProcess } from './throughput.js';

const SERVICE = { name: 'tabular-parser', version: '2.3.1' };
const enc = new TextEncoder();
/** An envelope just under 1 MiB: its `service` has 90 000 keys the schema does not allow. */
function floodEnvelope(): Uint8Array {
  const service: Record<string, unknown> = { ...SERVICE };
  for (let i = 0; i < 90_000; i++) service[`k${i}`] = 0;
  return enc.encode(JSON.stringify({ job_id: newId(), status: 'done', service }));
}
/** A small envelope the schema refuses (an unknown status, an extra key in `service`). */
const smallBadEnvelope = () =>
  enc.encode(JSON.stringify({ job_id: newId(), status: 'finished', service: { ...SERVICE, extra: true } }));

/**
 * Seed `good` jobs, publish their results evenly among `bad` copies of `badData()`, `inFlight` at a
 * time, then start a daemon process: it, the last stream sequence and the time of its first delivery.
 */
async function flood(env: BenchEnv, good: number, bad: number, badData: () => Uint8Array, inFlight: number) {
  const jobs = await seedPublishedJobs(env.pool, good, env.history);
  await resetStream(env.jsm, env.config());
  const every = (bad + good) / good;
  const order = Array.from({ length: bad + good }, () => false);
  for (let g = 0; g < good; g++) order[Math.ceil(every / 2 + g * every)] = true;
  let [last, nextGood] = [0, 0];
  for (let i = 0; i < order.length; i += inFlight) {
    const acks = await Promise.all(
      order.slice(i, i + inFlight).map((isGood, k) => {
        const job = isGood ? jobs[nextGood++]! : undefined;
        const headers = job ? resultHeaders(job) : natsHeaders();
        if (!job) headers.set('Nats-Msg-Id', `bad:${i + k}`);
        // Megabyte messages on a busy machine: JetStream's ack may take longer than the client's default.
        return env.js.publish(RESULT_SUBJECT, job ? doneEnvelope(job) : badData(), {
          headers,
          timeout: 60_000,
        });
      }),
    );
    for (const a of acks) last = Math.max(last, a.seq);
  }
  const daemon = startProcess(env, 'daemon', 'warn');
  const t0 = await firstDelivery(env.jsm, 'daemon').catch(async (err: unknown) => {
    await daemon.stop();
    throw err;
  });
  return { daemon, last, t0, since: () => (performance.now() - t0) / 1000 };
}

const count = async (env: BenchEnv, sql: string) =>
  Number((await env.pool.query<{ n: string }>(sql)).rows[0]!.n);
const DONE = `SELECT count(*) AS n FROM recognition_job WHERE status = 'done'`;
const QUARANTINED = `SELECT count(*) AS n FROM inbox_quarantine`;
const kib = (bytes: number, digits = 2) => (bytes / 1024).toFixed(digits);
const up = (exited: boolean) => (exited ? 'EXITED' : 'stayed up');

/** Run both scenarios; `log` gets a line as each ends. */
export async function measureFlood(env: BenchEnv, log: (line: string) => void): Promise<void> {
  const size = floodEnvelope().byteLength;
  log(`  big: publishing 300 envelopes of ${size} bytes (90 000 schema errors each) among 200 results`);
  const b = await flood(env, 200, 300, floodEnvelope, 10);
  try {
    await waitAllAcked(env.jsm, b.last, 15 * 60_000);
    const drained = b.since();
    const { rows } = await env.pool.query<{ besides: string; payload: string }>(
      `SELECT max(pg_column_size(q.*) - pg_column_size(q.payload)) AS besides,
              max(octet_length(q.payload)) AS payload FROM inbox_quarantine q`,
    );
    const [applied, quarantined] = [await count(env, DONE), await count(env, QUARANTINED)];
    const [exited, maxRss] = [b.daemon.exitedEarly(), b.daemon.maxRss()];
    const { log: text } = await b.daemon.stop();
    const lines = text.split('\n').filter((l) => l.includes('"event":"quarantined"'));
    const longest = Math.max(0, ...lines.map((l) => Buffer.byteLength(l) + 1));
    log(
      `  big: daemon ${up(exited)}, peak RSS ${(maxRss / 2 ** 20).toFixed(0)} MiB, ` +
        `${applied} of 200 good results applied, ${quarantined} quarantined, drained in ${drained.toFixed(1)} s; ` +
        `per bad envelope: ${kib(Buffer.byteLength(text) / 300)} KiB of log (longest quarantine line ${kib(longest)} KiB), ` +
        `quarantine row ${kib(Number(rows[0]!.besides))} KiB besides its payload of ${kib(Number(rows[0]!.payload), 0)} KiB (at most)`,
    );
  } finally {
    await b.daemon.stop();
  }

  log('  small: publishing 20 000 small schema-invalid envelopes with 100 results among them');
  const s = await flood(env, 100, 20_000, smallBadEnvelope, 2_000);
  try {
    const deadline = Date.now() + 10 * 60_000;
    let applied = 0;
    while ((applied = await count(env, DONE)) < 100 && Date.now() < deadline && !s.daemon.exitedEarly())
      await sleep(50);
    const appliedSeconds = s.since();
    await waitAllAcked(env.jsm, s.last, 10 * 60_000);
    const drained = s.since();
    const [exited, quarantined] = [s.daemon.exitedEarly(), await count(env, QUARANTINED)];
    log(
      `  small: daemon ${up(exited)}, ${applied} of 100 good results applied ` +
        `${appliedSeconds.toFixed(1)} s after the first delivery; ${quarantined} quarantined, all acked in ${drained.toFixed(1)} s`,
    );
  } finally {
    await s.daemon.stop();
  }
}
