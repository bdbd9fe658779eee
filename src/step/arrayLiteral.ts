/**
 * PostgreSQL array literals for the write's typed arrays, built here rather than by the driver:
 * the driver quotes every element with two regular expressions, while most of the write's
 * elements are of types whose text never needs quoting.
 */

/**
 * Types whose text form never holds a character an array literal must quote (braces, quotes,
 * backslashes, commas, white space) and is never empty: written bare. A `timestamptz` element is
 * an ISO 8601 string (`Date.toISOString()`).
 */
const BARE_TYPES = new Set(['uuid', 'xid', 'integer', 'bigint', 'timestamptz']);

/** A value of one of {@link BARE_TYPES}, or a string or number of any other type, or null. */
export type ArrayElement = string | number | null;

/** The quoted form of one element: `"…"`, with `"` and `\` escaped by a backslash. */
function quoted(text: string): string {
  if (text.includes('"') || text.includes('\\')) return `"${text.replace(/["\\]/g, '\\$&')}"`;
  return `"${text}"`;
}

/** The array literal of `values` as an array of `type` (`NULL` for null). */
export function arrayLiteral(type: string, values: readonly ArrayElement[]): string {
  const bare = BARE_TYPES.has(type);
  let out = '{';
  for (let i = 0; i < values.length; i++) {
    if (i > 0) out += ',';
    const v = values[i];
    if (v === null || v === undefined) out += 'NULL';
    else if (bare) out += v;
    else out += quoted(String(v));
  }
  return out + '}';
}
