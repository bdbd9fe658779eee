/**
 * Prometheus metrics (prom-client). One registry per daemon so tests can run several in one
 * process; prom-client's process metrics are collected once per process and included in each.
 * Names are documented in docs/operations.md ("Metrics"); do not rename them lightly.
 */
import {
  Counter,
  Gauge,
  Histogram,
  Registry,
  collectDefaultMetrics,
  type GaugeConfiguration,
} from 'prom-client';
import { CORE_ERROR_CODE, QUARANTINE_REASONS } from '../machines/index.js';
import { packageVersion } from './packageInfo.js';

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
  publisherNatsUnavailable: Gauge;
  publisherOutageWaits: Counter;
  deadLetters: Counter<'reason'>;
  untrustedAdvisories: Counter<'reason'>;
  jobsByStatus: Gauge<'status'>;
  inboxPending: Gauge<'kind'>;
  ready: Gauge<'check'>;
  commitProbeDuration: Histogram<'result'>;
  buildInfo: Gauge<'version' | 'node'>;
  unknownMigrations: Gauge;
  retention: RetentionMetrics;
  inboxBatchFailures: Counter<'fault'>;
  inboxUnlockedFallbacks: Counter;
  inboxFlood: InboxFloodMetrics;
  jobsEstimated: Gauge<'status'>;
  httpFiguresTimestamp: Gauge;
  httpFiguresReads: Counter<'result'>;
  rollupDeltas: Counter;
}

/** `recognition_inbox_batch_failures_total`'s faults (see `classifyDatabaseFailure`). */
export const INBOX_BATCH_FAULTS = ['transient', 'infrastructure', 'message'] as const;

/** `recognition_inbox_envelopes_total`'s outcomes. */
export const ENVELOPE_OUTCOMES = [
  'applied',
  'duplicate',
  'ignored',
  'late',
  'unknown_job',
  'quarantined',
  'retried',
] as const;
/** `recognition_publisher_results_total`'s results. */
export const PUBLISHER_RESULTS = ['published', 'failed', 'dlq'] as const;
/** `recognition_dead_letters_total`'s reasons. */
export const DEAD_LETTER_REASONS = [CORE_ERROR_CODE.PUBLISH_FAILED, CORE_ERROR_CODE.MAX_DELIVERIES] as const;

/** Why the dead-letter loop ignored a max-deliveries advisory (`untrustedBecause` and its checks). */
export const UNTRUSTED_ADVISORY_REASONS = [
  'other_stream',
  'subject_mismatch',
  'unknown_consumer',
  'below_max_deliver',
  'never_delivered',
  'not_its_subject',
] as const;
export type UntrustedAdvisoryReason = (typeof UNTRUSTED_ADVISORY_REASONS)[number];

export interface MetricsSources {
  /**
   * Jobs per status (`exact: false` for an estimate) and when they were read, on every scrape:
   * the HTTP figures' last read, from memory (src/http/figures.ts); undefined before the first.
   */
  jobsByStatus?: () => Promise<JobFigures | undefined>;
  /** core-inbox's pending and ack-pending counts, read on every scrape. */
  inboxPending?: () => Promise<{ pending: number; ackPending: number } | undefined>;
  /** The readiness checks of /readyz (`true` when that part works), run on every scrape. */
  readiness?: () => Promise<Record<string, boolean>>;
}

/** What {@link MetricsSources.jobsByStatus} gives. */
export interface JobFigures {
  at: Date;
  jobs: Array<{ status: string; count: number; exact?: boolean }>;
}

/** `recognition_http_figures_reads_total`'s results. */
export const HTTP_FIGURES_READ_RESULTS = ['ok', 'failed'] as const;

/**
 * A gauge whose value is read on every scrape: `source` is read and `show` sets what it returned.
 * A source that fails (the database or NATS is down) or has nothing yet leaves the last values:
 * /readyz reports the outage.
 */
function scrapedGauge<T, L extends string>(
  config: GaugeConfiguration<L>,
  source: (() => Promise<T | undefined>) | undefined,
  show: (gauge: Gauge<L>, value: T) => void,
): Gauge<L> {
  return new Gauge({
    ...config,
    async collect(this: Gauge<L>) {
      const value = await source?.().catch(() => undefined);
      if (value !== undefined) show(this, value);
    },
  });
}

/**
 * prom-client's process metrics (CPU, memory, handles, event-loop lag, GC), collected once per
 * process: they describe the process, not a daemon, and their collectors (a GC observer, an
 * event-loop delay histogram) run until the process exits. A daemon's registry holds them by
 * reference, so nothing global refers to a daemon and a stopped one is garbage.
 */
let processMetrics: Registry | undefined;
function processRegistry(): Registry {
  if (!processMetrics) {
    processMetrics = new Registry();
    collectDefaultMetrics({ register: processMetrics, prefix: 'recognition_core_' });
  }
  return processMetrics;
}

/**
 * Create the registry and every metric; `sources` feed the gauges that are read on scrape.
 * Every counter series with a known label value starts at 0: Prometheus's `increase()` and
 * `rate()` need a sample before the first event, or the first quarantine (dead letter, retry)
 * after a start would never show as an increase and its alert would not fire.
 *
 * `defaultMetrics`: prom-client's process metrics too (on unless false).
 */
