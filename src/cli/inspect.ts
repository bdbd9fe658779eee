/**
 * Replaying a run into the Stately inspector (`simulate --inspect`, `jobs history --inspect`).
 * Imported by those actions only when `--inspect` is given: it loads the inspector (the Stately
 * packages, ws).
 */
import { withStopSignals } from '../process/stopSignals.js';
import { inspectorInstructions, startInspection, type InspectionRun } from '../statecharts/inspector.js';
import type { InspectOptions } from './plumbing.js';

/**
 * Start the inspection server, send `run`, print how to open it, then wait for Ctrl-C (or return
 * at once with `--inspect-exit`). Writes to stderr when stdout carries JSON.
 */
export async function sendToInspector(
  run: InspectionRun,
  o: InspectOptions,
  out: (line: string) => void,
): Promise<void> {
  const session = await startInspection({ port: o.inspectPort });
  await withStopSignals({}, async (stop) => {
    try {
      out(inspectorInstructions(session));
      const count = await session.send(run);
      out(
        `  Sent ${count} inspection events (actor ${run.sessionId}).${o.inspectExit ? '' : ' Press Ctrl-C to stop.'}`,
      );
      if (!o.inspectExit) await stop.received;
    } finally {
      await session.close();
      // A browser still connected to the server keeps the process alive: do not wait for it.
      setTimeout(() => process.exit(), 1_000).unref();
    }
  });
}
