/**
 * The inbox's scheduler (src/daemon/inboxScheduler.ts), without NATS, a database or a real timer.
 *
 * A simulation drives it as the inbox does: a reader that admits what arrives while the scheduler
 * is not full (and waits otherwise, until a settlement), batches that settle in any order at any
 * time, a virtual clock whose linger timer fires exactly at its deadline, and the inbox's
 * failures: a batch nak'd whole (its envelopes come back later as new deliveries) or applied one
 * message at a time, each acked or nak'd. A model beside it keeps what must hold: the waiting
 * envelopes in arrival order, the jobs in flight, since when each waiting envelope could leave.
 *
 * Properties (fast-check, fixed seed, 1 000 random histories each): per-job order at any
 * concurrency and any interleaving; no envelope taken twice, each batch exactly the oldest
 * envelopes whose job is free; the back-pressure bound; every delivery settled exactly once and
 * decoded once; the linger never exceeded; the timer armed only while something waits.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  InboxScheduler,
  UnknownBatchError,
  defaultMaxHeld,
  type InboxSchedulerPorts,
} from '../../src/daemon/inboxScheduler.js';

const SETTINGS = { seed: 20250815, numRuns: 1_000 } as const;

/** A delivery as the reader receives it; `seq` numbers the deliveries in arrival order. */
interface Delivery {
  job: string;
  seq: number;
}
/** A delivery decoded: keyed by its job. */
interface Entry {
  key: string;
  seq: number;
}

/** What becomes of a batch: acked whole, nak'd whole, or applied one at a time (bit i: nak i). */
type Fate = { kind: 'acked' } | { kind: 'nakked' } | { kind: 'isolated'; nakMask: number };

type Step =
  /** A message of job `job` reaches the reader. */
  | { kind: 'arrive'; job: number }
  /** The `pick`-th batch in flight (modulo) settles. */
  | { kind: 'settle'; pick: number; fate: Fate }
  /** The clock moves on by `dt` ms; the linger timer fires at its deadline on the way. */
  | { kind: 'tick'; dt: number }
  /** The oldest nak'd envelope is delivered again. */
  | { kind: 'redeliver' }
  /** The inbox stops: nothing waits for more. */
  | { kind: 'drain' };

interface Scenario {
  jobs: number;
  batchSize: number;
  concurrency: number;
  lingerMs: number;
  maxHeld: number | undefined;
  steps: Step[];
}

const fate: fc.Arbitrary<Fate> = fc.oneof(
  { weight: 6, arbitrary: fc.constant({ kind: 'acked' as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'nakked' as const }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('isolated' as const), nakMask: fc.nat(63) }) },
);

const scenario: fc.Arbitrary<Scenario> = fc
  .record({
    jobs: fc.integer({ min: 1, max: 6 }),
    batchSize: fc.integer({ min: 1, max: 5 }),
    concurrency: fc.integer({ min: 1, max: 4 }),
    lingerMs: fc.integer({ min: 0, max: 10 }),
    maxHeldExtra: fc.option(fc.integer({ min: 0, max: 8 }), { nil: undefined }),
  })
  .chain(({ jobs, batchSize, concurrency, lingerMs, maxHeldExtra }) =>
    fc
      .array(
        fc.oneof(
          {
            weight: 8,
            arbitrary: fc.record({ kind: fc.constant('arrive' as const), job: fc.nat(jobs - 1) }),
          },
          { weight: 5, arbitrary: fc.record({ kind: fc.constant('settle' as const), pick: fc.nat(), fate }) },
          { weight: 4, arbitrary: fc.record({ kind: fc.constant('tick' as const), dt: fc.nat(15) }) },
          { weight: 1, arbitrary: fc.constant({ kind: 'redeliver' as const }) },
          { weight: 1, arbitrary: fc.constant({ kind: 'drain' as const }) },
        ),
        { maxLength: 150, size: 'max' },
      )
      .map((steps) => ({
        jobs,
        batchSize,
        concurrency,
        lingerMs,
        // Small bounds (from batchSize up) make the reader wait often; undefined takes the default.
        maxHeld: maxHeldExtra === undefined ? undefined : batchSize + maxHeldExtra,
        steps,
      })),
  );

/** After a step: what the scheduler and the model say. */
interface Moment {
  now: number;
  held: number;
  full: boolean;
  inFlight: number;
  waiting: number;
  armed: boolean;
  draining: boolean;
  /** A batch could start now (fewer than `concurrency` in flight). */
  slotFree: boolean;
  /** Waiting envelopes whose job no batch in flight holds, and since when that is so. */
  free: Array<{ seq: number; since: number }>;
}