export function createMetrics(
  sources: MetricsSources = {},
  { defaultMetrics = true }: { defaultMetrics?: boolean } = {},
): Metrics {
  // A registry of its own that starts with the process's metrics (the same objects).
  const registry = defaultMetrics ? Registry.merge([processRegistry()]) : new Registry();
  const registers = [registry];
  const metrics: Metrics = {
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
    publisherNatsUnavailable: new Gauge({
      name: 'recognition_publisher_nats_unavailable',
      help: '1 while the publisher waits for NATS or JetStream to take messages again (jobs stay pending, their attempts unspent), 0 otherwise',
      registers,
    }),
    publisherOutageWaits: new Counter({
      name: 'recognition_publisher_outage_waits_total',
      help: 'Job publishes put off because NATS or JetStream was unavailable; they spend no publish attempt',
      registers,
    }),
    deadLetters: new Counter({
      name: 'recognition_dead_letters_total',
      help: 'Jobs moved to dlq, by error code (PUBLISH_FAILED, MAX_DELIVERIES)',
      labelNames: ['reason'],
      registers,
    }),
    untrustedAdvisories: new Counter({
      name: 'recognition_dead_letter_advisories_untrusted_total',
      help: 'Max-deliveries advisories the dead-letter loop ignored because their consumer does not bear them out, by reason: not one is expected from the server, each is a forged or stale advisory',
      labelNames: ['reason'],
      registers,
    }),
    jobsByStatus: scrapedGauge(
      { name: 'recognition_jobs', help: 'Jobs now in each status', labelNames: ['status'], registers },
      sources.jobsByStatus,
      (gauge, figures) => {
        gauge.reset();
        for (const r of figures.jobs) gauge.set({ status: r.status }, r.count);
      },
    ),
    inboxPending: scrapedGauge(
      {
        name: 'recognition_inbox_consumer_pending',
        help: 'core-inbox messages not yet delivered (pending) and delivered but not acked (ack_pending)',
        labelNames: ['kind'],
        registers,
      },
      sources.inboxPending,
      (gauge, p) => {
        gauge.set({ kind: 'pending' }, p.pending);
        gauge.set({ kind: 'ack_pending' }, p.ackPending);
      },
    ),
    ready: scrapedGauge(
      {
        name: 'recognition_ready',
        help: 'Readiness checks of /readyz: 1 when that part works (database, commits, nats, consumer), 0 when not',
        labelNames: ['check'],
        registers,
      },
      sources.readiness,
      (gauge, checks) => {
        for (const [check, ok] of Object.entries(checks)) gauge.set({ check }, ok ? 1 : 0);
      },
    ),
    commitProbeDuration: new Histogram({
      name: 'recognition_commit_probe_duration_seconds',
      help: 'Duration of the write transaction of the commits readiness check, by result (committed, failed)',
      labelNames: ['result'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    }),
    buildInfo: new Gauge({
      name: 'recognition_build_info',
      help: 'Always 1; the labels say which build runs: version (package.json) and node (the Node.js version)',
      labelNames: ['version', 'node'],
      registers,
    }),
    unknownMigrations: new Gauge({
      name: 'recognition_db_unknown_migrations',
      help: 'Migrations the database carries that this build does not know (applied by a newer version), counted at start',
      registers,
    }),
    retention: createRetentionMetrics(registers),
    inboxBatchFailures: new Counter({
      name: 'recognition_inbox_batch_failures_total',
      help: 'Inbox batch transactions that failed, by fault: transient and infrastructure (nak, retried with backoff, nothing quarantined), message (applied one by one, the refused envelope quarantined)',
      labelNames: ['fault'],
      registers,
    }),
    inboxUnlockedFallbacks: new Counter({
      name: 'recognition_inbox_unlocked_fallbacks_total',
      help: 'Inbox batches the unlocked path found inconsistent and handed to the locked path',
      registers,
    }),
    inboxFlood: createInboxFloodMetrics(registers),
    jobsEstimated: scrapedGauge(
      {
        name: 'recognition_jobs_estimated',
        help: "1 when recognition_jobs of that status is the planner's estimate (a final status with many jobs), 0 when it is an exact count",
        labelNames: ['status'],
        registers,
      },
      sources.jobsByStatus,
      (gauge, figures) => {
        for (const r of figures.jobs) gauge.set({ status: r.status }, r.exact === false ? 1 : 0);
      },
    ),
    // An unlabelled gauge reads 0 until it is set: before the first read.
    httpFiguresTimestamp: scrapedGauge(
      {
        name: 'recognition_http_figures_timestamp_seconds',
        help: 'When the database figures on /metrics and /statechart (recognition_jobs) were read (Unix time, the database clock); 0 before the first read',
        registers,
      },
      sources.jobsByStatus,
      (gauge, figures) => gauge.set(figures.at.getTime() / 1000),
    ),
    httpFiguresReads: new Counter({
      name: 'recognition_http_figures_reads_total',
      help: 'Reads of the database figures of /metrics and /statechart, by result (ok, failed)',
      labelNames: ['result'],
      registers,
    }),
    rollupDeltas: new Counter({
      name: 'recognition_rollup_deltas_total',
      help: "Transitions this instance's rollup loop added to the console's per-minute rollup",
      registers,
    }),
  };
  metrics.buildInfo.set({ version: packageVersion(), node: process.version }, 1);
  metrics.unknownMigrations.set(0);
  for (const outcome of ENVELOPE_OUTCOMES) metrics.envelopes.inc({ outcome }, 0);
  for (const reason of QUARANTINE_REASONS) metrics.quarantine.inc({ reason }, 0);
  for (const result of PUBLISHER_RESULTS) metrics.publisherResults.inc({ result }, 0);
  for (const reason of DEAD_LETTER_REASONS) metrics.deadLetters.inc({ reason }, 0);
  for (const reason of UNTRUSTED_ADVISORY_REASONS) metrics.untrustedAdvisories.inc({ reason }, 0);
  for (const fault of INBOX_BATCH_FAULTS) metrics.inboxBatchFailures.inc({ fault }, 0);
  metrics.inboxUnlockedFallbacks.inc(0);
  for (const result of HTTP_FIGURES_READ_RESULTS) metrics.httpFiguresReads.inc({ result }, 0);
  metrics.rollupDeltas.inc(0);
  return metrics;
}

/** The metrics of the retention loop (src/daemon/retention.ts). */
export interface RetentionMetrics {
  deleted: Counter<'table'>;
  passes: Counter<'outcome'>;
  passDuration: Histogram;
  lastPass: Gauge;
  lastSuccess: Gauge;
  interval: Gauge;
}

/** `recognition_retention_deleted_total`'s tables. */
export const RETENTION_DELETED_TABLES = [
  'recognition_job',
  'recognition_job_transition',
  'inbox_quarantine',
] as const;
/** `recognition_retention_passes_total`'s outcomes. */
export const RETENTION_PASS_OUTCOMES = ['done', 'busy', 'halted', 'failed'] as const;

/** Create the retention metrics in `registers`, every known series at 0. */
function createRetentionMetrics(registers: Registry[]): RetentionMetrics {
  const m: RetentionMetrics = {
    deleted: new Counter({
      name: 'recognition_retention_deleted_total',
      help: 'Rows retention deleted, by table (recognition_job, recognition_job_transition, inbox_quarantine)',
      labelNames: ['table'],
      registers,
    }),
    passes: new Counter({
      name: 'recognition_retention_passes_total',
      help: 'Retention passes by outcome (done, busy: another instance held the lock, halted: stopping, failed)',
      labelNames: ['outcome'],
      registers,
    }),
    passDuration: new Histogram({
      name: 'recognition_retention_pass_duration_seconds',
      help: 'Duration of one retention pass',
      buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900],
      registers,
    }),
    lastPass: new Gauge({
      name: 'recognition_retention_last_pass_timestamp_seconds',
      help: 'When the last retention pass of this instance that went through ended (Unix time); 0 before the first',
      registers,
    }),
    lastSuccess: new Gauge({
      name: 'recognition_retention_last_success_timestamp_seconds',
      help: 'When the last successful retention pass of this instance ended (Unix time); 0 before the first',
      registers,
    }),
    interval: new Gauge({
      name: 'recognition_retention_interval_seconds',
      help: "The pause between this instance's retention passes (RETENTION_INTERVAL_MS); 0 when it runs none",
      registers,
    }),
  };
  for (const table of RETENTION_DELETED_TABLES) m.deleted.inc({ table }, 0);
  for (const outcome of RETENTION_PASS_OUTCOMES) m.passes.inc({ outcome }, 0);
  return m;
}

