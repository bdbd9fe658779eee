/**
 * `npm run bench:profile` (bench/README.md): the inbox's and the ceiling's node CPU and allocation by
 * part (V8's sampling profilers over drains), then a backend's CPU per envelope for the inbox's write
 * beside the ceiling's transaction.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Session, type HeapProfiler, type Profiler, type Runtime } from 'node:inspector/promises';
import { Command, Option } from '../src/cli/commander.js';
import { wholeNumber } from '../src/cli/plumbing.js';
import { addCeilingResult, ceilingParameters, CEILING, CEILING_SQL, CEILING_STATEMENT } from './ceiling.js';
import { median, startBenchEnv, type BenchEnv } from './env.js';
import { table } from './report.js';
import { decodeEnvelope } from '../src/messages/decodeEnvelope.js';
import { envelopeToJobEvent } from '../src/messages/envelopeToJobEvent.js';
import { applyV8Flags } from '../src/process/v8Flags.js';
import { applyUnlocked, pgStepSql, type Statement, type StepSql } from '../src/step/index.js';
import { WRITE } from '../src/step/write.js';
import { doneEnvelope, resultHeaders, seedPublishedJobs, type BenchJob } from '../workshop/benchFixtures.js';
import { processCpuMs, threadCpuMs } from '../workshop/processStats.js';
import { measureCeiling, measureInbox, type LogLevel, type TimedHooks } from './throughput.js';

/** The parts, by the frame's url (or function name), tried in order; the first match owns a sample. */
const PARTS: ReadonlyArray<[part: string, url: RegExp, fn?: RegExp]> = [
  ['XState: decide()', /node_modules\/xstate\/|\/machines\//],
  ['decode and validate', /messages\/(decodeEnvelope|schemas)|node_modules\/ajv/, /^validate\d+$/],
  ['step: plan, row diff, parameters', /src\/step\/|src\/db\/jobRow/],
  [
    'pg driver',
    /node_modules\/(pg|pg-protocol|pg-pool|pg-types|postgres-[a-z]+)\/|src\/db\/(database|pgTransaction)/,
  ],
  ['NATS client', /node_modules\/@nats-io\//],
  ['logging', /node_modules\/(pino|sonic-boom|fast-redact|quick-format-unescaped)\/|src\/logger/],
  ['inbox: batching, hold, outcomes, metrics', /src\/daemon\/|src\/tracing\/|prom-client|src\/metrics/],
  ["the ceiling's own code", /bench\/ceiling/],
];
const GC = 'garbage collection';
const RUNTIME = 'Node runtime (promises, timers, sockets)';
/** The threads besides the main one, which the sampling profiler does not see. */
const BACKGROUND = "V8's background threads (collection helpers, compiler)";

/** One consumer's node CPU per envelope by part (µs) and its bytes allocated per envelope by part. */
type Column = Record<'cpu' | 'allocated', Map<string, number>>;

const partOf = (f: Runtime.CallFrame) =>
  PARTS.find(([, url, fn]) => url.test(f.url) || fn?.test(f.functionName))?.[0];

/** Bytes allocated by part: each sample counts for the nearest frame of a part on its stack. */
function attributeAllocation(head: HeapProfiler.SamplingHeapProfileNode): Map<string, number> {
  const bytes = new Map<string, number>();
  const visit = (node: HeapProfiler.SamplingHeapProfileNode, inherited: string) => {
    const part = partOf(node.callFrame) ?? inherited;
    if (node.selfSize > 0) bytes.set(part, (bytes.get(part) ?? 0) + node.selfSize);
    for (const child of node.children) visit(child, part);
  };
  visit(head, RUNTIME);
  return bytes;
}

/** Each part's share of the profile's busy samples, by the same rule. */
function attribute(profile: Profiler.Profile): Map<string, number> {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const counts = new Map<string, number>();
  let busy = 0;
  for (const id of profile.samples ?? []) {
    const fn = byId.get(id)!.callFrame.functionName;
    if (fn === '(idle)') continue;
    busy += 1;
    let part = fn === '(garbage collector)' ? GC : undefined;
    for (let at: number | undefined = id; part === undefined && at !== undefined; at = parent.get(at))
      part = partOf(byId.get(at)!.callFrame);
    part ??= RUNTIME;
    counts.set(part, (counts.get(part) ?? 0) + 1);
  }
  return new Map([...counts].map(([k, v]) => [k, v / busy]));
}

/** Batches of {@link statementCpu} not counted: the statements are prepared and planned in them. */
const STATEMENT_WARM_UP = 6;

/**
 * A backend's CPU per envelope (from /proc) of an inbox batch's write (`applyUnlocked`, prepared) and
 * of the ceiling's transaction, each on batches of `size` fresh jobs' results in turns on one connection.
 */
async function statementCpu(env: BenchEnv, batches: number, size: number) {
  const jobs = await seedPublishedJobs(env.pool, 2 * size * (batches + STATEMENT_WARM_UP));
  const client = await env.pool.connect();
  try {
    const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const cpuMs = () => processCpuMs(rows[0]!.pid) ?? NaN;
    const ms = { write: 0, ceiling: 0 };
    let counted = false;
    // The step's statements as the inbox sends them, each one's backend CPU added to its total.
    const prepared = pgStepSql(client);
    const measured: StepSql = {
      async query<R>(statement: Statement, values: readonly unknown[]) {
        const t = cpuMs();
        const out = await prepared.query<R>(statement, values);
        if (statement !== WRITE)
          throw new Error(`the unlocked path sent an unexpected statement ${statement.name}`);
        if (counted) ms.write += cpuMs() - t;
        return out;
      },
    };
    const results = (of: readonly BenchJob[]) =>
      of.map((job) => {
        const msgId = resultHeaders(job).get('Nats-Msg-Id');
        const decoded = decodeEnvelope({ data: doneEnvelope(job), msgId, maxBytes: Number.MAX_SAFE_INTEGER });
        if (!decoded.ok) throw new Error('a fixture envelope did not decode');
        return decoded;
      });
    for (let i = 0; i < STATEMENT_WARM_UP + batches; i++) {
      counted = i >= STATEMENT_WARM_UP;
      const at = 2 * size * i;
      const items = results(jobs.slice(at, at + size)).map((d) => envelopeToJobEvent(d.envelope, d.msgId));
      if ((await applyUnlocked(measured, items, { resultsBucket: 'arm-ka' })) === null)
        throw new Error('a batch of fresh results left the unlocked path');
      // The ceiling's transaction on as many other jobs.
      const values = ceilingParameters();
      for (const d of results(jobs.slice(at + size, at + 2 * size)))
        addCeilingResult(values, d.envelope, d.msgId ?? '');
      const t = cpuMs();
      await client.query('BEGIN');
      await client.query({ name: CEILING_STATEMENT, text: CEILING_SQL, values });
      await client.query('COMMIT');
      if (counted) ms.ceiling += cpuMs() - t;
    }
    const perEnvelope = (v: number) => (v * 1000) / (batches * size);
    return { write: perEnvelope(ms.write), ceiling: perEnvelope(ms.ceiling) };
  } finally {
    client.release();
  }
}

const n = wholeNumber(2);
const logLevel = new Option('--log-level <level>', "the inbox's LOG_LEVEL (info logs a line per envelope)");
const args = new Command('bench:profile')
  .description("profile the inbox's node CPU by part, beside its ceiling's")
  .option('--rounds <n>', 'drains per consumer (the last one profiled)', n, 3)
  .option('--envelopes <n>', 'backlog of each drain', n, 30_000)
  .option('--keep <dir>', 'write the .cpuprofile and .heapprofile files there')
  .option('--statement-batches <n>', "batches of PostgreSQL's statement split", n, 60)
  .option('--statement-size <n>', 'envelopes per batch of the statement split', n, CEILING.batchSize)
  .addOption(logLevel.choices(['warn', 'info']).default('warn'))
  .parse(process.argv)
  .opts<Record<'rounds' | 'envelopes' | 'statementBatches' | 'statementSize', number> & Strings>();
type Strings = { keep?: string; logLevel: LogLevel };

// The inbox's work runs in this process as it runs in the daemon's: with its V8 settings.
applyV8Flags();
type Run = (timed: TimedHooks) => Promise<unknown>;
/** A drain with `started` called as its clock starts, `ended` (given what `started` gave) as it stops. */
async function within<S, T>(run: Run, started: () => S | Promise<S>, ended: (s: S) => T | Promise<T>) {
  let [s, out] = [undefined as S, undefined as T];
  await run({
    started: async () => void (s = await started()),
    ended: async () => void (out = await ended(s)),
  });
  return out;
}
const keep = (name: string, ext: string, data: unknown) => {
  if (!args.keep) return;
  mkdirSync(args.keep, { recursive: true });
  writeFileSync(join(args.keep, `${name}.${ext}`), JSON.stringify(data));
};
const per = (v: number) => (v * 1000) / args.envelopes;
/** This process's CPU per envelope since `from`, all threads and the main thread's. */
const ownCpu = (from = { all: 0, main: 0 }) => ({
  all: per(processCpuMs(process.pid) ?? NaN) - from.all,
  main: per(threadCpuMs(process.pid, process.pid) ?? NaN) - from.main,
});

const env = await startBenchEnv();
const session = new Session();
session.connect();
await session.post('Profiler.enable');
await session.post('Profiler.setSamplingInterval', { interval: 250 });
await session.post('HeapProfiler.enable');
const consumers: Array<[name: string, run: Run]> = [
  ['inbox', (timed) => measureInbox(env, { name: 'inbox', logLevel: args.logLevel, timed }, args.envelopes)],
  ['ceiling', (timed) => measureCeiling(env, args.envelopes, { timed })],
];
const columns: Column[] = [];
let statements: Awaited<ReturnType<typeof statementCpu>>;
try {
  for (const [name, run] of consumers) {
    // The process's CPU and its main thread's over the timed window of each unprofiled drain.
    const rounds: Array<{ all: number; main: number }> = [];
    for (let i = 1; i < args.rounds; i++) rounds.push(await within(run, ownCpu, ownCpu));
    const stopCpu = async () => (await session.post('Profiler.stop')).profile;
    const profile = await within(run, () => session.post('Profiler.start'), stopCpu);
    // One more drain under the sampling heap profiler, which slows allocation: apart from the CPU profile.
    const sampling = { samplingInterval: 1024 }; // mean bytes between two samples
    const collected = { includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true };
    const startHeap = () => session.post('HeapProfiler.startSampling', { ...sampling, ...collected });
    const stopHeap = async () => (await session.post('HeapProfiler.stopSampling')).profile;
    const heap = await within(run, startHeap, stopHeap);
    keep(name, 'cpuprofile', profile);
    keep(name, 'heapprofile', heap);
    // The profile's shares split the main thread's CPU; the rest of the process's is its other threads'.
    const [nodeUs, mainUs] = [median(rounds, (r) => r.all).all, median(rounds, (r) => r.main).main];
    const cpu = new Map([...attribute(profile)].map(([part, share]) => [part, share * mainUs]));
    cpu.set(BACKGROUND, nodeUs - mainUs);
    const perEnvelope = ([p, bytes]: [string, number]) => [p, bytes / args.envelopes] as const;
    const allocated = new Map([...attributeAllocation(heap.head)].map(perEnvelope));
    columns.push({ cpu, allocated });
    const [all, main] = [nodeUs.toFixed(0), mainUs.toFixed(0)];
    process.stderr.write(`${name}: node ${all} µs per envelope, ${main} on the main thread\n`);
  }
  statements = await statementCpu(env, args.statementBatches, args.statementSize);
} finally {
  session.disconnect();
  await env.close();
}

const [inbox, ceiling] = columns as [Column, Column];
const ORDER = [...PARTS.map(([p]) => p), GC, RUNTIME, BACKGROUND];
const bold = (v: string) => `**${v}**`;
/** The parts either consumer has, each one's figure and the inbox's excess (which sums to the totals'). */
const byPart = (title: string, of: (c: Column) => Map<string, number>, digits: number) => {
  const cells = (a: number, b: number, d: number) => [a, b, a - b].map((v) => v.toFixed(d));
  const sum = (c: Column) => [...of(c).values()].reduce((a, b) => a + b, 0);
  const parts = ORDER.filter((p) => of(inbox).has(p) || of(ceiling).has(p));
  const rows = parts.map((p) => [p, ...cells(of(inbox).get(p) ?? 0, of(ceiling).get(p) ?? 0, digits)]);
  const total = [bold('total'), ...cells(sum(inbox), sum(ceiling), 0).map(bold)];
  const head = [title, 'inbox', 'ceiling', 'inbox above the ceiling'];
  return table(head, [...rows, total], ['---', '---:', '---:', '---:']);
};
const [w, c] = [statements.write.toFixed(1), statements.ceiling.toFixed(1)];
const excess = (statements.write - statements.ceiling).toFixed(1);
const pgTitle = `PostgreSQL CPU per envelope, µs (one connection, batches of ${args.statementSize}, in turns)`;
const pgRows = [
  ['the write (the inbox) / BEGIN, the statement, COMMIT (the ceiling)', w, c],
  [`**total** (the inbox above the ceiling: ${excess})`, bold(w), bold(c)],
];
const postgres = table([pgTitle, 'inbox', 'ceiling'], pgRows, ['---', '---:', '---:']);
const cpu = byPart('where (node CPU per envelope, µs)', (col) => col.cpu, 1);
const allocTitle = 'bytes allocated per envelope (what the collections collect)';
const allocation = byPart(allocTitle, (col) => col.allocated, 0);
process.stdout.write(`${cpu}\n\n${allocation}\n\n${postgres}\n`);
