/**
 * `--only flood`: a hostile sender against a daemon process as shipped. Two scenarios, each on a
 * backlog published before the daemon starts, the good results spread evenly among the bad:
 *
 * - big: 300 envelopes of about 1 MiB whose `service` carries 90 000 extra keys (90 000 schema
 *   errors each) among 200 good results. Reported: whether the daemon stayed up, its peak RSS
 *   (sampled every 100 ms), that every good result was applied, and per bad envelope its log
 *   bytes and its quarantine row's bytes besides the stored payload prefix;
 * - small: 20 000 small schema-invalid envelopes with 100 good results among them. Reported: how
 *   long after the daemon's first delivery the last good result was applied.
 */
import { spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { newId } from '../src/db/ids.js';
import { INBOX_CONSUMER, RESULT_SUBJECT, RESULTS_STREAM } from '../src/nats/subjects.js';
import { doneEnvelope, resultHeaders, seedPublishedJobs, type BenchJob } from '../workshop/benchFixtures.js';
import { rssBytes } from '../workshop/processStats.js';
import { resetStream, waitAllAcked, type BenchEnv } from './env.js';

/** What the flood section measured. */
export interface FloodResult {
  big: {
    bad: number;
    good: number;
    envelopeBytes: number;
    daemonExited: boolean;
    maxRssBytes: number;
    goodApplied: number;
    quarantined: number;
    /** Every log byte of the run divided by the bad envelopes, and the longest quarantine line. */
    logBytesPerBad: number;
    maxQuarantineLineBytes: number;
    /** The largest quarantine row without its payload, and the largest stored payload. */
    maxRowBytesBesidesPayload: number;
    maxStoredPayloadBytes: number;
    drainSeconds: number;
  };
  small: {
    bad: number;
    good: number;
    daemonExited: boolean;
    goodAppliedSeconds: number;
    goodApplied: number;
    quarantined: number;
    drainSeconds: number;
  };
}

const SERVICE = { name: 'tabular-parser', version: '2.3.1' };
/** Megabyte messages on a busy machine: JetStream's ack may take longer than the client's default. */
const PUBLISH_TIMEOUT_MS = 60_000;
const enc = new TextEncoder();

/** An envelope just under 1 MiB: its `service` has 90 000 keys the schema does not allow. */
function floodEnvelope(): Uint8Array {
  const service: Record<string, unknown> = { ...SERVICE };
  for (let i = 0; i < 90_000; i++) service[`k${i}`] = 0;
  return enc.encode(JSON.stringify({ job_id: newId(), status: 'done', service }));
}

/** A small envelope the schema refuses (an unknown status, an extra key in `service`). */
function smallBadEnvelope(): Uint8Array {
  return enc.encode(
    JSON.stringify({ job_id: newId(), status: 'finished', service: { ...SERVICE, extra: true } }),
  );
}

/**
 * Publish `bad` copies of `badData` with the results of `jobs` spread evenly among them, `inFlight`
 * at a time; resolves with the last stream sequence.
 */
async function publishMix(
  env: BenchEnv,
  jobs: readonly BenchJob[],
  bad: number,
  badData: () => Uint8Array,
  inFlight: number,
): Promise<number> {
  const total = bad + jobs.length;
  const every = total / jobs.length;
  const order: Array<BenchJob | null> = [];
  let nextGood = every / 2;
  for (let i = 0, g = 0; i < total; i++) {
    if (g < jobs.length && i >= nextGood) {
      order.push(jobs[g++]!);
      nextGood += every;
    } else order.push(null);
  }
  let last = 0;
  for (let i = 0; i < order.length; i += inFlight) {
    const acks = await Promise.all(
      order.slice(i, i + inFlight).map((job, k) => {
        if (job)
          return env.js.publish(RESULT_SUBJECT, doneEnvelope(job), {
            headers: resultHeaders(job),
            timeout: PUBLISH_TIMEOUT_MS,
          });
        const h = natsHeaders();
        h.set('Nats-Msg-Id', `bad:${i + k}`);
        return env.js.publish(RESULT_SUBJECT, badData(), { headers: h, timeout: PUBLISH_TIMEOUT_MS });
      }),
    );
    for (const a of acks) last = Math.max(last, a.seq);
  }
  return last;
}

/** A daemon process on the bench's database and nats-server, its log in a file, its RSS sampled. */
function startDaemonProcess(env: BenchEnv) {
  const config = env.config({ LOG_LEVEL: 'warn' });
  const dir = mkdtempSync(join(tmpdir(), 'bench-flood-'));
  const logFile = join(dir, 'daemon.log');
  const out = openSync(logFile, 'w');
  const inherited = Object.entries(process.env).filter(([k]) => !k.startsWith('OTEL_'));
  const child = spawn(
    process.execPath,
    [fileURLToPath(new URL('../../bin/recognition-core.js', import.meta.url)), 'start'],
    {
      env: {
        ...Object.fromEntries(inherited),
        DATABASE_URL: config.DATABASE_URL,
        NATS_URL: config.NATS_URL,
        HTTP_PORT: '0',
        HTTP_HOST: '127.0.0.1',
        LOG_LEVEL: 'warn',
        LOG_PRETTY: 'false',
      },
      stdio: ['ignore', out, 'inherit'],
    },
  );
  let exitedEarly = false;
  let stopping = false;
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      if (!stopping) exitedEarly = true;
      resolve(code);
    }),
  );
  let maxRss = 0;
  const sampler = setInterval(() => {
    maxRss = Math.max(maxRss, (child.pid && rssBytes(child.pid)) || 0);
  }, 100);
  return {
    get maxRss() {
      return maxRss;
    },
    get exitedEarly() {
      return exitedEarly;
    },
    /** Stop it (SIGTERM), and return its log's lines. */
    async stop(): Promise<{ code: number | null; log: string }> {
      stopping = !exitedEarly;
      clearInterval(sampler);
      if (child.exitCode === null) child.kill('SIGTERM');
      const code = await exited;
      closeSync(out);
      const log = readFileSync(logFile, 'utf8');
      rmSync(dir, { recursive: true, force: true });
      return { code, log };
    },
  };
}

