/**
 * The `commits` check of `/readyz`: whether this instance can commit a write transaction now. The
 * probe commits a transactional logical decoding message (`pg_logical_emit_message(true, …)`), which
 * writes WAL and so waits for the synchronous standbys like any batch; `SELECT 1` would answer while
 * commits hang. Red while a probe has waited longer than `timeoutMs` or the last one failed
 * (docs/development.md, "Why the loops are built as they are").
 */
import type { Logger } from '../logger.js';
import type { CheckAnswer } from '../http/server.js';

/** What the probe needs of a pool: one statement, on any of its connections. */
export interface ProbePool {
  query(text: string): Promise<unknown>;
}

export interface CommitProbeOptions {
  pool: ProbePool;
  /** How often a probe starts while commits work (ms). */
  intervalMs: number;
  /** A probe in flight longer than this turns the check red (ms). */
  timeoutMs: number;
  logger: Logger;
  /** Called with each completed probe's duration (seconds), failed or not. */
  observe?: (seconds: number, ok: boolean) => void;
}

/** A running probe. */
export interface CommitProbe {
  /** The readiness check: ok, or why not. Reads the probe's state; never waits. */
  check(): CheckAnswer;
  /** Stop probing; resolves once the probe in flight, if any, has returned. */
  stop(): Promise<void>;
}

/**
 * The write probe: a transaction of its own (autocommit) that writes one WAL record, so that its
 * commit waits for synchronous replication like any other.
 */
const PROBE_SQL = "SELECT pg_logical_emit_message(true, 'recognition-core', 'readiness')";

/** How soon a probe follows a failed one (ms): fast recovery of the check, no hammering. */
const RETRY_AFTER_FAILURE_MS = 1_000;

/** Start probing at once. */
export function startCommitProbe(opts: CommitProbeOptions): CommitProbe {
  const log = opts.logger.child({ loop: 'commit_probe' });
  /** When the probe in flight started (ms since the epoch), or undefined between probes. */
  let inFlightSince: number | undefined;
  let inFlight: Promise<void> | undefined;
  /** Why the last completed probe failed; undefined when it committed. */
  let lastFailure: string | undefined;
  let stalled = false;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;

  function schedule(ms: number): void {
    if (stopped) return;
    timer = setTimeout(() => {
      timer = undefined;
      inFlight = probe();
    }, ms);
    timer.unref();
  }

  async function probe(): Promise<void> {
    const started = Date.now();
    inFlightSince = started;
    // Say so in the log once the probe is past its bound, while it still waits.
    const stallTimer = setTimeout(() => {
      stalled = true;
      log.warn(
        { event: 'commits_stalled', waited_ms: Date.now() - started, bound_ms: opts.timeoutMs },
        'a write transaction has not committed within the bound: not ready',
      );
    }, opts.timeoutMs);
    stallTimer.unref();
    let ok: boolean;
    try {
      await opts.pool.query(PROBE_SQL);
      ok = true;
      if (lastFailure !== undefined || stalled)
        log.info(
          { event: 'commits_resumed', waited_ms: Date.now() - started },
          'write transactions commit again',
        );
      lastFailure = undefined;
    } catch (err) {
      ok = false;
      if (lastFailure === undefined)
        log.warn({ err, event: 'commit_probe_failed' }, 'the write probe failed: not ready');
      lastFailure = err instanceof Error ? err.message : String(err);
    } finally {
      clearTimeout(stallTimer);
      stalled = false;
      inFlightSince = undefined;
    }
    opts.observe?.((Date.now() - started) / 1000, ok);
    schedule(ok ? opts.intervalMs : Math.min(opts.intervalMs, RETRY_AFTER_FAILURE_MS));
  }

  inFlight = probe();

  return {
    check() {
      if (inFlightSince !== undefined) {
        const waited = Date.now() - inFlightSince;
        if (waited > opts.timeoutMs)
          return {
            ok: false,
            reason: `a write transaction has waited ${(waited / 1000).toFixed(1)} s to commit (bound ${opts.timeoutMs / 1000} s): commits hang, e.g. for a synchronous standby that is gone`,
          };
      }
      if (lastFailure !== undefined)
        return { ok: false, reason: `the last write transaction failed: ${lastFailure}` };
      return true;
    },
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await inFlight;
    },
  };
}
