/**
 * The timing of the daemon's periodic loops (the watchdog, retention): a run, then a pause of
 * `intervalMs` after it ends, then the next; a run asked for directly in between runs too. A stop
 * halts the runs in flight at their next batch (`control.halted`) and waits for them, so nothing is
 * cut in the middle of a transaction. A failed run is logged and the loop goes on: only the next
 * tick can tell whether the failure was passing.
 */

/** What a run checks between its batches: true once the loop is stopping. */
export interface RunControl {
  halted: boolean;
}

/** What {@link createPeriodicLoop} needs. */
export interface PeriodicLoopOptions<T> {
  /** One run; it checks `control.halted` between batches and returns early when set. */
  run(control: RunControl): Promise<T>;
  /** The pause between the end of one run and the start of the next. */
  intervalMs: number;
  /** Delay of the first run after `start()`. */
  firstRunAfterMs: number;
  /** Called with the error of a failed scheduled run (a direct run's caller gets it instead). */
  onError(err: unknown): void;
}

/** A started or stopped periodic loop. */
export interface PeriodicLoop<T> {
  /** Schedule the first run `firstRunAfterMs` from now, then one `intervalMs` after each ends. Idempotent. */
  start(): void;
  /** Stop scheduling; the runs in flight are halted at their next batch, and this resolves when they end. */
  stop(): Promise<void>;
  /** One run now, beside the schedule; halted by `stop()` like a scheduled one. */
  runNow(): Promise<T>;
}

/** Create a periodic loop; nothing runs until `start()` or `runNow()`. */
export function createPeriodicLoop<T>(opts: PeriodicLoopOptions<T>): PeriodicLoop<T> {
  const inFlight = new Map<Promise<T>, RunControl>();
  let running = false;
  let timer: NodeJS.Timeout | undefined;
  // A tick scheduled before a stop never reschedules after a later start.
  let generation = 0;

  function runNow(): Promise<T> {
    const control: RunControl = { halted: false };
    const p = opts.run(control);
    inFlight.set(p, control);
    void p.then(
      () => inFlight.delete(p),
      () => inFlight.delete(p),
    );
    return p;
  }

  async function tick(gen: number): Promise<void> {
    timer = undefined;
    try {
      await runNow();
    } catch (err) {
      opts.onError(err);
    }
    if (running && gen === generation) timer = setTimeout(() => void tick(gen), opts.intervalMs);
  }

  return {
    start() {
      if (running) return;
      running = true;
      const gen = ++generation;
      timer = setTimeout(() => void tick(gen), opts.firstRunAfterMs);
    },
    async stop() {
      running = false;
      generation += 1;
      if (timer) clearTimeout(timer);
      timer = undefined;
      for (const control of inFlight.values()) control.halted = true;
      await Promise.allSettled([...inFlight.keys()]);
    },
    runNow,
  };
}
