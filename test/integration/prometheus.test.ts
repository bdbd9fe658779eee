/**
 * A real Prometheus (Debian's binary) scrapes a running daemon every second and evaluates
 * monitoring/recognition-core.rules.yml, unchanged, every second: after bad envelopes are sent to
 * recognition.result, RecognitionInboxQuarantining fires, while the daemon's readiness and target
 * alerts stay quiet. Every metric the rules and the Grafana dashboard name exists in the daemon's
 * /metrics, and every dashboard query is valid PromQL to that Prometheus.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPrometheus, type PrometheusHandle } from '../helpers/prometheusServer.js';
import { waitFor } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';
import { RULES_FILE, dashboardExprs, loadRules, metricNames } from '../helpers/monitoringFiles.js';

const t = useHarness({
  database: true,
  nats: true,
  client: true,
  daemon: {
    env: { LOG_LEVEL: 'info', WATCHDOG_INTERVAL_MS: '500', PUBLISHER_POLL_INTERVAL_MS: '500' },
    loops: { inbox: true, watchdog: true, publisher: true, deadLetters: true, http: true },
  },
});
let prometheus: PrometheusHandle;

/** Long enough for Prometheus to start, scrape a few times and evaluate; polled, never slept. */
const WITHIN_MS = 60_000;

interface Alert {
  labels: Record<string, string>;
  state: 'pending' | 'firing';
  value: string;
}
interface VectorSample {
  metric: Record<string, string>;
  value: [number, string];
}

const alertsNow = async () => (await prometheus.api<{ alerts: Alert[] }>('alerts')).alerts;
const query = (expr: string) =>
  prometheus.api<{ resultType: string; result: VectorSample[] }>('query', { query: expr });

beforeAll(async () => {
  prometheus = await startPrometheus({
    targets: [`127.0.0.1:${t.daemon.http!.port}`],
    jobName: 'recognition-core',
    ruleFiles: [RULES_FILE],
    interval: '1s',
  });
});

afterAll(async () => {
  await prometheus?.cleanup();
});

describe('a real Prometheus scraping the daemon', () => {
  it('scrapes it, loads the rules, and sees it up and ready', async () => {
    await waitFor(
      async () => (await query('up{job="recognition-core"} == 1')).result.length === 1,
      'the daemon scraped and up',
      WITHIN_MS,
    );
    const groups = await prometheus.api<{ groups: Array<{ name: string; rules: unknown[] }> }>('rules');
    expect(groups.groups.map((g) => g.name).sort()).toEqual([
      'recognition-core.alerts',
      'recognition-core.recording',
    ]);
    await waitFor(
      async () => (await query('min(recognition_ready{job="recognition-core"})')).result[0]?.value[1] === '1',
      'recognition_ready 1 for every check',
      WITHIN_MS,
    );
    // The baseline the first quarantine is counted against: the series exists at 0 before any.
    const baseline = await waitFor(
      async () => {
        const r = await query('recognition_inbox_quarantined_total{reason="INVALID_JSON"}');
        return r.result.length === 1 ? r.result : undefined;
      },
      'recognition_inbox_quarantined_total{reason="INVALID_JSON"} scraped',
      WITHIN_MS,
    );
    expect(baseline[0]!.value[1]).toBe('0');
  });

  it('fires RecognitionInboxQuarantining after bad envelopes are sent to recognition.result', async () => {
    expect((await alertsNow()).filter((a) => a.labels.alertname === 'RecognitionInboxQuarantining')).toEqual(
      [],
    );
    await t.svc.raw('{"job_id": not json', { 'Nats-Msg-Id': 'garbage-1' });
    await t.svc.raw('<html>', { 'Nats-Msg-Id': 'garbage-2' });
    await t.svc.envelope({ job_id: 'not-a-uuid', status: 'done' }, 'bad-schema-1');

    const firing = await waitFor(
      async () => {
        const mine = (await alertsNow()).filter(
          (a) => a.labels.alertname === 'RecognitionInboxQuarantining' && a.state === 'firing',
        );
        return mine.length === 2 ? mine : undefined;
      },
      'RecognitionInboxQuarantining firing for INVALID_JSON and SCHEMA_INVALID',
      WITHIN_MS,
    );
    const byReason = Object.fromEntries(firing.map((a) => [a.labels.reason, a]));
    expect(Object.keys(byReason).sort()).toEqual(['INVALID_JSON', 'SCHEMA_INVALID']);
    expect(byReason.INVALID_JSON!.labels).toMatchObject({ job: 'recognition-core', severity: 'warning' });
    expect(Number(byReason.INVALID_JSON!.value)).toBeGreaterThanOrEqual(2);

    const others = (await alertsNow()).filter((a) =>
      ['RecognitionCoreDown', 'RecognitionCoreAbsent', 'RecognitionCoreNotReady'].includes(
        a.labels.alertname ?? '',
      ),
    );
    expect(others).toEqual([]);
  });

  it('finds every metric the rules and the dashboard name in the daemon’s /metrics', async () => {
    const text = await (await fetch(`${t.baseUrl}/metrics`)).text();
    const families = new Map(
      [...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!] as const),
    );
    const exported = (name: string): boolean => {
      if (families.has(name)) return true;
      const base = name.replace(/_(bucket|sum|count)$/, '');
      return base !== name && families.get(base) === 'histogram';
    };
    const rules = loadRules();
    const recorded = new Set(rules.flatMap((r) => (r.record ? [r.record] : [])));
    const named = new Set([...rules.map((r) => r.expr), ...dashboardExprs()].flatMap(metricNames));
    const raw = [...named].filter((n) => n !== 'up' && !recorded.has(n));
    expect(raw.length).toBeGreaterThan(10);
    expect(raw.filter((n) => !exported(n))).toEqual([]);
    expect([...named].filter((n) => n.includes(':') && !recorded.has(n))).toEqual([]);
  });

  it('answers every dashboard query (valid PromQL with the dashboard variables filled in)', async () => {
    const failures: string[] = [];
    for (const expr of dashboardExprs()) {
      const filled = expr
        .replaceAll('$__rate_interval', '1m')
        .replaceAll('$__range', '5m')
        .replaceAll('$job', 'recognition-core')
        .replaceAll('$instance', '.*');
      await query(filled).catch((err: unknown) => failures.push(`${expr}: ${String(err)}`));
    }
    expect(failures).toEqual([]);
    const ready = await query('min by (instance, check) (recognition_ready{job=~"recognition-core"})');
    expect(ready.result.map((r) => r.metric.check).sort()).toEqual([
      'commits',
      'consumer',
      'database',
      'nats',
    ]);
  });
});
