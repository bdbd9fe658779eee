/**
 * Spans of time as operators write them — `90s`, `30m`, `12h`, `90d`, `2w` — shared by the
 * configuration (`RETENTION_*`) and the command line (`--finished-since 1d`, `--older-than 30d`),
 * so both accept the same forms. Imports nothing: the command line loads it for `--help`.
 */

/** Milliseconds per unit of a span: seconds, minutes, hours, days, weeks. */
export const SPAN_UNITS_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 } as const;

/** The forms of a span, for messages. */
export const SPAN_FORMS = '90s, 30m, 12h, 90d, 2w';

/**
 * A span (`<whole number><unit>`, unit one of `s m h d w`) in milliseconds; undefined when `text`
 * is not one. Surrounding blanks are ignored. Pure.
 */
export function parseSpanMs(text: string): number | undefined {
  const m = /^(\d+)(s|m|h|d|w)$/.exec(text.trim());
  if (!m) return undefined;
  const ms = Number(m[1]) * SPAN_UNITS_MS[m[2] as keyof typeof SPAN_UNITS_MS];
  return Number.isSafeInteger(ms) ? ms : undefined;
}

/**
 * `ms` in the largest unit that divides it (`2592000000` → `30d`); `0` as `0`. The inverse of
 * {@link parseSpanMs} for whole spans, for printing what a setting means. Pure.
 */
export function formatSpan(ms: number): string {
  if (ms === 0) return '0';
  const units = Object.entries(SPAN_UNITS_MS).reverse();
  for (const [unit, size] of units) if (ms % size === 0) return `${ms / size}${unit}`;
  return `${ms}ms`;
}

/**
 * A moment as operators write it: a span back from now (`90s`, `30m`, `1h`, `2d`, `1w`, taken
 * back from the database clock by whoever reads it) or an ISO 8601 date or time; undefined when
 * `text` is neither. Pure.
 */
export function parseMoment(text: string): { agoMs: number } | { at: Date } | undefined {
  const trimmed = text.trim();
  const agoMs = parseSpanMs(trimmed);
  if (agoMs !== undefined) return { agoMs };
  if (/^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}(:?\d{2})?)?)?$/.test(trimmed)) {
    const at = new Date(trimmed);
    if (!Number.isNaN(at.getTime())) return { at };
  }
  return undefined;
}
