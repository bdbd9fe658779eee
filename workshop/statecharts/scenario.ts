/**
 * Running a scenario (`scenarioFile.ts`) through the pure machine with no service at all: each
 * thing that happens becomes the machine event the shell would build, and the trace records the
 * transition taken, the decision, the effects and the columns changed.
 *
 * Pure: `runScenario` calls only the machine (`decide()`), the envelope decoder the inbox uses, and
 * the row ↔ context mapping the step uses.
 */
import {
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
import { readMachineGraph } from '../../src/statecharts/machineGraph.js';
import { resolveAt, type Scenario, type ScenarioEvent } from './scenarioFile.js';
import { DECISION_LOG_LEVEL, chooseTransition } from './stateEventTable.js';

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