/** The moment of the daemon's first delivery (polled every 5 ms). */
async function firstDelivery(env: BenchEnv): Promise<number> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const info = await env.jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER);
    if (info.delivered.stream_seq > 0) return performance.now();
    if (Date.now() > deadline) throw new Error('the daemon delivered nothing within 60 s');
    await new Promise((r) => setTimeout(r, 5));
  }
}

async function countDone(env: BenchEnv): Promise<number> {
  const { rows } = await env.pool.query<{ n: string }>(
    `SELECT count(*) AS n FROM recognition_job WHERE status = 'done'`,
  );
  return Number(rows[0]!.n);
}

async function countQuarantined(env: BenchEnv): Promise<number> {
  const { rows } = await env.pool.query<{ n: string }>(`SELECT count(*) AS n FROM inbox_quarantine`);
  return Number(rows[0]!.n);
}

/** Run both scenarios; `log` gets a line as each ends. */
export async function measureFlood(env: BenchEnv, log: (line: string) => void): Promise<FloodResult> {
  // Big envelopes.
  const bigJobs = await seedPublishedJobs(env.pool, 200, env.history);
  await resetStream(env.jsm, env.config());
  const sample = floodEnvelope();
  log(
    `  big: publishing 300 envelopes of ${sample.byteLength} bytes (90 000 schema errors each) among 200 results`,
  );
  const bigLast = await publishMix(env, bigJobs, 300, floodEnvelope, 10);
  const bigDaemon = startDaemonProcess(env);
  let big: FloodResult['big'];
  try {
    const t0 = await firstDelivery(env);
    await waitAllAcked(env.jsm, bigLast, 15 * 60_000);
    const drainSeconds = (performance.now() - t0) / 1000;
    const { rows } = await env.pool.query<{ besides: string; payload: string }>(
      `SELECT max(pg_column_size(q.*) - pg_column_size(q.payload)) AS besides,
              max(octet_length(q.payload)) AS payload
       FROM inbox_quarantine q`,
    );
    const goodApplied = await countDone(env);
    const quarantined = await countQuarantined(env);
    const exitedEarly = bigDaemon.exitedEarly;
    const maxRss = bigDaemon.maxRss;
    const { log: text } = await bigDaemon.stop();
    const lines = text.split('\n').filter((l) => l.includes('"event":"quarantined"'));
    big = {
      bad: 300,
      good: 200,
      envelopeBytes: sample.byteLength,
      daemonExited: exitedEarly,
      maxRssBytes: maxRss,
      goodApplied,
      quarantined,
      logBytesPerBad: Buffer.byteLength(text) / 300,
      maxQuarantineLineBytes: Math.max(0, ...lines.map((l) => Buffer.byteLength(l) + 1)),
      maxRowBytesBesidesPayload: Number(rows[0]!.besides),
      maxStoredPayloadBytes: Number(rows[0]!.payload),
      drainSeconds,
    };
  } catch (err) {
    await bigDaemon.stop();
    throw err;
  }
  log(
    `  big: daemon ${big.daemonExited ? 'EXITED' : 'stayed up'}, peak RSS ${(big.maxRssBytes / 2 ** 20).toFixed(0)} MiB, ` +
      `${big.goodApplied} of ${big.good} good results applied, ${big.quarantined} quarantined, drained in ${big.drainSeconds.toFixed(1)} s; ` +
      `per bad envelope: ${(big.logBytesPerBad / 1024).toFixed(2)} KiB of log (longest quarantine line ${(big.maxQuarantineLineBytes / 1024).toFixed(2)} KiB), ` +
      `quarantine row ${(big.maxRowBytesBesidesPayload / 1024).toFixed(2)} KiB besides its payload of ${(big.maxStoredPayloadBytes / 1024).toFixed(0)} KiB (at most)`,
  );

  // Many small ones.
  const smallJobs = await seedPublishedJobs(env.pool, 100, env.history);
  await resetStream(env.jsm, env.config());
  log('  small: publishing 20 000 small schema-invalid envelopes with 100 results among them');
  const smallLast = await publishMix(env, smallJobs, 20_000, smallBadEnvelope, 2_000);
  const smallDaemon = startDaemonProcess(env);
  let small: FloodResult['small'];
  try {
    const t0 = await firstDelivery(env);
    const deadline = Date.now() + 10 * 60_000;
    let goodApplied = 0;
    while ((goodApplied = await countDone(env)) < 100 && Date.now() < deadline && !smallDaemon.exitedEarly)
      await new Promise((r) => setTimeout(r, 50));
    const goodAppliedSeconds = (performance.now() - t0) / 1000;
    await waitAllAcked(env.jsm, smallLast, 10 * 60_000);
    const drainSeconds = (performance.now() - t0) / 1000;
    small = {
      bad: 20_000,
      good: 100,
      daemonExited: smallDaemon.exitedEarly,
      goodAppliedSeconds,
      goodApplied,
      quarantined: await countQuarantined(env),
      drainSeconds,
    };
  } finally {
    await smallDaemon.stop();
  }
  log(
    `  small: daemon ${small.daemonExited ? 'EXITED' : 'stayed up'}, ${small.goodApplied} of ${small.good} good results applied ` +
      `${small.goodAppliedSeconds.toFixed(1)} s after the first delivery; ${small.quarantined} quarantined, all acked in ${small.drainSeconds.toFixed(1)} s`,
  );
  return { big, small };
}
