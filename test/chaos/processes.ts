/**
 * The processes the chaos harness runs and kills: daemons (`recognition-core start`) and the
 * reference service (`recognition-core service tabular-parser`), each the built CLI in its own
 * process, supervised like a service manager would: an exit the harness did not cause is recorded
 * and the process is started again.
 *
 * Every line a process prints goes to its log file; the JSON lines are also handed to `onLog`, so
 * the harness can count the decisions the daemons log.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';

/** An exit the harness did not ask for. */
export interface UnexpectedExit {
  name: string;
  /** Seconds since the harness started. */
  at: number;
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Whether the process had logged `started` (a running process, not a failed start). */
  wasStarted: boolean;
  /** Its last stderr lines. */
  stderr: string;
}

export interface SupervisedOptions {
  name: string;
  /** Node executable and arguments (the CLI script first). */
  args: string[];
  env: NodeJS.ProcessEnv;
  logFile: string;
  /** Seconds since the harness started (for the records). */
  clock: () => number;
  /** Each JSON line printed on stdout (already parsed) that passes `wants`. */
  onLog?: (line: Record<string, unknown>, proc: Supervised) => void;
  /** Cheap pre-filter on the raw line before parsing it (parsing every debug line costs CPU). */
  wants?: (raw: string) => boolean;
  /** Called for every exit the harness did not cause. */
  onUnexpectedExit: (exit: UnexpectedExit) => void;
  /** Delay before starting again after an unexpected exit. */
  restartDelayMs?: number;
  /** The JSON log line that says the process is up (default `event === 'started'`). */
  isStartedLine?: (line: Record<string, unknown>) => boolean;
  /** Raw lines (stdout and stderr) counted by pattern, across restarts: `counts[name]`. */
  countLines?: Record<string, RegExp>;
}

/** One supervised child process (restarted after every exit until {@link Supervised.stop}). */
export class Supervised {
  readonly name: string;
  private child: ChildProcess | undefined;
  private expectingExit = false;
  private supervising = true;
  private startedFlag = false;
  private readonly log: WriteStream;
  private stderrTail: string[] = [];
  private startedWaiters: Array<() => void> = [];
  /** How many times it was spawned. */
  spawns = 0;
  /** The HTTP port the current process logged in its start line (`http_port`), if any. */
  httpPort: number | undefined;
  /** Lines that matched each of `countLines`, across restarts. */
  readonly counts: Record<string, number> = {};

  constructor(private readonly opts: SupervisedOptions) {
    this.name = opts.name;
    this.log = createWriteStream(opts.logFile, { flags: 'a' });
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Running (spawned and not exited). */
  isRunning(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Running and has logged its start line. */
  isStarted(): boolean {
    return this.isRunning() && this.startedFlag;
  }

  /** Resolves once the current process has logged its start line. */
  waitStarted(timeoutMs: number): Promise<boolean> {
    if (this.isStarted()) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      this.startedWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  /** Spawn the process (no-op if running). */
  start(): void {
    if (this.isRunning()) return;
    this.supervising = true;
    this.expectingExit = false;
    this.startedFlag = false;
    this.httpPort = undefined;
    this.spawns++;
    const child = spawn(process.execPath, this.opts.args, {
      env: this.opts.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child = child;
    this.log.write(`--- ${this.name} spawned pid ${child.pid} at ${this.opts.clock().toFixed(1)} s\n`);
    let buffer = '';
    child.stdout!.setEncoding('utf8');
    child.stdout!.on('data', (chunk: string) => {
      this.log.write(chunk);
      buffer += chunk;
      let nl: number;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const raw = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        this.handleLine(raw);
      }
    });
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (chunk: string) => {
      this.log.write(chunk);
      this.count(chunk);
      this.stderrTail.push(...chunk.split('\n').filter(Boolean));
      this.stderrTail = this.stderrTail.slice(-5);
    });
    child.once('exit', (code, signal) => {
      this.log.write(
        `--- ${this.name} pid ${child.pid} exited (code ${code}, signal ${signal}) at ${this.opts.clock().toFixed(1)} s\n`,
      );
      if (this.child !== child) return;
      if (this.expectingExit) return;
      this.opts.onUnexpectedExit({
        name: this.name,
        at: this.opts.clock(),
        code,
        signal,
        wasStarted: this.startedFlag,
        stderr: this.stderrTail.join(' | '),
      });
      this.stderrTail = [];
      if (this.supervising) {
        setTimeout(() => {
          if (this.supervising && !this.isRunning()) this.start();
        }, this.opts.restartDelayMs ?? 1_000);
      }
    });
  }

  private count(text: string): void {
    for (const [name, re] of Object.entries(this.opts.countLines ?? {}))
      if (re.test(text)) this.counts[name] = (this.counts[name] ?? 0) + 1;
  }

  private handleLine(raw: string): void {
    this.count(raw);
    if (!raw.startsWith('{')) return;
    const startedLine = raw.includes('"event":"started"') || raw.includes('"event":"service_started"');
    if (!startedLine && this.opts.wants && !this.opts.wants(raw)) return;
    let line: Record<string, unknown>;
    try {
      line = JSON.parse(raw) as Record<string, unknown>;
    } catch {
      return;
    }
    const isStarted = this.opts.isStartedLine ?? ((l) => l['event'] === 'started');
    if (isStarted(line)) {
      this.startedFlag = true;
      if (typeof line['http_port'] === 'number') this.httpPort = line['http_port'];
      const waiters = this.startedWaiters;
      this.startedWaiters = [];
      waiters.forEach((w) => w());
    }
    this.opts.onLog?.(line, this);
  }

  /** SIGKILL (an expected exit); resolves once it is gone. Supervision stays on only for restarts the caller makes. */
  async kill(): Promise<void> {
    const child = this.child;
    if (!child || !this.isRunning()) return;
    this.expectingExit = true;
    const gone = new Promise<void>((r) => child.once('exit', () => r()));
    child.kill('SIGKILL');
    await gone;
  }

  /** SIGTERM and wait (SIGKILL after `timeoutMs`); no more restarts. Resolves with how it exited. */
  async stop(
    timeoutMs: number,
  ): Promise<{ code: number | null; signal: NodeJS.Signals | null; forced: boolean; ms: number }> {
    const t0 = Date.now();
    this.supervising = false;
    const child = this.child;
    if (!child || !this.isRunning())
      return { code: child?.exitCode ?? null, signal: child?.signalCode ?? null, forced: false, ms: 0 };
    this.expectingExit = true;
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
      child.once('exit', (code, signal) => r({ code, signal })),
    );
    child.kill('SIGTERM');
    let forced = false;
    const timer = setTimeout(() => {
      forced = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    const result = await exited;
    clearTimeout(timer);
    return { ...result, forced, ms: Date.now() - t0 };
  }

  /** Stop supervising and SIGKILL whatever runs (cleanup after a failure). */
  abandon(): void {
    this.supervising = false;
    this.expectingExit = true;
    if (this.isRunning()) this.child?.kill('SIGKILL');
  }

  /** Flush and close the log file. */
  closeLog(): Promise<void> {
    return new Promise((r) => this.log.end(() => r()));
  }
}
