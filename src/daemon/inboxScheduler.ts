/**
 * The inbox's scheduler: which received envelopes leave together as one batch, and when. It knows
 * no NATS, no database and no clock; the inbox hands it what it receives, applies the batches it
 * starts, settles them and runs the linger timer it asks for. Its rules: at most `batchSize` per
 * batch, at most `concurrency` batches in flight, a job's envelopes in arrival order and never in two
 * batches at once, at most `maxHeld` envelopes held, every batch settled exactly once
 * (docs/development.md, "Tests").
 */

/** What the scheduler asks of its owner: apply a batch, and run one linger timer. */
export interface InboxSchedulerPorts<E> {
  /**
   * A batch leaves: apply it, then call {@link InboxScheduler.settle} with this very array exactly
   * once, when every envelope of it is acked or nak'd.
   */
  start(batch: E[]): void;
  /** Call {@link InboxScheduler.lingerPassed} after `ms`, unless cancelled first (not from within this call). */
  armLinger(ms: number): void;
  /** Cancel the armed linger timer. */
  cancelLinger(): void;
}

/** The limits of an {@link InboxScheduler}, and how it makes a received item an entry. */
export interface InboxSchedulerOptions<R, E> {
  /** Envelopes per batch, at most (≥ 1). */
  batchSize: number;
  /** Batches in flight, at most (≥ 1). */
  concurrency: number;
  /** How long a batch that is not full waits for more envelopes (ms, ≥ 0). */
  lingerMs: number;
  /**
   * Envelopes held (received and not yet settled) at which {@link InboxScheduler.full} turns true.
   * Default: `max(2 × batchSize × concurrency, 64)`; never less than `batchSize`.
   */
  maxHeld?: number | undefined;
  /** Make a received item an entry; called once per item, when a batch first looks at it. */
  entryOf(item: R): E;
}

/** An entry: anything with the key of the job it belongs to. */
export interface Keyed {
  readonly key: string;
}

/** {@link InboxScheduler.settle} was given an array that is not a batch in flight. */
export class UnknownBatchError extends Error {
  override name = 'UnknownBatchError';
  constructor() {
    super('settled a batch that is not in flight (never started, or settled already)');
  }
}

/**
 * The default bound on envelopes held: enough for every batch in flight and as many more
 * gathering; more would only make the messages live long enough to reach V8's old generation,
 * which costs more to collect.
 */
export function defaultMaxHeld(batchSize: number, concurrency: number): number {
  return Math.max(batchSize * concurrency * 2, 64);
}

/**
 * Admission, batching, linger, per-job holds, concurrency, back-pressure and settling of the
 * inbox, as a synchronous state machine over received items `R` and their entries `E`.
 * {@link admit}, {@link settle}, {@link lingerPassed} and {@link drain} may start batches (through
 * the ports, before they return); nothing else happens between two calls.
 */
export class InboxScheduler<R, E extends Keyed> {
  /** Envelopes held at which the reader must wait for a settlement. */
  readonly maxHeld: number;
  readonly #batchSize: number;
  readonly #concurrency: number;
  readonly #lingerMs: number;
  readonly #entryOf: (item: R) => E;
  readonly #ports: InboxSchedulerPorts<E>;
  /** Received and not yet taken by a batch, in arrival order: `#entries` entries, then items. */
  #waiting: Array<R | E> = [];
  /** How many of `#waiting`, from its start, are entries already. */
  #entries = 0;
  /** Jobs (keys) a batch in flight holds. */
  readonly #running = new Set<string>();
  readonly #inFlight = new Set<readonly E[]>();
  /** Received and not yet settled. */
  #held = 0;
  #armed = false;
  /** The linger has passed since the timer was armed: a batch may leave not full. */
  #lingered = false;
  #draining = false;
  /** A schedule is running: a settlement from within `start` only releases. */
  #scheduling = false;