interface Started {
  seqs: number[];
  jobs: string[];
  /** The model's batch: the oldest waiting envelopes whose job is free, at most batchSize. */
  expected: number[];
  /** Jobs other batches in flight held when it started. */
  busy: Set<string>;
  inFlight: number;
}

interface Run {
  maxHeld: number;
  moments: Moment[];
  batches: Started[];
  /** Each job's deliveries in arrival order, and in the order batches took them. */
  admittedByJob: Map<string, number[]>;
  takenByJob: Map<string, number[]>;
  admitted: number;
  taken: Map<number, number>;
  decoded: Map<number, number>;
  settled: Map<number, number>;
  /** Misuse of the timer port: armed while armed, cancelled while not armed. */
  timerProblems: string[];
  /** The end: after the steps, everything settled by linger (or drain) and settlements alone. */
  end: { held: number; waiting: number; inFlight: number; armed: boolean; stuck: boolean };
  counts: { heldBack: number; full: number; lingerFired: number; nakked: number; isolated: number };
}

/** Play a scenario; the end settles every batch (acked) and lets time pass until nothing is held. */
function simulate(s: Scenario): Run {
  let now = 0;
  let deadline: number | undefined;
  let draining = false;
  let nextSeq = 0;
  const pending: string[] = []; // arrived, not yet admitted (the reader waits for room)
  const renak: string[] = []; // nak'd, to be delivered again
  const waitingModel: Delivery[] = [];
  const admittedAt = new Map<number, number>();
  const releasedAt = new Map<string, number>();
  const inFlight: Entry[][] = [];
  const busyJobs = () => new Set(inFlight.flatMap((b) => b.map((e) => e.key)));
  const run: Run = {
    maxHeld: 0,
    moments: [],
    batches: [],
    admittedByJob: new Map(),
    takenByJob: new Map(),
    admitted: 0,
    taken: new Map(),
    decoded: new Map(),
    settled: new Map(),
    timerProblems: [],
    end: { held: 0, waiting: 0, inFlight: 0, armed: false, stuck: false },
    counts: { heldBack: 0, full: 0, lingerFired: 0, nakked: 0, isolated: 0 },
  };
  const bump = (m: Map<number, number>, k: number) => m.set(k, (m.get(k) ?? 0) + 1);
  const push = (m: Map<string, number[]>, k: string, v: number) => {
    const list = m.get(k);
    if (list) list.push(v);
    else m.set(k, [v]);
  };

  const ports: InboxSchedulerPorts<Entry> = {
    start(batch) {
      const busy = busyJobs();
      const expected = waitingModel
        .filter((d) => !busy.has(d.job))
        .slice(0, s.batchSize)
        .map((d) => d.seq);
      run.batches.push({
        seqs: batch.map((e) => e.seq),
        jobs: batch.map((e) => e.key),
        expected,
        busy,
        inFlight: scheduler.inFlight,
      });
      for (const e of batch) {
        bump(run.taken, e.seq);
        push(run.takenByJob, e.key, e.seq);
        const at = waitingModel.findIndex((d) => d.seq === e.seq);
        if (at >= 0) waitingModel.splice(at, 1);
      }
      inFlight.push(batch);
    },
    armLinger(ms) {
      if (deadline !== undefined) run.timerProblems.push(`armed at ${now} while armed`);
      deadline = now + ms;
    },
    cancelLinger() {
      if (deadline === undefined) run.timerProblems.push(`cancelled at ${now} while not armed`);
      deadline = undefined;
    },
  };
  const scheduler = new InboxScheduler<Delivery, Entry>(
    {
      batchSize: s.batchSize,
      concurrency: s.concurrency,
      lingerMs: s.lingerMs,
      maxHeld: s.maxHeld,
      entryOf: (d) => {
        bump(run.decoded, d.seq);
        return { key: d.job, seq: d.seq };
      },
    },
    ports,
  );
  run.maxHeld = scheduler.maxHeld;

  /** The reader: admit what arrived while there is room (it is woken by every settlement). */
  const feed = () => {
    while (pending.length > 0 && !scheduler.full) {
      const d = { job: pending.shift()!, seq: nextSeq++ };
      const busy = busyJobs();
      if (busy.has(d.job) || waitingModel.some((w) => w.job === d.job)) run.counts.heldBack++;
      waitingModel.push(d);
      admittedAt.set(d.seq, now);
      push(run.admittedByJob, d.job, d.seq);
      run.admitted++;
      scheduler.admit(d);
    }
    if (scheduler.full) run.counts.full++;
  };
  const settle = (batch: Entry[], f: Fate) => {
    inFlight.splice(inFlight.indexOf(batch), 1);
    batch.forEach((e, i) => {
      bump(run.settled, e.seq);
      releasedAt.set(e.key, now);
      const nak = f.kind === 'nakked' || (f.kind === 'isolated' && ((f.nakMask >> i) & 1) === 1);
      if (nak) renak.push(e.key);
    });
    if (f.kind === 'nakked') run.counts.nakked++;
    if (f.kind === 'isolated') run.counts.isolated++;
    scheduler.settle(batch);
    feed();
  };
  const advance = (to: number) => {
    while (deadline !== undefined && deadline <= to) {
      now = deadline;
      deadline = undefined;
      run.counts.lingerFired++;
      scheduler.lingerPassed();
    }
    now = to;
  };
  const observe = () => {
    const busy = busyJobs();
    run.moments.push({
      now,
      held: scheduler.held,
      full: scheduler.full,
      inFlight: scheduler.inFlight,
      waiting: scheduler.waiting,
      armed: deadline !== undefined,
      draining,
      slotFree: inFlight.length < s.concurrency,
      free: waitingModel
        .filter((d) => !busy.has(d.job))
        .map((d) => ({ seq: d.seq, since: Math.max(admittedAt.get(d.seq)!, releasedAt.get(d.job) ?? 0) })),
    });
  };

  for (const step of s.steps) {
    switch (step.kind) {
      case 'arrive':
        pending.push(`job-${step.job}`);
        feed();
        break;
      case 'settle':
        if (inFlight.length > 0) settle(inFlight[step.pick % inFlight.length]!, step.fate);
        break;
      case 'tick':
        advance(now + step.dt);
        break;
      case 'redeliver':
        if (renak.length > 0) pending.push(renak.shift()!);
        feed();
        break;
      case 'drain':
        draining = true;
        scheduler.drain();
        break;
    }
    observe();
  }

  // The end: what is in flight is acked, nak'd envelopes come back, and time passes, until
  // nothing is held. Linger (or the drain) alone must get every envelope out.
  for (let rounds = 0; ; rounds++) {
    if (inFlight.length > 0) settle(inFlight[0]!, { kind: 'acked' });
    else if (renak.length > 0) {
      pending.push(renak.shift()!);
      feed();
    } else if (deadline !== undefined) advance(deadline);
    else break;
    observe();
    if (rounds > 10_000) break;
  }
  run.end = {
    held: scheduler.held,
    waiting: scheduler.waiting,
    inFlight: scheduler.inFlight,
    armed: deadline !== undefined,
    stuck: pending.length > 0 || waitingModel.length > 0,
  };
  return run;
}

