/**
 * What the harness watches while a scenario runs: each daemon's `/readyz` (every half second)
 * and its resident memory (peak of the samples, from /proc), and the times the inboxes logged an
 * applied envelope (after its commit), from which the write gaps are read.
 */
import { readFileSync } from 'node:fs';
import type { Supervised } from './processes.js';

/** One `/readyz` answer (or none). */
export interface ReadySample {
  /** `Date.now()` of the answer. */
  at: number;
  daemon: string;
  ready: boolean;
}

/** Samples `/readyz` and RSS of the daemons until stopped. */
export class Watch {
  readonly samples: ReadySample[] = [];
  /** Peak resident set size seen per daemon (bytes), across its restarts. */
  readonly peakRss = new Map<string, number>();
  /** `time` of every applied-envelope log line, in ms since the epoch (unsorted). */
  readonly appliedAt: number[] = [];
  private timer: NodeJS.Timeout | undefined;
  private busy = false;

  constructor(private readonly daemons: readonly Supervised[]) {}

  /** Feed every daemon log line here (the inbox's applied decisions are noted). */
  onLog(line: Record<string, unknown>): void {
    if (line['loop'] !== 'inbox' || line['decision'] !== 'applied') return;
    const t = typeof line['time'] === 'string' ? Date.parse(line['time']) : NaN;
    this.appliedAt.push(Number.isNaN(t) ? Date.now() : t);
  }

  start(intervalMs = 500): void {
    this.timer = setInterval(() => void this.sample(), intervalMs);
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  private async sample(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      await Promise.all(
        this.daemons.map(async (d) => {
          const pid = d.pid;
          if (pid !== undefined && d.isRunning()) {
            try {
              const status = readFileSync(`/proc/${pid}/status`, 'utf8');
              const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
              this.peakRss.set(d.name, Math.max(this.peakRss.get(d.name) ?? 0, kb * 1024));
            } catch {
              // gone meanwhile
            }
          }
          if (!d.isStarted() || d.httpPort === undefined) return;
          let ready = false;
          try {
            const res = await fetch(`http://127.0.0.1:${d.httpPort}/readyz`, {
              signal: AbortSignal.timeout(3_000),
            });
            ready = res.status === 200;
            await res.arrayBuffer();
          } catch {
            ready = false;
          }
          this.samples.push({ at: Date.now(), daemon: d.name, ready });
        }),
      );
    } finally {
      this.busy = false;
    }
  }

  /** The first time at or after `from` that `daemon` answered not ready, if it did before `until`. */
  firstRed(daemon: string, from: number, until = Infinity): number | undefined {
    return this.samples.find((s) => s.daemon === daemon && s.at >= from && s.at <= until && !s.ready)?.at;
  }

  /**
   * The first time at or after `from` from which every daemon answered ready (each one's first
   * green answer after its last red one after `from`); undefined while one is still red.
   */
  allGreenFrom(from: number): number | undefined {
    let latest = from;
    for (const d of this.daemons) {
      const own = this.samples.filter((s) => s.daemon === d.name && s.at >= from);
      const lastRed = own.reduce((t, s) => (s.ready ? t : Math.max(t, s.at)), -Infinity);
      const green = own.find((s) => s.ready && s.at > lastRed);
      if (!green) return undefined;
      latest = Math.max(latest, green.at);
    }
    return latest;
  }

  /** The first applied envelope logged after `t`. */
  firstAppliedAfter(t: number): number | undefined {
    let best: number | undefined;
    for (const a of this.appliedAt) if (a > t && (best === undefined || a < best)) best = a;
    return best;
  }

  /** The last applied envelope logged at or before `t`. */
  lastAppliedBefore(t: number): number | undefined {
    let best: number | undefined;
    for (const a of this.appliedAt) if (a <= t && (best === undefined || a > best)) best = a;
    return best;
  }

  /**
   * The longest time between two applied envelopes logged within [from, to] (ms), with where it
   * began; the last one logged before `from` counts too, so a gap that began before the window
   * (nothing applied just before a fault) is seen whole.
   */
  longestGap(from: number, to: number): { ms: number; at: number } {
    const before = this.lastAppliedBefore(from);
    const times = [
      ...(before === undefined ? [] : [before]),
      ...this.appliedAt.filter((a) => a >= from && a <= to),
    ].sort((a, b) => a - b);
    let gap = { ms: 0, at: from };
    for (let i = 1; i < times.length; i++)
      if (times[i]! - times[i - 1]! > gap.ms) gap = { ms: times[i]! - times[i - 1]!, at: times[i - 1]! };
    return gap;
  }

  /** The highest peak RSS of any daemon (bytes). */
  maxRss(): number {
    return Math.max(0, ...this.peakRss.values());
  }
}
