/**
 * Starting and stopping tracing for one run of the `recognition-core` command. The launcher
 * (`bin/recognition-core.js`) calls {@link startTracingFromEnv} before it imports the CLI, so that
 * the pg instrumentation is in place before `pg` loads; the CLI calls {@link stopTracing} when its
 * command is done, which exports the spans still buffered.
 *
 * This module imports only the rule (`./env.js`); the SDK, and for `demo --trace` the local
 * receiver, are imported when asked for.
 */
import { tracingRequest } from './env.js';
import type { OtlpReceiver } from '../../workshop/tracing/otlpReceiver.js';
import type { TracingSdk } from './sdk.js';

let sdk: TracingSdk | undefined;
let demoReceiver: OtlpReceiver | undefined;

/** `service.name` of a command: the reference service's own name, else `recognition-core`. */
export function serviceNameOf(argv: readonly string[]): string {
  return argv[0] === 'service' && argv[1] ? argv[1] : 'recognition-core';
}

/** Whether the command line is `demo … --trace`. */
export function isDemoTrace(argv: readonly string[]): boolean {
  return argv[0] === 'demo' && argv.includes('--trace');
}

/**
 * Start the SDK when the `OTEL_*` variables ask for it (`./env.ts`). For `demo --trace` without
 * them, first start a local OTLP receiver and point the exporter at it (setting
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` in this process), so the demo can print a job's trace.
 * Warnings go to stderr. Resolves with whether tracing is on.
 */
export async function startTracingFromEnv(opts: {
  argv: readonly string[];
  env?: NodeJS.ProcessEnv;
}): Promise<boolean> {
  const env = opts.env ?? process.env;
  let request = tracingRequest(env);
  if (!request.on && isDemoTrace(opts.argv) && env.OTEL_SDK_DISABLED?.trim().toLowerCase() !== 'true') {
    const { startOtlpReceiver } = await import('../../workshop/tracing/otlpReceiver.js');
    demoReceiver = await startOtlpReceiver();
    env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = demoReceiver.tracesUrl;
    // The demo reads its receiver within seconds of the last job; export every half second.
    env.OTEL_BSP_SCHEDULE_DELAY ??= '500';
    request = tracingRequest(env);
  }
  for (const w of request.warnings) process.stderr.write(`recognition-core: tracing: ${w}\n`);
  if (!request.on) return false;
  const { startTracingSdk } = await import('./sdk.js');
  sdk = startTracingSdk({ serviceName: serviceNameOf(opts.argv) });
  return true;
}

/** Whether {@link startTracingFromEnv} started the SDK (and it is not stopped yet). */
export function tracingStarted(): boolean {
  return sdk !== undefined;
}

/** The receiver `demo --trace` exports to, when it started one. */
export function demoTraceReceiver(): OtlpReceiver | undefined {
  return demoReceiver;
}

/** Export every span ended so far (no-op without tracing). */
export async function flushTracing(): Promise<void> {
  await sdk?.forceFlush();
}

/** Export what is left and stop the SDK and the demo's receiver (no-op without tracing). */
export async function stopTracing(): Promise<void> {
  const s = sdk;
  sdk = undefined;
  await s?.shutdown();
  const r = demoReceiver;
  demoReceiver = undefined;
  await r?.close();
}
