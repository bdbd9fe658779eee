/**
 * `npm run bench:profile`: where the node CPU of the inbox and of its ceiling goes, by part, and
 * the inbox's excess over the ceiling part by part. Each drains `--envelopes` results `--rounds`
 * times, the last under V8's sampling profiler. The profiler samples the main thread: the shares
 * are scaled to the main thread's median CPU per envelope of the other rounds, and the process's
 * other threads (V8's collection helpers and compiler) are a row of their own, the rest of the
 * process's CPU in the same windows. A busy sample counts for the nearest frame on its stack that
 * belongs to a part. `--keep DIR` keeps the `.cpuprofile` and `.heapprofile` files (Chrome's
 * DevTools open them); `--log-level info` runs the inbox at info, a line per applied envelope.
 *
 * Then what each part allocates per envelope (one more drain under the sampling heap profiler), and
 * PostgreSQL's side: the CPU of a backend per envelope for each statement an inbox batch
 * sends, beside the ceiling's transaction, batches of the same results on one connection in turns
 * ({@link statementCpu}).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Session } from 'node:inspector/promises';
import { Command, InvalidArgumentError, Option } from 'commander';
import { addCeilingResult, ceilingParameters, CEILING, CEILING_SQL, CEILING_STATEMENT } from './ceiling.js';
import { startBenchEnv, type BenchEnv } from './env.js';
import { decodeEnvelope } from '../src/messages/decodeEnvelope.js';
import { envelopeToJobEvent } from '../src/messages/envelopeToJobEvent.js';
import { applyV8Flags } from '../src/process/v8Flags.js';
import { applyUnlocked, pgStepSql, type Statement, type StepSql } from '../src/step/index.js';
import { WRITE } from '../src/step/write.js';
import { doneEnvelope, resultHeaders, seedPublishedJobs, type BenchJob } from '../workshop/benchFixtures.js';
import { processCpuMs, threadCpuMs } from '../workshop/processStats.js';
import {
  measureCeiling,
  measureInbox,
  type LogLevel,
  type ThroughputResult,
  type TimedHooks,
} from './throughput.js';

/** A V8 CPU profile, as much of it as the attribution reads. */
interface CpuProfile {
  nodes: Array<{ id: number; callFrame: { functionName: string; url: string }; children?: number[] }>;
  samples: number[];
}

