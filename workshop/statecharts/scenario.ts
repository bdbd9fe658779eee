/**
 * Scenarios: a job's starting row and a sequence of things that happen to it (publish outcomes,
 * envelopes from the service, the watchdog's deadline ticks, JetStream's max-deliveries advisory),
 * run through the pure machine with no service at all. The format is documented in
 * `visualizations/scenarios/README.md`.
 *
 * Pure but for reading the file: `runScenario` calls only the machine (`decide()`), the envelope
 * decoder the inbox uses, and the row ↔ context mapping the step uses.
 */
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import {
  JOB_STATUSES,
  QUARANTINE_REASON,
  decide,
  recognitionJobMachine,
  type JobEffect,
  type JobEvent,
  type JobStatus,
} from '../../machines/index.js';
import { changedColumns, rowToJobState } from '../../src/db/jobRow.js';
import type { JobRow } from '../../src/db/schema.js';
import { decodeEnvelope } from '../../src/messages/decodeEnvelope.js';
import { envelopeToJobEvent, serviceMismatchDetails } from '../../src/messages/envelopeToJobEvent.js';
import { UsageError } from '../../src/errors.js';
import { readMachineGraph } from '../../src/statecharts/machineGraph.js';
import { DECISION_LOG_LEVEL, chooseTransition } from './stateEventTable.js';

// ---------------------------------------------------------------------------------------------
// The file format
// ---------------------------------------------------------------------------------------------

/** `+90s`, `+10m`, `+2m30s`, `+1h`, `+250ms` after `start`, or an ISO 8601 timestamp. */
const RELATIVE = /^\+(?:\d+(?:\.\d+)?(?:ms|s|m|h))+$/;
const RELATIVE_PART = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 } as const;

const timestamp = z.string().refine((v) => !Number.isNaN(Date.parse(v)), 'must be an ISO 8601 timestamp');
const at = z
  .string()
  .refine(
    (v) => RELATIVE.test(v) || !Number.isNaN(Date.parse(v)),
    'must be +<n>ms|s|m|h (e.g. +2m30s) or an ISO 8601 timestamp',
  );
const common = { at: at.optional(), note: z.string().optional() };

const publishEvent = z.strictObject({
  ...common,
  publish: z.enum(['accepted', 'failed']),
  error: z.string().optional(),
});
const envelopeEvent = z.strictObject({
  ...common,
  envelope: z.record(z.string(), z.unknown()),
  msg_id: z.string().nullable().optional(),
});
const tickEvent = z.strictObject({ ...common, tick: z.literal('deadline') });
const maxDeliveriesEvent = z.strictObject({ ...common, max_deliveries: z.number().int().min(1) });

export const scenarioEventSchema = z.union([publishEvent, envelopeEvent, tickEvent, maxDeliveriesEvent]);
export type ScenarioEvent = z.infer<typeof scenarioEventSchema>;

const uuid = z
  .string()
  .regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, 'must be a uuid');
const columns = {
  id: uuid.optional(),
  file_id: uuid.optional(),
  attempt: z.number().int().min(1).optional(),
  target_service: z.string().optional(),
  status: z.enum(JOB_STATUSES as [JobStatus, ...JobStatus[]]),
  service_name: z.string().nullable().optional(),
  service_version: z.string().nullable().optional(),
  publish_attempts: z.number().int().min(0).optional(),
  next_publish_at: timestamp.nullable().optional(),
  published_at: timestamp.nullable().optional(),
  reply_deadline: timestamp.nullable().optional(),
  started_at: timestamp.nullable().optional(),
  finished_at: timestamp.nullable().optional(),
  metrics: z.record(z.string(), z.unknown()).nullable().optional(),
  error_code: z.string().nullable().optional(),
  error_message: z.string().nullable().optional(),
  result_schema_version: z.string().nullable().optional(),
  result_s3_object_id: z.string().nullable().optional(),
  result_msg_id: z.string().nullable().optional(),
};

export const scenarioSchema = z.strictObject({
  $schema: z.string().optional(),
  name: z.string().min(1),
  description: z.string().optional(),
  start: timestamp.default('2025-03-01T10:00:00.000Z'),
  job: z.strictObject(columns),
  file_is_current: z.boolean().default(true),
  config: z
    .strictObject({
      REPLY_TIMEOUT_MS: z.number().int().min(1).default(600_000),
      MAX_PUBLISH_ATTEMPTS: z.number().int().min(1).default(5),
      PUBLISH_BACKOFF_BASE_MS: z.number().int().min(1).default(1_000),
      PUBLISH_BACKOFF_MAX_MS: z.number().int().min(1).default(60_000),
    })
    .prefault({}),
  events: z.array(scenarioEventSchema).min(1),
  expect: z
    .strictObject({
      statuses: z.array(z.enum(JOB_STATUSES as [JobStatus, ...JobStatus[]])).optional(),
      decisions: z.array(z.enum(['applied', 'duplicate', 'ignored', 'late', 'quarantined'])).optional(),
      final_status: z.enum(JOB_STATUSES as [JobStatus, ...JobStatus[]]).optional(),
    })
    .optional(),
});
export type Scenario = z.infer<typeof scenarioSchema>;