describe('the inbox scheduler under random histories', { timeout: 60_000 }, () => {
  it('keeps per-job order: a job’s deliveries are taken in arrival order, never by two batches in flight at once', () => {
    let heldBack = 0;
    fc.assert(
      fc.property(scenario, (s) => {
        const run = simulate(s);
        expect(run.batches.filter((b) => b.jobs.some((j) => b.busy.has(j)))).toEqual([]);
        expect(run.takenByJob).toEqual(run.admittedByJob);
        heldBack += run.counts.heldBack;
      }),
      SETTINGS,
    );
    // The histories do hold jobs back, often.
    expect(heldBack).toBeGreaterThan(SETTINGS.numRuns * 5);
  });

  it('takes no delivery twice: each batch is the oldest waiting deliveries whose job is free, 1..batchSize of them, at most concurrency in flight', () => {
    fc.assert(
      fc.property(scenario, (s) => {
        const run = simulate(s);
        const wrong = run.batches.filter(
          (b) =>
            b.seqs.join() !== b.expected.join() ||
            b.seqs.length < 1 ||
            b.seqs.length > s.batchSize ||
            b.inFlight > s.concurrency,
        );
        expect(wrong).toEqual([]);
        expect([...run.taken.values()].filter((n) => n !== 1)).toEqual([]);
      }),
      SETTINGS,
    );
  });

  it('holds the back-pressure bound: never more than maxHeld held, and a full scheduler always has a batch in flight to free room', () => {
    let full = 0;
    fc.assert(
      fc.property(scenario, (s) => {
        const run = simulate(s);
        const bound = Math.max(s.maxHeld ?? defaultMaxHeld(s.batchSize, s.concurrency), s.batchSize);
        expect(run.maxHeld).toBe(bound);
        const wrong = run.moments.filter(
          (m) => m.held > bound || m.full !== m.held >= bound || (m.full && m.inFlight === 0),
        );
        expect(wrong).toEqual([]);
        full += run.counts.full;
      }),
      SETTINGS,
    );
    // The reader does have to wait, often.
    expect(full).toBeGreaterThan(SETTINGS.numRuns);
  });

  it('settles every admitted delivery exactly once (acked, nak’d and delivered again, or isolated), decodes it once, and ends with nothing held', () => {
    let nakked = 0;
    let isolated = 0;
    fc.assert(
      fc.property(scenario, (s) => {
        const run = simulate(s);
        expect(run.end).toEqual({ held: 0, waiting: 0, inFlight: 0, armed: false, stuck: false });
        expect(run.settled.size).toBe(run.admitted);
        expect([...run.settled.values()].filter((n) => n !== 1)).toEqual([]);
        expect(run.decoded.size).toBe(run.admitted);
        expect([...run.decoded.values()].filter((n) => n !== 1)).toEqual([]);
        nakked += run.counts.nakked;
        isolated += run.counts.isolated;
      }),
      SETTINGS,
    );
    expect(nakked).toBeGreaterThan(SETTINGS.numRuns);
    expect(isolated).toBeGreaterThan(SETTINGS.numRuns);
  });

  it('never exceeds the linger: a delivery that a free slot could take waits at most lingerMs, none once draining, and a full batch not at all', () => {
    let fired = 0;
    fc.assert(
      fc.property(scenario, (s) => {
        const run = simulate(s);
        const wrong = run.moments.filter(
          (m) =>
            m.slotFree &&
            (m.free.some((f) => m.now - f.since > s.lingerMs) ||
              (m.draining && m.free.length > 0) ||
              m.free.length >= s.batchSize),
        );
        expect(wrong).toEqual([]);
        fired += run.counts.lingerFired;
      }),
      SETTINGS,
    );
    // The linger does pass, often.
    expect(fired).toBeGreaterThan(SETTINGS.numRuns);
  });

  it('arms the linger timer only when none is armed, cancels only an armed one, and leaves none armed while nothing waits', () => {
    fc.assert(
      fc.property(scenario, (s) => {
        const run = simulate(s);
        expect(run.timerProblems).toEqual([]);
        expect(run.moments.filter((m) => m.waiting === 0 && m.armed)).toEqual([]);
      }),
      SETTINGS,
    );
  });
});

