/**
 * The monitoring files are valid and complete: Prometheus's own `promtool` checks the rule file and
 * runs its unit tests (monitoring/recognition-core.rules.test.yml); every alert has a case where it
 * fires and one where it stays silent; the Grafana dashboard is well formed and uses only recording
 * rules the rule file defines. That every metric they name exists in a running daemon's /metrics,
 * and that a real Prometheus fires an alert, is test/integration/prometheus.test.ts.
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import {
  RULES_FILE,
  RULES_TEST_FILE,
  dashboardExprs,
  loadAlertTests,
  loadDashboard,
  loadRules,
  metricNames,
} from '../helpers/monitoringFiles.js';

function promtool(...args: string[]): { status: number | null; output: string } {
  const r = spawnSync('promtool', args, { encoding: 'utf8' });
  if (r.error)
    throw new Error(
      `promtool: ${r.error.message}; install Debian's prometheus package (bash scripts/ensure-prometheus.sh)`,
    );
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}

const rules = loadRules();
const alerts = rules.filter((r) => r.alert);
const recorded = new Set(rules.flatMap((r) => (r.record ? [r.record] : [])));

describe('alerting and recording rules', () => {
  it('pass `promtool check rules`', () => {
    const r = promtool('check', 'rules', RULES_FILE);
    expect(r.output).toContain('SUCCESS');
    expect(r.status, r.output).toBe(0);
  });

  it('pass their unit tests (`promtool test rules`)', () => {
    const r = promtool('test', 'rules', RULES_TEST_FILE);
    expect(r.status, r.output).toBe(0);
    expect(r.output).toContain('SUCCESS');
  });

  it('have, for every alert, a unit test where it fires and one where it stays silent', () => {
    const cases = loadAlertTests();
    expect(alerts.length).toBeGreaterThanOrEqual(10);
    const missing = alerts.flatMap((a) => {
      const own = cases.filter((c) => c.alertname === a.alert);
      return [
        ...(own.some((c) => c.exp_alerts.length > 0) ? [] : [`${a.alert}: no case where it fires`]),
        ...(own.some((c) => c.exp_alerts.length === 0) ? [] : [`${a.alert}: no case where it is silent`]),
      ];
    });
    expect(missing).toEqual([]);
    const unknown = cases.filter((c) => !alerts.some((a) => a.alert === c.alertname));
    expect(unknown.map((c) => c.alertname)).toEqual([]);
  });

  it('give every alert a severity, a summary, a description and a runbook', () => {
    for (const a of alerts) {
      expect(['critical', 'warning', 'info'], a.alert).toContain(a.labels?.severity);
      expect(Object.keys(a.annotations ?? {}).sort(), a.alert).toEqual(['description', 'runbook', 'summary']);
    }
  });

  it('cover what an operator needs to be woken for', () => {
    const used = new Set(alerts.flatMap((a) => metricNames(a.expr)));
    for (const name of [
      'up',
      'recognition_ready',
      'job_kind:recognition_inbox_consumer_pending:max',
      'recognition_inbox_quarantined_total',
      'recognition_inbox_envelopes_total',
      'job_result:recognition_publisher_results:rate5m',
      'recognition_dead_letters_total',
      'job:recognition_jobs_timed_out:ratio15m',
      'job_loop:recognition_step_duration_seconds:p99_5m',
      'recognition_retention_passes_total',
      'recognition_retention_last_success_timestamp_seconds',
    ])
      expect([...used], name).toContain(name);
  });

  it('use only recording rules that the file records', () => {
    const used = rules.flatMap((r) => metricNames(r.expr)).filter((n) => n.includes(':'));
    expect(used.filter((n) => !recorded.has(n))).toEqual([]);
  });
});

describe('Grafana dashboard', () => {
  const dashboard = loadDashboard();

  it('has unique panel ids, a Prometheus datasource variable and a query in every panel but rows', () => {
    const ids = dashboard.panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(dashboard.templating.list.find((v) => v.name === 'datasource')).toMatchObject({
      type: 'datasource',
      query: 'prometheus',
    });
    for (const p of dashboard.panels.filter((x) => x.type !== 'row')) {
      expect(p.targets?.length, p.title).toBeGreaterThan(0);
      for (const t of p.targets ?? [])
        expect(metricNames(t.expr).length, `${p.title}: ${t.expr}`).toBeGreaterThan(0);
    }
  });

  it('shows throughput by outcome, transitions per edge, step quantiles, consumer pending, jobs per status, quarantine reasons', () => {
    const exprs = dashboardExprs(dashboard);
    const shows = (name: string, by: string) =>
      exprs.some((e) => metricNames(e).includes(name) && e.includes(by));
    expect(shows('recognition_inbox_envelopes_total', 'by (outcome)')).toBe(true);
    expect(shows('recognition_job_transitions_total', 'by (from, event, to)')).toBe(true);
    for (const q of ['p50', 'p95', 'p99'])
      expect(shows(`job_loop:recognition_step_duration_seconds:${q}_5m`, '')).toBe(true);
    expect(shows('recognition_inbox_consumer_pending', 'by (kind)')).toBe(true);
    expect(shows('recognition_jobs', 'by (status)')).toBe(true);
    expect(shows('recognition_inbox_quarantined_total', 'by (reason)')).toBe(true);
  });

  it('uses only recording rules that the rule file records', () => {
    const used = dashboardExprs(dashboard)
      .flatMap((e) => metricNames(e))
      .filter((n) => n.includes(':'));
    expect(used.length).toBeGreaterThan(0);
    expect(used.filter((n) => !recorded.has(n))).toEqual([]);
  });
});

describe('metricNames', () => {
  it('finds metric and recording-rule names, not functions, labels, label values or durations', () => {
    expect(
      metricNames(
        'histogram_quantile(0.99, sum by (job, loop, le) (rate(recognition_step_duration_seconds_bucket{job=~"$job", loop="inbox"}[$__rate_interval]))) / ignoring (result) job:x:ratio5m and up{job="recognition_core"} == 0',
      ).sort(),
    ).toEqual(['job:x:ratio5m', 'recognition_step_duration_seconds_bucket', 'up']);
  });
});
