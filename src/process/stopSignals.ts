/**
 * How every long-running command stops: the first SIGTERM or SIGINT (Ctrl-C) asks for a graceful
 * stop; a second one, or a graceful stop that outlasts its bound, exits at once with
 * {@link FORCED_EXIT_CODE}. Exiting at once is safe for the daemon: every change is one
 * transaction and an envelope is acked only after its commit.
 */

/** The signals that ask a command to stop. */
export const STOP_SIGNALS: readonly NodeJS.Signals[] = ['SIGTERM', 'SIGINT'];
/** Exit code of a forced exit (second signal, or the graceful stop took too long). */
export const FORCED_EXIT_CODE = 1;

export interface StopSignalsOptions {
  /** Called at the first signal, before {@link StopSignals.received} resolves (e.g. to log it). */
  onSignal?: (signal: NodeJS.Signals) => void;
  /** Called just before a forced exit: a second signal (`signal` set), or the bound passed. */
  onForcedExit?: (reason: { signal: NodeJS.Signals } | { timeoutMs: number }) => void;
  /**
   * Exit with {@link FORCED_EXIT_CODE} when the graceful stop has not finished (by
   * {@link StopSignals.dispose}) this long after the first signal. Unbounded when unset.
   */
  forceAfterMs?: number;
}

export interface StopSignals {
  /** Resolves with the first stop signal. */
  readonly received: Promise<NodeJS.Signals>;
  /** Aborted at the first stop signal. */
  readonly signal: AbortSignal;
  /**
   * The graceful stop is over (or no longer wanted): stop listening and cancel the bound. A
   * later signal has its default effect again (the process ends).
   */
  dispose(): void;
}

/** Start listening for stop signals; see the module's rule. */
export function listenForStopSignals(opts: StopSignalsOptions = {}): StopSignals {
  const abort = new AbortController();
  let resolveReceived!: (signal: NodeJS.Signals) => void;
  const received = new Promise<NodeJS.Signals>((resolve) => (resolveReceived = resolve));
  let bound: NodeJS.Timeout | undefined;
  const onStopSignal = (signal: NodeJS.Signals): void => {
    if (abort.signal.aborted) {
      opts.onForcedExit?.({ signal });
      process.exit(FORCED_EXIT_CODE);
    }
    opts.onSignal?.(signal);
    abort.abort(signal);
    if (opts.forceAfterMs !== undefined) {
      const timeoutMs = opts.forceAfterMs;
      bound = setTimeout(() => {
        opts.onForcedExit?.({ timeoutMs });
        process.exit(FORCED_EXIT_CODE);
      }, timeoutMs);
      // The bound never keeps a process alive that has nothing else left to do.
      bound.unref();
    }
    resolveReceived(signal);
  };
  for (const s of STOP_SIGNALS) process.on(s, onStopSignal);
  return {
    received,
    signal: abort.signal,
    dispose() {
      for (const s of STOP_SIGNALS) process.off(s, onStopSignal);
      clearTimeout(bound);
    },
  };
}

/**
 * Run `fn` while listening for stop signals, and stop listening when it settles: `fn` awaits
 * `stop.received` (or watches `stop.signal`) and then stops its work gracefully.
 */
export async function withStopSignals<T>(
  opts: StopSignalsOptions,
  fn: (stop: StopSignals) => Promise<T>,
): Promise<T> {
  const stop = listenForStopSignals(opts);
  try {
    return await fn(stop);
  } finally {
    stop.dispose();
  }
}
