/**
 * The inbox without its tracing code paths, for the bench's tracing section: the built
 * `dist/src/daemon/inbox.js` with every tracing statement taken out, written beside it as
 * `inbox.untraced.js`, and `daemon.untraced.js`, the daemon that starts that inbox. Everything else
 * (the step, the decoding, the pool, logging) is the very same module as the shipped daemon's.
 *
 * Each cut must match exactly as often as listed, and the result must name nothing of tracing: a
 * change of the inbox's tracing lines makes the bench fail here instead of comparing the inbox with
 * itself.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { startDaemon } from '../src/daemon/daemon.js';

/** [what, replacement, how many times]. */
const INBOX_CUTS: Array<[string, string, number]> = [
  ["// One span per envelope, child of the envelope's trace context (none without tracing).\n", '', 1],
  ["import { startInboxTrace } from '../tracing/jobSpans.js';\n", '', 1],
  ["import { runTraced } from '../tracing/tracing.js';\n", '', 1],
  ['function report(entries, outs, traced) {', 'function report(entries, outs) {', 1],
  ['...traced?.logFields(i),\n', '', 2],
  ['const traced = startInboxTrace(batch);\n', '', 1],
  [
    'await runTraced(traced, () => applyInboxBatchTx(target, batch));',
    'await applyInboxBatchTx(target, batch);',
    1,
  ],
  ['traced?.end(outcomes);\n', '', 1],
  ['report(batch, outcomes, traced);', 'report(batch, outcomes);', 1],
];

function cut(text: string, [what, by, times]: [string, string, number], file: string): string {
  const found = text.split(what).length - 1;
  if (found !== times)
    throw new Error(`bench/untraced: ${JSON.stringify(what)} found ${found}× in ${file}, expected ${times}×`);
  return text.split(what).join(by);
}

/** Write the untraced inbox and daemon beside the built ones; resolve with that daemon's start. */
export async function loadUntracedDaemon(): Promise<typeof startDaemon> {
  const dir = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'daemon');
  let inbox = readFileSync(join(dir, 'inbox.js'), 'utf8');
  for (const c of INBOX_CUTS) inbox = cut(inbox, c, 'inbox.js');
  // Whole words only: `tracing`, `Trace…`, `traced` and the helpers must all be gone.
  const left = /\b(trac(e|ed|ing)\w*|Trace\w*|runTraced|startInboxTrace)\b/.exec(inbox);
  if (left) throw new Error(`bench/untraced: inbox.js still names ${left[0]} after the cuts`);
  writeFileSync(join(dir, 'inbox.untraced.js'), inbox);
  const daemon = cut(
    readFileSync(join(dir, 'daemon.js'), 'utf8'),
    ["from './inbox.js';", "from './inbox.untraced.js';", 1],
    'daemon.js',
  );
  writeFileSync(join(dir, 'daemon.untraced.js'), daemon);
  const mod = (await import(pathToFileURL(join(dir, 'daemon.untraced.js')).href)) as {
    startDaemon: typeof startDaemon;
  };
  return mod.startDaemon;
}
