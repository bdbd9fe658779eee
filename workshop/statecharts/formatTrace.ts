/**
 * A scenario's trace for a reader: one block per event, with its time since the start, the guard
 * taken (and those tried first), the status change, the decision and its log level, the effects
 * and the columns changed. Pure: text from the trace alone.
 */
import type { JobEffect } from '../../machines/index.js';
import type { Trace } from './scenario.js';

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
