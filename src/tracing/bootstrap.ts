/**
 * Starting and stopping tracing for one run of the `recognition-core` command. The launcher
 * (`bin/recognition-core.js`) calls {@link startTracingFromEnv} before it imports the CLI, so that
 * the pg instrumentation is in place before `pg` loads; the CLI calls {@link stopTracing} when its
 * command is done, which exports the spans still buffered.
 *
 * This module imports only the rule (`./env.js`); the SDK is imported when asked for.
 */
import { tracingRequest } from './env.js';
import type { TracingSdk } from './sdk.js';

let sdk: TracingSdk | undefined;
const closeAfterStop: Array<() => Promise<void>> = [];

/**
 * Start the SDK when the `OTEL_*` variables ask for it (`./env.ts`), with `serviceName` as
 * `service.name` (`recognition-core` by default). Warnings go to stderr. Resolves with whether
 * tracing is on.
 */
export async function startTracingFromEnv(opts: {
  env?: NodeJS.ProcessEnv;
  serviceName?: string;
}): Promise<boolean> {
  const request = tracingRequest(opts.env ?? process.env);
  for (const w of request.warnings) process.stderr.write(`recognition-core: tracing: ${w}\n`);
  if (!request.on) return false;
  const { startTracingSdk } = await import('./sdk.js');
  sdk = startTracingSdk({ serviceName: opts.serviceName ?? 'recognition-core' });
  return true;
}

/** Whether {@link startTracingFromEnv} started the SDK (and it is not stopped yet). */
export function tracingStarted(): boolean {
  return sdk !== undefined;
}

/**
 * Run `close` once {@link stopTracing} has exported the last spans: a receiver on this machine
 * that the spans go to (the development checkout's, for `demo --trace`) outlives the export.
 */
export function closeAfterTracing(close: () => Promise<void>): void {
  closeAfterStop.push(close);
}

/** Export every span ended so far (no-op without tracing). */
export async function flushTracing(): Promise<void> {
  await sdk?.forceFlush();
}

/**
 * Export what is left and stop the SDK, then close what {@link closeAfterTracing} was given
 * (no-op without tracing).
 */
export async function stopTracing(): Promise<void> {
  const s = sdk;
  sdk = undefined;
  await s?.shutdown();
  for (const close of closeAfterStop.splice(0)) await close();
}