/** Validate a parsed scenario; a UsageError names every problem with its path. */
export function parseScenario(value: unknown, { source = 'scenario' }: { source?: string } = {}): Scenario {
  const result = scenarioSchema.safeParse(value);
  if (result.success) return result.data;
  const problems = result.error.issues.map(
    (i) => `${i.path.length ? i.path.join('.') : '(root)'}: ${i.message}`,
  );
  throw new UsageError(`${source} is not a valid scenario: ${problems.join('; ')}`);
}

/** Read and validate a scenario file (JSON). */
export async function loadScenario(path: string): Promise<Scenario> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new UsageError(`cannot read scenario ${path}: ${(err as Error).message}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new UsageError(`scenario ${path} is not JSON: ${(err as Error).message}`);
  }
  return parseScenario(value, { source: path });
}

// ---------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------

/** One line of the trace. */
export interface TraceStep {
  index: number;
  at: string;
  note: string | null;
  /** The scenario event in a few words. */
  input: string;
  /**
   * The machine event built from it (dates as ISO strings); null when the decoder quarantined the
   * envelope (one the machine rejected has both its event and its quarantine).
   */
  event: Record<string, unknown> | null;
  /**
   * Why the inbox would quarantine the envelope instead of applying it: the decoder's reason, or
   * `SERVICE_MISMATCH` when the machine rejected it.
   */
  quarantine: { reason: string; details: unknown } | null;
  /** The transition the machine took: its guard and the guards tried before it, all false. */
  guard: { name: string | null; description: string; via: 'state' | 'root'; failed: string[] } | null;
  from: JobStatus;
  to: JobStatus;
  decision: 'applied' | 'duplicate' | 'ignored' | 'late' | 'quarantined';
  reason: string | null;
  /** The level the inbox logs this decision at (see DECISION_LOG_LEVEL). */
  level: 'debug' | 'info' | 'warn';
  effects: JobEffect[];
  /** The job columns the event changed, with their new values. */
  changes: Record<string, unknown>;
}

export interface Trace {
  scenario: string;
  description: string | null;
  start: { at: string; status: JobStatus; fileIsCurrent: boolean };
  steps: TraceStep[];
  final: { status: JobStatus; row: Record<string, unknown> };
  /** Failed expectations of the scenario's `expect` (empty: met, or none given). */
  unmet: string[];
}

function resolveAt(value: string | undefined, start: Date, previous: Date): Date {
  if (value === undefined) return previous;
  if (!RELATIVE.test(value)) return new Date(value);
  let ms = 0;
  for (const [, n, unit] of value.matchAll(RELATIVE_PART))
    ms += Number(n) * UNIT_MS[unit as keyof typeof UNIT_MS];
  return new Date(start.getTime() + ms);
}

const date = (v: string | null | undefined) => (v === null || v === undefined ? null : new Date(v));

/** The starting row: the given columns, with defaults a job in that status would have. */
export function startingRow(s: Scenario): JobRow {
  const start = new Date(s.start);
  const j = s.job;
  const published = j.status !== 'pending';
  const publishedAt = j.published_at !== undefined ? date(j.published_at) : published ? start : null;
  return {
    id: j.id ?? '00000000-0000-4000-8000-00000000a001',
    file_id: j.file_id ?? '00000000-0000-4000-8000-00000000f001',
    attempt: j.attempt ?? 1,
    target_service: j.target_service ?? 'tabular-parser',
    status: j.status,
    service_name: j.service_name ?? null,
    service_version: j.service_version ?? null,
    publish_attempts: j.publish_attempts ?? (published ? 1 : 0),
    next_publish_at: j.next_publish_at !== undefined ? date(j.next_publish_at) : published ? null : start,
    published_at: publishedAt,
    reply_deadline:
      j.reply_deadline !== undefined
        ? date(j.reply_deadline)
        : publishedAt && (j.status === 'published' || j.status === 'processing')
          ? new Date(publishedAt.getTime() + s.config.REPLY_TIMEOUT_MS)
          : null,
    started_at: date(j.started_at),
    finished_at: date(j.finished_at),
    metrics: j.metrics ?? null,
    error_code: j.error_code ?? null,
    error_message: j.error_message ?? null,
    result_schema_version: j.result_schema_version ?? null,
    result_s3_object_id: j.result_s3_object_id ?? null,
    result_msg_id: j.result_msg_id ?? null,
    created_at: start,
    updated_at: start,
  };
}

function plain(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value)) as unknown;
}

/** The quarantine of an envelope from a service other than the job's target (as the inbox writes it). */
function serviceMismatch(expected: string, got: string): { reason: string; details: unknown } {
  return { reason: QUARANTINE_REASON.SERVICE_MISMATCH, details: serviceMismatchDetails(expected, got) };
}

function describeInput(e: ScenarioEvent): string {
  if ('publish' in e)
    return e.publish === 'accepted'
      ? 'publish: JetStream accepted the job message'
      : `publish failed: ${e.error ?? 'error'}`;
  if ('envelope' in e)
    return `envelope ${String(e.envelope['status'])}${e.msg_id ? ` (msg id ${e.msg_id})` : ' (no msg id)'}`;
  if ('tick' in e) return 'watchdog: deadline tick';
  return `JetStream advisory: max deliveries (${e.max_deliveries})`;
}

/**
 * Run `s` through the pure machine. Envelopes are decoded exactly as the inbox decodes them
 * (an invalid one is "quarantined" and changes nothing); every other input becomes its event.
 */
export function runScenario(s: Scenario): Trace {
  const graph = readMachineGraph(recognitionJobMachine);
  const start = new Date(s.start);
  const row = startingRow(s);
  let state = rowToJobState(row, s.file_is_current);
  const policy = {
    maxAttempts: s.config.MAX_PUBLISH_ATTEMPTS,
    baseDelayMs: s.config.PUBLISH_BACKOFF_BASE_MS,
    maxDelayMs: s.config.PUBLISH_BACKOFF_MAX_MS,
  };
  const steps: TraceStep[] = [];
  let now = start;
  s.events.forEach((input, i) => {
    now = resolveAt(input.at, start, now);
    const base = {
      index: i + 1,
      at: now.toISOString(),
      note: input.note ?? null,
      input: describeInput(input),
    };
    let event: JobEvent;
    if ('publish' in input) {
      event =
        input.publish === 'accepted'
          ? { type: 'PUBLISHED', now, replyTimeoutMs: s.config.REPLY_TIMEOUT_MS }
          : { type: 'PUBLISH_FAILED', now, error: input.error ?? 'publish failed', policy };
    } else if ('tick' in input) {
      event = { type: 'DEADLINE_PASSED', now };
    } else if ('max_deliveries' in input) {
      event = { type: 'DELIVERY_EXHAUSTED', now, deliveries: input.max_deliveries };
    } else {
      const body = { job_id: state.context.jobId, ...input.envelope };
      const decoded = decodeEnvelope({
        data: Buffer.from(JSON.stringify(body)),
        msgId: input.msg_id ?? undefined,
        maxBytes: 1024 * 1024,
      });
      if (!decoded.ok) {
        steps.push({
          ...base,
          event: null,
          quarantine: { reason: decoded.reason, details: plain(decoded.details) },
          guard: null,
          from: state.status,
          to: state.status,
          decision: 'quarantined',
          reason: decoded.reason,
          level: 'warn',
          effects: [],
          changes: {},
        });
        return;
      }
      event = { ...envelopeToJobEvent(decoded.envelope, decoded.msgId).event, now } as JobEvent;
    }
    const chosen = chooseTransition(recognitionJobMachine, graph, state.status, state.context, event);
    const d = decide(state, event);
    const next = { status: d.to, context: d.context };
    // A rejected envelope is one the inbox quarantines, as it does an invalid one.
    const mismatch =
      d.decision === 'rejected' && (event.type === 'ENVELOPE_PROCESSING' || event.type === 'ENVELOPE_RESULT')
        ? serviceMismatch(state.context.targetService, event.service.name)
        : null;
    steps.push({
      ...base,
      event: plain(event) as Record<string, unknown>,
      quarantine: mismatch,
      guard: chosen.transition
        ? {
            name: chosen.transition.guard,
            description: chosen.transition.description,
            via: chosen.transition.source === null ? 'root' : 'state',
            failed: chosen.failedGuards,
          }
        : null,
      from: d.from,
      to: d.to,
      decision: d.decision === 'rejected' ? 'quarantined' : d.decision,
      reason: d.reason,
      level: DECISION_LOG_LEVEL[d.decision],
      effects: plain(d.effects) as JobEffect[],
      changes: plain(changedColumns(state, next)) as Record<string, unknown>,
    });
    state = next;
  });
  const final = {
    status: state.status,
    row: plain({ ...row, ...changedColumns(rowToJobState(row, s.file_is_current), state) }) as Record<
      string,
      unknown
    >,
  };
  return {
    scenario: s.name,
    description: s.description ?? null,
    start: { at: start.toISOString(), status: row.status, fileIsCurrent: s.file_is_current },
    steps,
    final,
    unmet: checkExpectations(s, steps, state.status),
  };
}

function checkExpectations(s: Scenario, steps: TraceStep[], finalStatus: JobStatus): string[] {
  const unmet: string[] = [];
  const e = s.expect;
  if (!e) return unmet;
  const statuses = steps.map((x) => x.to);
  const decisions = steps.map((x) => x.decision);
  if (e.statuses && JSON.stringify(e.statuses) !== JSON.stringify(statuses)) {
    unmet.push(`statuses: expected ${e.statuses.join(' → ')}, got ${statuses.join(' → ')}`);
  }
  if (e.decisions && JSON.stringify(e.decisions) !== JSON.stringify(decisions)) {
    unmet.push(`decisions: expected ${e.decisions.join(', ')}, got ${decisions.join(', ')}`);
  }
  if (e.final_status && e.final_status !== finalStatus)
    unmet.push(`final status: expected ${e.final_status}, got ${finalStatus}`);
  return unmet;
}

// ---------------------------------------------------------------------------------------------
// Printing
// ---------------------------------------------------------------------------------------------

function effectText(e: JobEffect): string {
  switch (e.type) {
    case 'setFileStatus':
      return `file → ${e.params.status}${e.params.errorCode ? ` (error_code ${e.params.errorCode})` : ''}`;
    case 'registerResultObject':
      return `register result object s3://${e.params.bucket}/${e.params.key}`;
    case 'recordTransition':
      return `log transition ${e.params.event}${e.params.msgId ? ` (msg id ${e.params.msgId})` : ''}`;
    case 'createAttempt':
      return `create attempt ${e.params.attempt} (job ${e.params.jobId}, pending, to ${e.params.targetService}); file → QUEUED, pointing at it`;
    case 'noteNoChange':
      return `nothing changes: ${e.params.decision} (${e.params.reason})`;
  }
}

