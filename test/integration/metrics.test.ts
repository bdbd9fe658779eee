/**
 * `/metrics` moves as envelopes are processed: a daemon with its inbox, a service client that
 * publishes acks and results for inserted jobs, and the Prometheus text read back over HTTP.
 * The names asserted here are the ones documented in docs/operations.md ("Metrics").
 */
import { describe, expect, it } from 'vitest';
import { insertJob, type JobFixture } from '../helpers/fixtures.js';
import { waitFor } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({
  database: true,
  nats: true,
  client: true,
  daemon: {
    // The database figures (recognition_jobs) are read every 200 ms here.
    env: { HTTP_FIGURES_INTERVAL_MS: '200' },
    loops: { inbox: true, watchdog: false, publisher: false, deadLetters: false, http: true },
  },
});

/** One sample of the Prometheus text: `name{labels} value`. */
interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

function parsePrometheus(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1]!] = l[2]!;
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

async function scrape(): Promise<Sample[]> {
  const res = await fetch(`${t.baseUrl}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
  return parsePrometheus(await res.text());
}

/** The value of the sample `name` whose labels include `labels` (0 when absent, like Prometheus). */
function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  const s = samples.find(
    (x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v),
  );
  return s?.value ?? 0;
}

const envelopes = (s: Sample[], outcome: string) =>
  value(s, 'recognition_inbox_envelopes_total', { outcome });

describe('/metrics', () => {
  const N = 25;
  let jobs: JobFixture[] = [];

  it('exports the process metrics and every family before any envelope', async () => {
    const s = await scrape();
    const names = new Set(s.map((x) => x.name));
    expect(names).toContain('recognition_core_process_cpu_user_seconds_total');
    expect(names).toContain('recognition_core_nodejs_heap_size_used_bytes');
    expect(envelopes(s, 'applied')).toBe(0);
  });

  it('counts applied envelopes and transitions by edge as acks and results are processed', async () => {
    jobs = await Promise.all(Array.from({ length: N }, () => insertJob(t.db, { status: 'published' })));
    for (const j of jobs) await t.svc.ack(j);
    for (const j of jobs) await t.svc.done(j);

    const s = await waitFor(
      async () => {
        const x = await scrape();
        return envelopes(x, 'applied') === 2 * N && value(x, 'recognition_jobs', { status: 'done' }) === N
          ? x
          : undefined;
      },
      `recognition_inbox_envelopes_total{outcome="applied"} = ${2 * N} and recognition_jobs{status="done"} = ${N}`,
    );

    expect(
      value(s, 'recognition_job_transitions_total', {
        from: 'published',
        event: 'ENVELOPE_PROCESSING',
        to: 'processing',
      }),
    ).toBe(N);
    expect(
      value(s, 'recognition_job_transitions_total', {
        from: 'processing',
        event: 'ENVELOPE_RESULT',
        to: 'done',
      }),
    ).toBe(N);
    expect(value(s, 'recognition_jobs', { status: 'done' })).toBe(N);
    expect(value(s, 'recognition_jobs', { status: 'published' })).toBe(0);
    expect(value(s, 'recognition_step_duration_seconds_count', { loop: 'inbox' })).toBeGreaterThan(0);
    expect(value(s, 'recognition_step_batch_size_sum', { loop: 'inbox' })).toBe(2 * N);
    expect(
      s.find((x) => x.name === 'recognition_inbox_consumer_pending' && x.labels.kind === 'pending')?.value,
    ).toBe(0);
  });

  it('counts envelopes that change nothing, and quarantine by reason', async () => {
    const [a, b] = jobs as [JobFixture, JobFixture];
    await t.svc.ack({ ...a, attempt: 2 }); // an ack for a job already done: ignored
    await t.svc.done(b, { msgId: `result:${b.jobId}:again` }); // another result for a done job: late
    await t.svc.raw('{"job_id": oops', { 'Nats-Msg-Id': 'garbage-1' }); // not JSON: quarantined

    const s = await waitFor(async () => {
      const x = await scrape();
      return envelopes(x, 'quarantined') === 1 && envelopes(x, 'late') === 1 && envelopes(x, 'ignored') === 1
        ? x
        : undefined;
    }, 'ignored, late and quarantined counted');
    expect(value(s, 'recognition_inbox_quarantined_total', { reason: 'INVALID_JSON' })).toBe(1);
    expect(envelopes(s, 'applied')).toBe(2 * N);
    expect(value(s, 'recognition_jobs', { status: 'done' })).toBe(N);
  });
});
