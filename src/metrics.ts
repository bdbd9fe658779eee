/**
 * Prometheus metrics (prom-client). One registry per daemon so tests can run several in one
 * process. Names are documented in the README ("Metrics"); do not rename them lightly.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export interface Metrics {
  registry: Registry;
  envelopes: Counter<'outcome'>;
  transitions: Counter<'from' | 'event' | 'to'>;
  quarantine: Counter<'reason'>;
  stepDuration: Histogram<'loop'>;
  batchSize: Histogram<'loop'>;
  watchdogSweepDuration: Histogram;
  watchdogTimeouts: Counter;
  publisherResults: Counter<'result'>;
  deadLetters: Counter<'reason'>;
  jobsByStatus: Gauge<'status'>;
  inboxPending: Gauge<'kind'>;
}

export interface MetricsSources {
  /** Jobs per status, read on every scrape. */
  jobsByStatus?: () => Promise<Array<{ status: string; count: number }>>;
  /** core-inbox's pending and ack-pending counts, read on every scrape. */
  inboxPending?: () => Promise<{ pending: number; ackPending: number } | undefined>;
}

/**
 * A gauge's `collect`: read `source` on every scrape and show what it returned. A source that
 * fails (the database or NATS is down) leaves the last values: /readyz reports the outage.
 */
function readOnScrape<T, L extends string>(
  source: (() => Promise<T>) | undefined,
  show: (gauge: Gauge<L>, value: T) => void,
): (this: Gauge<L>) => Promise<void> {
  return async function (this: Gauge<L>) {
    if (!source) return;
    let value: T;
    try {
      value = await source();
    } catch {
      return;
    }
    show(this, value);
  };
}

/** Create the registry and every metric; `sources` feed the gauges that are read on scrape. */
export function createMetrics(sources: MetricsSources = {}, defaults = true): Metrics {
  const registry = new Registry();
  if (defaults) collectDefaultMetrics({ register: registry, prefix: 'recognition_core_' });
  const registers = [registry];
  return {
    registry,
    envelopes: new Counter({
      name: 'recognition_inbox_envelopes_total',
      help: 'Envelopes handled by the inbox, by outcome (applied, duplicate, ignored, late, unknown_job, quarantined, retried)',
      labelNames: ['outcome'],
      registers,
    }),
    transitions: new Counter({
      name: 'recognition_job_transitions_total',
      help: 'Applied job transitions, by edge',
      labelNames: ['from', 'event', 'to'],
      registers,
    }),
    quarantine: new Counter({
      name: 'recognition_inbox_quarantined_total',
      help: 'Envelopes quarantined, by reason',
      labelNames: ['reason'],
      registers,
    }),
    stepDuration: new Histogram({
      name: 'recognition_step_duration_seconds',
      help: 'Duration of one step transaction (a batch of events), by loop',
      labelNames: ['loop'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers,
    }),
    batchSize: new Histogram({
      name: 'recognition_step_batch_size',
      help: 'Events per step transaction, by loop',
      labelNames: ['loop'],
      buckets: [1, 2, 5, 10, 25, 50, 100, 200, 500, 1000],
      registers,
    }),
    watchdogSweepDuration: new Histogram({
      name: 'recognition_watchdog_sweep_duration_seconds',
      help: 'Duration of one watchdog sweep (until nothing is due)',
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30],
      registers,
    }),
    watchdogTimeouts: new Counter({
      name: 'recognition_watchdog_timeouts_total',
      help: 'Jobs the watchdog moved to timeout',
      registers,
    }),
    publisherResults: new Counter({
      name: 'recognition_publisher_results_total',
      help: 'Publish attempts by result (published, failed, dlq)',
      labelNames: ['result'],
      registers,
    }),
    deadLetters: new Counter({
      name: 'recognition_dead_letters_total',
      help: 'Jobs moved to dlq, by error code (PUBLISH_FAILED, MAX_DELIVERIES)',
      labelNames: ['reason'],
      registers,
    }),
    jobsByStatus: new Gauge({
      name: 'recognition_jobs',
      help: 'Jobs now in each status',
      labelNames: ['status'],
      registers,
      collect: readOnScrape(sources.jobsByStatus, (gauge, rows) => {
        gauge.reset();
        for (const r of rows) gauge.set({ status: r.status }, r.count);
      }),
    }),
    inboxPending: new Gauge({
      name: 'recognition_inbox_consumer_pending',
      help: 'core-inbox messages not yet delivered (pending) and delivered but not acked (ack_pending)',
      labelNames: ['kind'],
      registers,
      collect: readOnScrape(sources.inboxPending, (gauge, p) => {
        if (!p) return;
        gauge.set({ kind: 'pending' }, p.pending);
        gauge.set({ kind: 'ack_pending' }, p.ackPending);
      }),
    }),
  };
}
