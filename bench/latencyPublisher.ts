/**
 * Child process of the latency measurement: a recognition service publishing result envelopes at
 * a fixed rate. It runs in its own process so that its timer is not delayed by the daemon's work,
 * and the daemon's event loop is not shared with it.
 *
 * Protocol (IPC): receives `{ natsUrl, jobs, rate, publish }`; publishes `jobs` in order at
 * `rate` per second (a 2 ms tick, catching up on whatever is due), recording for each job the
 * wall-clock time (`performance.timeOrigin + performance.now()`, sub-millisecond, the same clock as
 * the parent's) just before the publish call; sends back `{ times: [jobId, ms][], lagMs }` once
 * every publish is out (and, with `jetstream`, acked), then exits.
 *
 * `publish`: how a result goes out, both with its `Nats-Msg-Id` to `recognition.result`, where the
 * stream stores it:
 * - `core`: a plain NATS publish, no reply. The lightest load generator: it shares the machine's
 *   two cores with the daemon it measures, which a recognition service would not.
 * - `jetstream`: JetStream's publish, waiting for the stream's acknowledgement of each message, as
 *   a careful service would. It costs the publisher and nats-server about twice the CPU of `core`,
 *   all of it on the same cores.
 * The parent checks afterwards that every envelope was committed, so a lost publish fails the run.
 */
import { jetstream } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { RESULT_SUBJECT } from '../src/nats/subjects.js';
import { doneEnvelope, publishResult, resultHeaders, type BenchJob } from './env.js';

export type PublishMode = 'core' | 'jetstream';

interface Start {
  natsUrl: string;
  jobs: BenchJob[];
  rate: number;
  publish: PublishMode;
}

const wall = () => performance.timeOrigin + performance.now();

async function run({ natsUrl, jobs, rate, publish }: Start): Promise<void> {
  const nc = await connect({ servers: natsUrl, name: 'bench-latency-publisher' });
  const js = jetstream(nc);
  const times: Array<[string, number]> = [];
  const acks: Array<Promise<unknown>> = [];
  const started = wall();
  let sent = 0;
  // The worst lag of the publisher behind its schedule: a publisher that cannot keep the rate would
  // make the measured rate lower than intended; it is reported.
  let lagMs = 0;
  await new Promise<void>((resolve) => {
    const tick = () => {
      const now = wall();
      const due = Math.min(jobs.length, Math.floor(((now - started) / 1000) * rate) + 1);
      if (due - sent > 1) lagMs = Math.max(lagMs, ((due - sent - 1) / rate) * 1000);
      while (sent < due) {
        const job = jobs[sent++]!;
        times.push([job.jobId, wall()]);
        if (publish === 'jetstream') acks.push(publishResult(js, job, new Date()));
        else nc.publish(RESULT_SUBJECT, doneEnvelope(job, new Date()), { headers: resultHeaders(job) });
      }
      if (sent >= jobs.length) resolve();
      else setTimeout(tick, 2);
    };
    tick();
  });
  await Promise.all(acks);
  await nc.flush();
  await nc.drain();
  process.send!({ times, lagMs, seconds: (wall() - started) / 1000 }, () => process.exit(0));
}

process.once('message', (m: Start) => {
  run(m).catch((err: unknown) => {
    process.stderr.write(`latency publisher failed: ${String(err)}\n`);
    process.exit(1);
  });
});
