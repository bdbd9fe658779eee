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

/**
 * Types whose elements are JSON texts made by `JSON.stringify` (`element` in `write.ts`). Such a
 * text holds no control character and no unpaired surrogate (`JSON.stringify` writes them as
 * escapes), so quoting it as a JSON string escapes exactly what an array literal must, `"` and
 * `\`, in one native call instead of a regular expression.
 */
const JSON_TYPES = new Set(['jsonb']);

/** A value of one of {@link BARE_TYPES}, or a string or number of any other type, or null. */
export type ArrayElement = string | number | null;

/** The quoted form of one element: `"…"`, with `"` and `\` escaped by a backslash. */
function quoted(text: string): string {
  if (text.includes('"') || text.includes('\\')) return `"${text.replace(/["\\]/g, '\\$&')}"`;
  return `"${text}"`;
}

/** The quoted form of a JSON text of one of {@link JSON_TYPES}. */
const quotedJson = (text: string): string => JSON.stringify(text);

/**
 * The quoted forms of texts that repeat from element to element and batch to batch, kept so that
 * each is quoted once; emptied when full, so texts that stop coming do not stay.
 */
const QUOTED = new Map<string, string>();
const QUOTED_MAX = 1024;

function quotedOnce(text: string): string {
  let q = QUOTED.get(text);
  if (q === undefined) {
    q = quoted(text);
    if (QUOTED.size >= QUOTED_MAX) QUOTED.clear();
    QUOTED.set(text, q);
  }
  return q;
}

/**
 * The array literal of `values` as an array of `type` (`NULL` for null). `repeating`: the column's
 * texts come from a small set (statuses, names, a result's transition detail), so their quoted
 * forms are looked up rather than built; a column of distinct texts (ids, keys) would only churn
 * the lookup.
 */
export function arrayLiteral(type: string, values: readonly ArrayElement[], repeating = false): string {
  const bare = BARE_TYPES.has(type);
  const quote = repeating ? quotedOnce : JSON_TYPES.has(type) ? quotedJson : quoted;
  const n = values.length;
  if (n === 0) return '{}';
  // One flat string, made by `join` with the braces inside its first and last elements: `+=`, or
  // braces added around the joined text, make a string of linked pieces, which the driver
  // flattens into a second copy before it sends the statement.
  const elements = new Array<string>(n);
  for (let i = 0; i < n; i++) {
    const v = values[i];
    elements[i] = v === null || v === undefined ? 'NULL' : bare ? String(v) : quote(String(v));
  }
  elements[0] = `{${elements[0]!}`;
  elements[n - 1] = `${elements[n - 1]!}}`;
  return elements.join(',');
}