  constructor(opts: InboxSchedulerOptions<R, E>, ports: InboxSchedulerPorts<E>) {
    const { batchSize, concurrency, lingerMs } = opts;
    if (!(Number.isInteger(batchSize) && batchSize >= 1)) throw new RangeError(`batchSize ${batchSize}`);
    if (!(Number.isInteger(concurrency) && concurrency >= 1))
      throw new RangeError(`concurrency ${concurrency}`);
    if (!(lingerMs >= 0)) throw new RangeError(`lingerMs ${lingerMs}`);
    this.#batchSize = batchSize;
    this.#concurrency = concurrency;
    this.#lingerMs = lingerMs;
    this.maxHeld = Math.max(opts.maxHeld ?? defaultMaxHeld(batchSize, concurrency), batchSize);
    this.#entryOf = opts.entryOf;
    this.#ports = ports;
  }

  /** Envelopes received and not yet settled. */
  get held(): number {
    return this.#held;
  }

  /** Envelopes received and not yet taken by a batch. */
  get waiting(): number {
    return this.#waiting.length;
  }

  /** Batches started and not yet settled. */
  get inFlight(): number {
    return this.#inFlight.size;
  }

  /** True while `maxHeld` envelopes are held: the reader takes no other until a settlement. */
  get full(): boolean {
    return this.#held >= this.maxHeld;
  }

  /** Take one received item in; a batch may leave at once. */
  admit(item: R): void {
    this.#waiting.push(item);
    this.#held++;
    if (this.#waiting.length >= this.#batchSize || this.#draining) this.#schedule();
    else if (!this.#lingered && !this.#armed) this.#arm();
  }

  /** The batch `batch` (as given to `start`) is done with: its jobs and envelopes are released. */
  settle(batch: readonly E[]): void {
    if (!this.#inFlight.delete(batch)) throw new UnknownBatchError();
    for (const e of batch) this.#running.delete(e.key);
    this.#held -= batch.length;
    if (!this.#scheduling) this.#schedule();
  }

  /** The armed linger timer fired. */
  lingerPassed(): void {
    this.#armed = false;
    this.#lingered = true;
    this.#schedule();
  }

  /**
   * From now on nothing waits for more: every envelope leaves as soon as a slot and its job
   * allow (the inbox stops, and applies what it received).
   */
  drain(): void {
    this.#draining = true;
    this.#schedule();
  }

  #arm(): void {
    this.#armed = true;
    this.#ports.armLinger(this.#lingerMs);
  }

  /**
   * Start batches while fewer than `concurrency` are in flight and one may leave: a full one, or
   * any once the linger has passed or the scheduler drains. Then keep the linger timer running
   * exactly while envelopes wait that a batch could take.
   */
  #schedule(): void {
    this.#scheduling = true;
    let blocked = false;
    try {
      while (
        this.#inFlight.size < this.#concurrency &&
        this.#waiting.length > 0 &&
        (this.#waiting.length >= this.#batchSize || this.#lingered || this.#draining)
      ) {
        const batch = this.#take();
        if (batch.length === 0) {
          blocked = true; // every waiting envelope's job is in flight
          break;
        }
        this.#inFlight.add(batch);
        this.#ports.start(batch);
      }
    } finally {
      this.#scheduling = false;
    }
    if (this.#waiting.length === 0 || blocked) {
      this.#lingered = false;
      if (this.#armed) {
        this.#armed = false;
        this.#ports.cancelLinger();
      }
    } else if (!this.#lingered && !this.#armed) {
      this.#arm();
    }
  }

  /**
   * The next batch: waiting envelopes in arrival order, up to `batchSize`, leaving behind every
   * envelope of a job a batch in flight holds — all of that job's, so they keep their order. (The
   * held jobs are fixed during a take: this batch's own jobs are held only once it is taken.)
   */
  #take(): E[] {
    const waiting = this.#waiting;
    const entries = this.#entries;
    const running = this.#running;
    const batch: E[] = [];
    let left: E[] | undefined;
    let i = 0;
    for (; i < waiting.length && batch.length < this.#batchSize; i++) {
      const e = i < entries ? (waiting[i] as E) : this.#entryOf(waiting[i] as R);
      if (running.has(e.key)) (left ??= []).push(e);
      else batch.push(e);
    }
    this.#waiting = left ? [...left, ...waiting.slice(i)] : waiting.slice(i);
    this.#entries = (left?.length ?? 0) + Math.max(0, entries - i);
    for (const e of batch) running.add(e.key);
    return batch;
  }
}
