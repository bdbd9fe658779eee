/**
 * Steps 2–3 of every locked entry point: decide a batch against the rows it read and send its
 * writes, chunk by chunk, each chunk's write overlapping the next chunk's decisions.
 */
import type { StepItem } from '../../machines/index.js';
import type { ResultObjects, StepOutcome } from './effects.js';
import { planBatch } from './planLocked.js';
import type { StepSql } from './sql.js';
import type { StepRow } from './statements.js';
import { WRITE, type WrittenRow } from './write.js';

/**
 * Events decided per write statement. A batch larger than this (the watchdog's) is written in
 * chunks, each sent as soon as it is decided, so PostgreSQL writes one chunk while the next is
 * being decided: the database and this process work side by side instead of in turn. Small
 * enough to overlap well, large enough that per-statement costs stay negligible; the inbox's
 * batches fit in one.
 */
export const WRITE_CHUNK = 250;

/** Let pending I/O run (a chunk's write goes out, the previous one's reply comes in). */
const yieldToIo = () => new Promise<void>((resolve) => setImmediate(resolve));

/** What {@link decideAndWrite} works on. */
export interface BatchToWrite {
  sql: StepSql;
  items: readonly StepItem[];
  /** The batch's rows, as the lock read them, locked by this transaction. */
  rows: readonly StepRow[];
  /** What its results' objects are checked against (none: it takes no result object). */
  objects?: ResultObjects | undefined;
}

/**
 * Steps 2–3 for `items`, against the locked `rows`, inside the caller's transaction. Resolves with
 * one outcome per item and whether any write was sent; rejects with the first failed write.
 */
export async function decideAndWrite({
  sql,
  items,
  rows,
  objects,
}: BatchToWrite): Promise<{ outcomes: StepOutcome[]; wrote: boolean }> {
  const plan = planBatch(rows, objects);
  // 2–3. Decide a chunk in order and send its write; decide the next chunk while PostgreSQL
  //      writes this one. One statement at a time on the connection: a chunk's write is sent
  //      only once the previous one has succeeded, and planned only once it has returned the new
  //      addresses of the jobs both change.
  const outcomes: StepOutcome[] = [];
  let wrote = false;
  let writing: Promise<unknown> | undefined;
  for (let start = 0; start < items.length; start += WRITE_CHUNK) {
    const chunk = plan.decide(items.slice(start, start + WRITE_CHUNK));
    const laterChunks = start + WRITE_CHUNK < items.length;
    outcomes.push(...chunk.outcomes);
    if (writing && plan.waitsForMoved(chunk)) await writing;
    const write = plan.write(chunk, { laterChunks });
    if (writing) await writing;
    if (!write) continue;
    writing = sql.query<WrittenRow>(WRITE, write.params).then((written) => plan.moved(written));
    wrote = true;
    if (laterChunks) {
      // Let the statement go out before deciding the next chunk; its failure is awaited above.
      writing.catch(() => undefined);
      await yieldToIo();
    }
  }
  if (writing) await writing;
  return { outcomes, wrote };
}