/** The parts, in the order they are tried on each frame; the first that matches owns the sample. */
export const PARTS: ReadonlyArray<[part: string, matches: (url: string, fn: string) => boolean]> = [
  ['XState: decide()', (u) => /node_modules\/xstate\/|\/machines\//.test(u)],
  [
    'decode and validate',
    (u, fn) => /messages\/(decodeEnvelope|schemas)|node_modules\/ajv/.test(u) || /^validate\d+$/.test(fn),
  ],
  ['step: plan, row diff, parameters', (u) => /src\/step\/|src\/db\/jobRow/.test(u)],
  [
    'pg driver',
    (u) =>
      /node_modules\/(pg|pg-protocol|pg-pool|pg-types|postgres-[a-z]+)\/|src\/db\/(database|pgTransaction)/.test(
        u,
      ),
  ],
  ['NATS client', (u) => /node_modules\/@nats-io\//.test(u)],
  [
    'logging',
    (u) => /node_modules\/(pino|sonic-boom|fast-redact|quick-format-unescaped)\/|src\/logger/.test(u),
  ],
  [
    'inbox: batching, hold, outcomes, metrics',
    (u) => /src\/daemon\/|src\/tracing\/|prom-client|src\/metrics/.test(u),
  ],
  ["the ceiling's own code", (u) => /bench\/ceiling/.test(u)],
];
const GC = 'garbage collection';
const RUNTIME = 'Node runtime (promises, timers, sockets)';
/**
 * The process's other threads, which the sampling profiler does not see: V8's helpers (parallel
 * young-generation collection, concurrent marking and sweeping, optimising compilation) and
 * libuv's pool.
 */
const BACKGROUND = "V8's background threads (collection helpers, compiler)";
/**
 * One consumer's node CPU per envelope: all of it, its main thread's (which the profile's shares
 * split by part) and the shares.
 */
interface Column {
  name: string;
  nodeUs: number;
  mainUs: number;
  shares: Map<string, number>;
  /** Bytes allocated per envelope, by part. */
  allocated: Map<string, number>;
}

/** This process's CPU, all threads and the main thread's, in ms. */
function ownCpuMs(): { all: number; main: number } {
  return { all: processCpuMs(process.pid) ?? NaN, main: threadCpuMs(process.pid, process.pid) ?? NaN };
}

/** A V8 sampling heap profile, as much of it as the attribution reads. */
interface HeapProfileNode {
  callFrame: { functionName: string; url: string };
  selfSize: number;
  children: HeapProfileNode[];
}

/** The part a frame belongs to, if any. */
function partOf(frame: { functionName: string; url: string }): string | undefined {
  return PARTS.find(([, matches]) => matches(frame.url, frame.functionName))?.[0];
}

/**
 * Bytes allocated by part, from a sampling heap profile that kept the objects every collection
 * freed: each sample counts for the nearest frame on its stack that belongs to a part, as a CPU
 * sample does; the rest is the Node runtime's.
 */
export function attributeAllocation(head: HeapProfileNode): Map<string, number> {
  const bytes = new Map<string, number>();
  const visit = (node: HeapProfileNode, inherited: string) => {
    const part = partOf(node.callFrame) ?? inherited;
    if (node.selfSize > 0) bytes.set(part, (bytes.get(part) ?? 0) + node.selfSize);
    for (const child of node.children) visit(child, part);
  };
  visit(head, RUNTIME);
  return bytes;
}

/** Each part's share of the profile's busy samples. */
export function attribute(profile: CpuProfile): Map<string, number> {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const counts = new Map<string, number>();
  let busy = 0;
  for (const id of profile.samples) {
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

const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;

const positiveInteger = (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 2) throw new InvalidArgumentError('must be an integer ≥ 2');
  return n;
};

/** Mean bytes between two samples of the sampling heap profiler. */
const HEAP_SAMPLING_BYTES = 1024;

/** Batches of {@link statementCpu} not counted: the statements are prepared and planned in them. */
const STATEMENT_WARM_UP = 6;

/**
 * PostgreSQL CPU per envelope of an inbox batch's statement (the step's unlocked path itself,
 * `applyUnlocked`: its one write, prepared once per connection) and of the
 * ceiling's transaction (BEGIN, its statement, COMMIT), each on batches of `size` fresh jobs'
 * results, in turns on one connection, so that both meet the same table. The backend's
 * CPU is read from /proc around each statement (in ticks of 10 ms, which average out over the
 * batches).
 */
async function statementCpu(
  env: BenchEnv,
  batches: number,
  size: number,
): Promise<Record<'write' | 'ceiling', number>> {
  const jobs = await seedPublishedJobs(env.pool, 2 * size * (batches + STATEMENT_WARM_UP));
  const client = await env.pool.connect();
  try {
    const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const pid = rows[0]!.pid;
    const cpuMs = () => processCpuMs(pid) ?? NaN;
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
        const decoded = decodeEnvelope({
          data: doneEnvelope(job),
          msgId: resultHeaders(job).get('Nats-Msg-Id'),
          maxBytes: Number.MAX_SAFE_INTEGER,
        });
        if (!decoded.ok) throw new Error('a fixture envelope did not decode');
        return decoded;
      });
    for (let i = 0; i < STATEMENT_WARM_UP + batches; i++) {
      counted = i >= STATEMENT_WARM_UP;
      const at = 2 * size * i;
      // An inbox batch on the unlocked path.
      const items = results(jobs.slice(at, at + size)).map((d) => envelopeToJobEvent(d.envelope, d.msgId));
      if ((await applyUnlocked(measured, items, { resultsBucket: 'arm-ka' })) === null) {
        throw new Error('a batch of fresh results left the unlocked path');
      }
      // The ceiling's transaction on as many other jobs.
      const values = ceilingParameters();
      for (const d of results(jobs.slice(at + size, at + 2 * size))) {
        addCeilingResult(values, d.envelope, d.msgId ?? '');
      }
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

async function main(): Promise<void> {
  const args = new Command('bench:profile')
    .description("profile the inbox's node CPU by part, beside its ceiling's")
    .option('--rounds <n>', 'drains per consumer (the last one profiled)', positiveInteger, 3)
    .option('--envelopes <n>', 'backlog of each drain', positiveInteger, 30_000)
    .option('--keep <dir>', 'write the .cpuprofile and .heapprofile files there')
    .option('--statement-batches <n>', "batches of PostgreSQL's statement split", positiveInteger, 60)
    .option(
      '--statement-size <n>',
      "envelopes per batch of the statement split (a moderate rate's small batches show each statement's fixed cost)",
      positiveInteger,
      CEILING.batchSize,
    )
    .addOption(
      new Option('--log-level <level>', "the inbox's LOG_LEVEL (info logs a line per envelope)")
        .choices(['warn', 'info'])
        .default('warn'),
    )
    .parse(process.argv)
    .opts<{
      rounds: number;
      envelopes: number;
      keep?: string;
      statementBatches: number;
      statementSize: number;
      logLevel: LogLevel;
    }>();
  const env = await startBenchEnv();
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: 250 });
  await session.post('HeapProfiler.enable');
  const consumers: Array<[name: string, run: (timed?: TimedHooks) => Promise<ThroughputResult>]> = [
    [
      'inbox',
      (timed) => measureInbox(env, { name: 'inbox', logLevel: args.logLevel, timed }, args.envelopes),
    ],
    ['ceiling', (timed) => measureCeiling(env, args.envelopes, { timed })],
  ];
  const columns: Column[] = [];
  let statements: Awaited<ReturnType<typeof statementCpu>>;
  try {
    for (const [name, run] of consumers) {
      // Per envelope, the process's CPU and its main thread's, over the timed window of each drain.
      const all: number[] = [];
      const main: number[] = [];
      for (let i = 1; i < args.rounds; i++) {
        let before = ownCpuMs();
        await run({
          started: async () => void (before = ownCpuMs()),
          ended: async () => {
            const after = ownCpuMs();
            all.push(((after.all - before.all) * 1000) / args.envelopes);
            main.push(((after.main - before.main) * 1000) / args.envelopes);
          },
        });
      }
      let profile: CpuProfile | undefined;
      await run({
        started: () => session.post('Profiler.start'),
        ended: async () => {
          profile = (await session.post('Profiler.stop')).profile as unknown as CpuProfile;
        },
      });
      if (args.keep) {
        mkdirSync(args.keep, { recursive: true });
        writeFileSync(join(args.keep, `${name.replace(/ /g, '-')}.cpuprofile`), JSON.stringify(profile));
      }
      // One more drain under the sampling heap profiler, which slows allocation down: apart from
      // the CPU profile, so that neither distorts the other.
      let heap: { head: HeapProfileNode } | undefined;
      await run({
        started: async () => {
          await session.post('HeapProfiler.startSampling', {
            samplingInterval: HEAP_SAMPLING_BYTES,
            includeObjectsCollectedByMajorGC: true,
            includeObjectsCollectedByMinorGC: true,
          });
        },
        ended: async () => {
          heap = (await session.post('HeapProfiler.stopSampling')).profile as unknown as {
            head: HeapProfileNode;
          };
        },
      });
      if (args.keep)
        writeFileSync(join(args.keep, `${name.replace(/ /g, '-')}.heapprofile`), JSON.stringify(heap));
      const allocated = new Map(
        [...attributeAllocation(heap!.head)].map(([part, bytes]) => [part, bytes / args.envelopes]),
      );
      const column = {
        name,
        nodeUs: median(all),
        mainUs: median(main),
        shares: attribute(profile!),
        allocated,
      };
      columns.push(column);
      process.stderr.write(
        `${name}: node ${column.nodeUs.toFixed(0)} µs per envelope, ${column.mainUs.toFixed(0)} of them on the main thread\n`,
      );
    }
    statements = await statementCpu(env, args.statementBatches, args.statementSize);
  } finally {
    session.disconnect();
    await env.close();
  }
  const [inbox, ceiling] = columns as [Column, Column];
  /**
   * A table of the parts that either consumer has, `value` of each beside the other's and the
   * inbox's excess, which sums over the parts to the totals' difference.
   */
  const byPart = (
    title: string,
    parts: readonly string[],
    value: (c: Column, part: string) => number,
    total: (c: Column) => number,
    digits: number,
  ) => {
    const row = (cells: number[], d: number) => cells.map((v) => v.toFixed(d));
    return [
      `| ${title} | inbox | ceiling | inbox above the ceiling |`,
      '|---|---:|---:|---:|',
      ...parts.map(
        (p) =>
          `| ${p} | ${row([value(inbox, p), value(ceiling, p), value(inbox, p) - value(ceiling, p)], digits).join(' | ')} |`,
      ),
      `| **total** | ${row([total(inbox), total(ceiling), total(inbox) - total(ceiling)], 0)
        .map((v) => `**${v}**`)
        .join(' | ')} |`,
    ];
  };
  const present = (parts: string[], has: (c: Column, part: string) => boolean) =>
    parts.filter((p) => columns.some((c) => has(c, p)));
  // The profile samples the main thread: its shares split the main thread's CPU, and the rest of
  // the process's CPU is its background threads'.
  const lines = byPart(
    'where (node CPU per envelope, µs)',
    [...present([...PARTS.map(([p]) => p), GC, RUNTIME], (c, p) => c.shares.has(p)), BACKGROUND],
    (c, p) => (p === BACKGROUND ? c.nodeUs - c.mainUs : (c.shares.get(p) ?? 0) * c.mainUs),
    (c) => c.nodeUs,
    1,
  );
  const allocationLines = byPart(
    'bytes allocated per envelope (what the collections collect)',
    present([...PARTS.map(([p]) => p), RUNTIME], (c, p) => c.allocated.has(p)),
    (c, p) => c.allocated.get(p) ?? 0,
    (c) => [...c.allocated.values()].reduce((a, b) => a + b, 0),
    0,
  );
  const { write, ceiling: transaction } = statements;
  const pgLines = [
    `| PostgreSQL CPU per envelope, µs (one connection, batches of ${args.statementSize}, in turns) | inbox | ceiling |`,
    '|---|---:|---:|',
    `| the write (the inbox) / BEGIN, the statement, COMMIT (the ceiling) | ${write.toFixed(1)} | ${transaction.toFixed(1)} |`,
    `| **total** (the inbox above the ceiling: ${(write - transaction).toFixed(1)}) | **${write.toFixed(1)}** | **${transaction.toFixed(1)}** |`,
  ];
  process.stdout.write(`${lines.join('\n')}\n\n${allocationLines.join('\n')}\n\n${pgLines.join('\n')}\n`);
}

// The inbox's work runs in this process as it runs in the daemon's: with its V8 settings.
applyV8Flags();
await main();