/** `+2m30s`: the time since the scenario's start. */
function offset(startIso: string, atIso: string): string {
  let ms = Date.parse(atIso) - Date.parse(startIso);
  const sign = ms < 0 ? '-' : '+';
  ms = Math.abs(ms);
  const parts: string[] = [];
  for (const [unit, size] of [
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1_000],
    ['ms', 1],
  ] as const) {
    const n = Math.floor(ms / size);
    if (n > 0) parts.push(`${n}${unit}`);
    ms -= n * size;
  }
  return sign + (parts.join('') || '0s');
}

function quarantineText(details: unknown): string {
  if (Array.isArray(details))
    return details.map((d) => String((d as { message?: unknown }).message ?? JSON.stringify(d))).join('; ');
  if (details && typeof details === 'object' && 'message' in details) return String(details.message);
  return JSON.stringify(details);
}

/** The trace for a reader: one block per event. */
export function formatTrace(t: Trace): string {
  const out: string[] = [];
  out.push(`scenario: ${t.scenario}${t.description ? ` — ${t.description}` : ''}`);
  out.push(
    `start: ${t.start.status} at ${t.start.at}${t.start.fileIsCurrent ? '' : " (the file's current job is another one)"}`,
  );
  for (const s of t.steps) {
    out.push('');
    out.push(`${s.index}. ${offset(t.start.at, s.at)} (${s.at})  ${s.input}${s.note ? `  — ${s.note}` : ''}`);
    if (s.quarantine)
      out.push(`   quarantined: ${s.quarantine.reason}: ${quarantineText(s.quarantine.details)}`);
    if (s.event) {
      out.push(`   event:     ${String(s.event['type'])}`);
      if (s.guard) {
        const tried = s.guard.failed.length ? `${s.guard.failed.map((g) => `${g} ✗`).join(', ')}, ` : '';
        const taken = s.guard.name ? `${s.guard.name} ✓` : s.guard.failed.length ? 'else ✓' : 'no guard';
        const via = s.guard.via === 'root' ? ' (machine-wide fallback)' : '';
        out.push(`   guard:     ${tried}${taken}${via} — ${s.guard.description}`);
      }
    }
    out.push(`   ${s.from} → ${s.to}${s.from === s.to ? ' (stays)' : ''}`);
    out.push(`   decision:  ${s.decision}${s.reason ? ` (${s.reason})` : ''}, logged at ${s.level}`);
    if (s.effects.length) out.push(`   effects:   ${s.effects.map(effectText).join('; ')}`);
    const changed = Object.entries(s.changes);
    if (changed.length)
      out.push(`   columns:   ${changed.map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(', ')}`);
  }
  out.push('');
  out.push(`end: ${t.final.status}`);
  if (t.unmet.length) out.push(...t.unmet.map((u) => `EXPECTATION NOT MET: ${u}`));
  return out.join('\n') + '\n';
}