/** A scheduler with a hand-driven timer, for the examples. */
function harness(opts: { batchSize: number; concurrency: number; lingerMs: number; maxHeld?: number }) {
  const started: Entry[][] = [];
  const timer = { armed: undefined as number | undefined };
  /** The armed timer fires. */
  const fire = () => {
    timer.armed = undefined;
    scheduler.lingerPassed();
  };
  const scheduler = new InboxScheduler<Delivery, Entry>(
    { ...opts, entryOf: (d) => ({ key: d.job, seq: d.seq }) },
    {
      start: (batch) => started.push(batch),
      armLinger: (ms) => (timer.armed = ms),
      cancelLinger: () => (timer.armed = undefined),
    },
  );
  let seq = 0;
  const admit = (...jobs: string[]) => jobs.forEach((job) => scheduler.admit({ job, seq: seq++ }));
  const seqs = (b: Entry[] | undefined) => b?.map((e) => `${e.key}#${e.seq}`);
  return { scheduler, started, timer, fire, admit, seqs };
}

describe('the inbox scheduler by example', () => {
  it('a full batch leaves at once; one that is not full leaves when the linger passes', () => {
    const { scheduler, started, timer, fire, admit, seqs } = harness({
      batchSize: 3,
      concurrency: 2,
      lingerMs: 5,
    });
    admit('a', 'b');
    expect(started).toEqual([]);
    expect(timer.armed).toBe(5);
    admit('c');
    expect(seqs(started[0])).toEqual(['a#0', 'b#1', 'c#2']);
    expect(timer.armed).toBeUndefined();
    admit('d');
    expect(timer.armed).toBe(5);
    fire();
    expect(seqs(started[1])).toEqual(['d#3']);
    expect(scheduler.inFlight).toBe(2);
  });

  it("a job's later envelope waits for its batch to settle, then leaves first", () => {
    const { scheduler, started, timer, fire, admit, seqs } = harness({
      batchSize: 2,
      concurrency: 4,
      lingerMs: 5,
    });
    admit('a', 'a', 'a');
    // The first batch fills with a's first two; a's third may not run beside it.
    expect(seqs(started[0])).toEqual(['a#0', 'a#1']);
    fire();
    expect(started).toHaveLength(1);
    // Only a#2 waits, for its job: no timer runs for it.
    expect(scheduler.waiting).toBe(1);
    expect(timer.armed).toBeUndefined();
    scheduler.settle(started[0]!);
    expect(timer.armed).toBe(5);
    admit('b');
    expect(seqs(started[1])).toEqual(['a#2', 'b#3']);
  });

  it('a batch passes over a held job and takes the envelopes behind it', () => {
    const { started, admit, seqs } = harness({ batchSize: 2, concurrency: 4, lingerMs: 5 });
    admit('a', 'a', 'a', 'b');
    expect(seqs(started[0])).toEqual(['a#0', 'a#1']);
    expect(seqs(started[1])).toEqual(['b#3']);
  });

  it('is full at maxHeld until a batch settles', () => {
    const { scheduler, started, admit } = harness({ batchSize: 2, concurrency: 1, lingerMs: 5, maxHeld: 4 });
    admit('a', 'b', 'c', 'd');
    expect(scheduler.full).toBe(true);
    expect(scheduler.held).toBe(4);
    scheduler.settle(started[0]!);
    expect(scheduler.full).toBe(false);
    expect(scheduler.held).toBe(2);
  });

  it('draining lets every envelope leave as soon as a slot and its job allow', () => {
    const { scheduler, started, timer, admit, seqs } = harness({
      batchSize: 10,
      concurrency: 1,
      lingerMs: 5,
    });
    admit('a');
    scheduler.drain();
    expect(seqs(started[0])).toEqual(['a#0']);
    expect(timer.armed).toBeUndefined();
    admit('b');
    admit('c');
    scheduler.settle(started[0]!);
    expect(seqs(started[1])).toEqual(['b#1', 'c#2']);
  });

  it('refuses to settle a batch twice, or one it never started', () => {
    const { scheduler, started, admit } = harness({ batchSize: 1, concurrency: 1, lingerMs: 5 });
    admit('a');
    scheduler.settle(started[0]!);
    expect(() => scheduler.settle(started[0]!)).toThrow(UnknownBatchError);
    expect(() => scheduler.settle([{ key: 'a', seq: 0 }])).toThrow(UnknownBatchError);
  });

  it('refuses a batch size or a concurrency below 1, and a negative linger', () => {
    const ports = { start: () => {}, armLinger: () => {}, cancelLinger: () => {} };
    const make = (batchSize: number, concurrency: number, lingerMs: number) => () =>
      new InboxScheduler({ batchSize, concurrency, lingerMs, entryOf: (k: string) => ({ key: k }) }, ports);
    expect(make(0, 1, 0)).toThrow(RangeError);
    expect(make(1, 0, 0)).toThrow(RangeError);
    expect(make(1, 1, -1)).toThrow(RangeError);
    expect(make(1, 1, 0)).not.toThrow();
  });
});

describe('the inbox scheduler stays pure', { timeout: 60_000 }, () => {
  const root = fileURLToPath(new URL('../..', import.meta.url));
  const file = 'src/daemon/inboxScheduler.ts';
  /** The rules ESLint breaks for `code` placed at the scheduler's path. */
  async function broken(code: string): Promise<string[]> {
    const [result] = await new ESLint({ cwd: root }).lintText(code, { filePath: file });
    return (result?.messages ?? []).filter((m) => m.severity === 2).map((m) => m.ruleId ?? m.message);
  }

  it('lint rejects an import, a timer and the clock there, and passes the file itself', async () => {
    expect(
      await broken(`import type { JsMsg } from '@nats-io/jetstream';\nexport type M = JsMsg;\n`),
    ).toEqual(['no-restricted-imports']);
    expect(await broken(`export const later = (f: () => void) => setTimeout(f, 1);\n`)).toEqual([
      'no-restricted-globals',
    ]);
    expect(await broken(`export const now = () => Date.now();\n`)).toEqual(['no-restricted-properties']);
    expect(await broken(readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8'))).toEqual([]);
  });
});
