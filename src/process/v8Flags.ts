/**
 * The V8 settings of every recognition-core process, applied by the launcher before anything else
 * is loaded (and by the bench's processes): `--no-allocation-site-pretenuring`, so the inbox's
 * short-lived objects are born young (docs/performance.md, "What keeps the daemon fast").
 */
import v8 from 'node:v8';

/** The flags {@link applyV8Flags} sets, as V8 spells them on a command line. */
export const V8_FLAGS: readonly string[] = ['--no-allocation-site-pretenuring'];

/** Set {@link V8_FLAGS} in this process; call it before the work starts. */
export function applyV8Flags(): void {
  for (const flag of V8_FLAGS) v8.setFlagsFromString(flag);
}