/** The inbox's metrics of hostile or broken senders (src/daemon/inbox.ts). */
export interface InboxFloodMetrics {
  quarantinedByService: Counter<'service' | 'reason'>;
  terminated: Counter;
}

/**
 * The `service` label of a sender that is not among the known services: the sender picks its
 * `service.name`, so only names the core knows become label values (src/daemon/serviceLabels.ts).
 */
export const SERVICE_LABEL_OTHER = 'other';

/** Create the inbox flood metrics in `registers`, every known series at 0. */
function createInboxFloodMetrics(registers: Registry[]): InboxFloodMetrics {
  const m: InboxFloodMetrics = {
    quarantinedByService: new Counter({
      name: 'recognition_inbox_quarantined_by_service_total',
      help: 'Envelopes quarantined, by the service they name (a known service, or "other") and reason',
      labelNames: ['service', 'reason'],
      registers,
    }),
    terminated: new Counter({
      name: 'recognition_inbox_terminated_total',
      help: 'Messages terminated (term) because not even their bounded quarantine record could be stored',
      registers,
    }),
  };
  for (const reason of QUARANTINE_REASONS)
    m.quarantinedByService.inc({ service: SERVICE_LABEL_OTHER, reason }, 0);
  m.terminated.inc(0);
  return m;
}
