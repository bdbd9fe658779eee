/**
 * The monitoring files of the checkout, read for tests: the rule file (groups, recording rules,
 * alerts), its promtool unit tests, the Grafana dashboard, and the metric names their PromQL uses.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

const at = (path: string) => fileURLToPath(new URL(`../../monitoring/${path}`, import.meta.url));

export const RULES_FILE = at('recognition-core.rules.yml');
export const RULES_TEST_FILE = at('recognition-core.rules.test.yml');
export const DASHBOARD_FILE = at('recognition-core.dashboard.json');

export interface Rule {
  record?: string;
  alert?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/** Every rule of every group of the rule file. */
export function loadRules(): Rule[] {
  const doc = parse(readFileSync(RULES_FILE, 'utf8')) as { groups: Array<{ rules: Rule[] }> };
  return doc.groups.flatMap((g) => g.rules);
}

export interface RulesTestCase {
  eval_time: string;
  alertname: string;
  exp_alerts: unknown[];
}

/** Every `alert_rule_test` case of the promtool unit tests. */
export function loadAlertTests(): RulesTestCase[] {
  const doc = parse(readFileSync(RULES_TEST_FILE, 'utf8')) as {
    tests: Array<{ alert_rule_test?: RulesTestCase[] }>;
  };
  return doc.tests.flatMap((t) => t.alert_rule_test ?? []);
}

export interface DashboardPanel {
  id: number;
  type: string;
  title: string;
  targets?: Array<{ refId: string; expr: string }>;
}

export interface Dashboard {
  uid: string;
  title: string;
  panels: DashboardPanel[];
  templating: { list: Array<{ name: string; type: string; query?: unknown }> };
}

export function loadDashboard(): Dashboard {
  return JSON.parse(readFileSync(DASHBOARD_FILE, 'utf8')) as Dashboard;
}

/** Every PromQL expression of the dashboard's panels. */
export function dashboardExprs(d: Dashboard = loadDashboard()): string[] {
  return d.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
}

/**
 * The metric names an expression selects: words of our prefixes (`recognition_…`, and the recording
 * rules' `level:metric:operation`) and `up`, outside label matchers, strings and range brackets;
 * label names and PromQL keywords are none of these.
 */
export function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, '{}')
    .replace(/\[[^\]]*\]/g, '[]');
  const names = new Set<string>();
  for (const m of bare.matchAll(/(?<![\w:$])([a-zA-Z_][\w:]*)(?![\w:(])/g)) {
    const word = m[1]!;
    if (word === 'up' || word.startsWith('recognition_') || word.includes(':')) names.add(word);
  }
  return [...names];
}
