/**
 * The V8 settings of every recognition-core process, applied by the launcher before anything else
 * is loaded (and by the bench's processes, which run the daemon's loops the same way).
 *
 * `--no-allocation-site-pretenuring`. V8 counts, for each object and array literal, how many of
 * its objects survive a young-generation collection, and once nearly all of them do, allocates
 * that literal's objects in the old generation from then on. The inbox's objects live for the
 * milliseconds of a batch, but a burst (a backlog, the start) makes them look long-lived. Born
 * old, they die within milliseconds, and every young object they point at (messages, decoded
 * envelopes, statement parameters, returned rows) is then kept by each young-generation
 * collection, and promoted, until the next full one: survival stays high, the decision stays, and
 * the young-generation pauses grow with the bytes kept, and the tail latency with them. Without
 * pretenuring, those objects are born young whatever came before, and die young.
 */
import v8 from 'node:v8';

/** The flags {@link applyV8Flags} sets, as V8 spells them on a command line. */
export const V8_FLAGS: readonly string[] = ['--no-allocation-site-pretenuring'];

/** Set {@link V8_FLAGS} in this process; call it before the work starts. */
export function applyV8Flags(): void {
  for (const flag of V8_FLAGS) v8.setFlagsFromString(flag);
}
