/**
 * How commands print rows: one JSON object per line with `--json`, or when stdout is not a
 * terminal (a pipe, a file, a script); an aligned table on a terminal, or with `--table`.
 * Messages go to stderr, so stdout stays parseable. Imports nothing.
 */
import type { Command } from 'commander';

/** How rows are printed. */
export interface OutputOptions {
  json?: boolean;
  table?: boolean;
}

/** `--json` and `--table`: how a command prints its rows (see {@link wantsTable}). */
export function outputOptions(cmd: Command): Command {
  return cmd
    .option('--json', 'one JSON object per line, even in a terminal')
    .option('--table', 'an aligned table, even when stdout is not a terminal');
}

/** Whether rows are printed as a table: `--table`, or a terminal without `--json`. */
export function wantsTable(o: OutputOptions): boolean {
  if (o.json) return false;
  return o.table === true || process.stdout.isTTY === true;
}

/** What a table cell holds. */
export type Cell = string | number | Date | null | undefined;

function cellText(v: Cell): string {
  if (v === null || v === undefined) return '-';
  if (v instanceof Date) return v.toISOString().replace(/\.\d{3}Z$/, 'Z');
  return String(v);
}

/** Rows as aligned columns under a header, or one JSON object per line. */
export function printRows<R extends Record<string, unknown>>(
  rows: readonly R[],
  columns: ReadonlyArray<[header: string, value: (r: R) => Cell]>,
  o: OutputOptions,
): void {
  if (!wantsTable(o)) {
    for (const r of rows) process.stdout.write(JSON.stringify(r) + '\n');
    return;
  }
  const cells = [columns.map(([h]) => h), ...rows.map((r) => columns.map(([, f]) => cellText(f(r))))];
  const widths = columns.map((_, i) => Math.max(...cells.map((c) => c[i]!.length)));
  for (const line of cells)
    process.stdout.write(
      line
        .map((c, i) => c.padEnd(widths[i]!))
        .join('  ')
        .trimEnd() + '\n',
    );
}
