/**
 * Tracing for the workshop's commands, set up by the launcher before the SDK starts: `demo --trace`
 * without `OTEL_*` variables gets a local OTLP receiver to export to; `service <name>` traces as
 * `service.name` `<name>`. The receiver is imported only when `demo --trace` asks for it.
 */
import { closeAfterTracing } from '../../src/tracing/bootstrap.js';
import { tracingRequest } from '../../src/tracing/env.js';
import type { OtlpReceiver } from './otlpReceiver.js';

let demoReceiver: OtlpReceiver | undefined;

/** `service.name` of a command: the reference service's own name, else the product's default. */
export function serviceNameOf(argv: readonly string[]): string | undefined {
  return argv[0] === 'service' && argv[1] ? argv[1] : undefined;
}

/** Whether the command line is `demo … --trace`. */
export function isDemoTrace(argv: readonly string[]): boolean {
  return argv[0] === 'demo' && argv.includes('--trace');
}

/**
 * For `demo --trace` when the `OTEL_*` variables neither ask for tracing nor disable it: start a
 * local OTLP receiver and point the exporter at it (setting `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
 * in `env`); it closes after the last spans are exported. Resolves with the options of
 * `startTracingFromEnv`.
 */
export async function prepareTracing(opts: {
  argv: readonly string[];
  env?: NodeJS.ProcessEnv;
}): Promise<{ env: NodeJS.ProcessEnv; serviceName: string | undefined }> {
  const env = opts.env ?? process.env;
  if (
    isDemoTrace(opts.argv) &&
    !tracingRequest(env).on &&
    env.OTEL_SDK_DISABLED?.trim().toLowerCase() !== 'true'
  ) {
    const { startOtlpReceiver } = await import('./otlpReceiver.js');
    const receiver = await startOtlpReceiver();
    demoReceiver = receiver;
    closeAfterTracing(async () => {
      demoReceiver = undefined;
      await receiver.close();
    });
    env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = receiver.tracesUrl;
    // The demo reads its receiver within seconds of the last job; export every half second.
    env.OTEL_BSP_SCHEDULE_DELAY ??= '500';
  }
  return { env, serviceName: serviceNameOf(opts.argv) };
}

/** The receiver `demo --trace` exports to, when {@link prepareTracing} started one. */
export function demoTraceReceiver(): OtlpReceiver | undefined {
  return demoReceiver;
}
