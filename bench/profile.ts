/**
 * `npm run bench:profile`: where the node CPU of the inbox and of its ceiling goes, by part, and
 * the inbox's excess over the ceiling part by part. Each drains `--envelopes` results `--rounds`
 * times, the last under V8's sampling profiler; the shares are scaled to the median node CPU per
 * envelope of the other rounds. A busy sample counts for the nearest frame on its stack that
 * belongs to a part. `--keep DIR` keeps the `.cpuprofile` files (Chrome's DevTools open them);
 * `--log-level info` runs the inbox at info, a line per applied envelope.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Session } from 'node:inspector/promises';
import { Command, InvalidArgumentError, Option } from 'commander';
import { startBenchEnv } from './env.js';
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
/** One consumer's node CPU per envelope and its shares by part. */
interface Column {
  name: string;
  nodeUs: number;
  shares: Map<string, number>;
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
    for (let at: number | undefined = id; part === undefined && at !== undefined; at = parent.get(at)) {
      const frame = byId.get(at)!.callFrame;
      part = PARTS.find(([, matches]) => matches(frame.url, frame.functionName))?.[0];
    }
    part ??= RUNTIME;
    counts.set(part, (counts.get(part) ?? 0) + 1);
  }
  return new Map([...counts].map(([k, v]) => [k, v / busy]));
}

const positiveInteger = (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 2) throw new InvalidArgumentError('must be an integer ≥ 2');
  return n;
};

async function main(): Promise<void> {
  const args = new Command('bench:profile')
    .description("profile the inbox's node CPU by part, beside its ceiling's")
    .option('--rounds <n>', 'drains per consumer (the last one profiled)', positiveInteger, 3)
    .option('--envelopes <n>', 'backlog of each drain', positiveInteger, 30_000)
    .option('--keep <dir>', 'write the .cpuprofile files there')
    .addOption(
      new Option('--log-level <level>', "the inbox's LOG_LEVEL (info logs a line per envelope)")
        .choices(['warn', 'info'])
        .default('warn'),
    )
    .parse(process.argv)
    .opts<{ rounds: number; envelopes: number; keep?: string; logLevel: LogLevel }>();
  const env = await startBenchEnv();
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: 250 });
  const consumers: Array<[name: string, run: (timed?: TimedHooks) => Promise<ThroughputResult>]> = [
    [
      'inbox',
      (timed) => measureInbox(env, { name: 'inbox', logLevel: args.logLevel, timed }, args.envelopes),
    ],
    ['ceiling', (timed) => measureCeiling(env, args.envelopes, { timed })],
  ];
  const columns: Column[] = [];
  try {
    for (const [name, run] of consumers) {
      const unprofiled: number[] = [];
      for (let i = 1; i < args.rounds; i++) unprofiled.push((await run()).cpu.nodeUs ?? NaN);
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
      const nodeUs = [...unprofiled].sort((a, b) => a - b)[Math.floor((unprofiled.length - 1) / 2)]!;
      columns.push({ name, nodeUs, shares: attribute(profile!) });
      process.stderr.write(`${name}: node ${nodeUs.toFixed(0)} µs per envelope\n`);
    }
  } finally {
    session.disconnect();
    await env.close();
  }
  const parts = [...PARTS.map(([p]) => p), GC, RUNTIME].filter((p) => columns.some((c) => c.shares.has(p)));
  const [inbox, ceiling] = columns as [Column, Column];
  const us = (c: Column, part: string) => (c.shares.get(part) ?? 0) * c.nodeUs;
  // The last column is the inbox's excess over the ceiling, part by part: it sums to the total's.
  const cells = (p: string) =>
    [us(inbox, p), us(ceiling, p), us(inbox, p) - us(ceiling, p)].map((v) => v.toFixed(1));
  const lines = [
    '| where (node CPU per envelope, µs) | inbox | ceiling | inbox above the ceiling |',
    '|---|---:|---:|---:|',
    ...parts.map((p) => `| ${p} | ${cells(p).join(' | ')} |`),
    `| **total** | **${inbox.nodeUs.toFixed(0)}** | **${ceiling.nodeUs.toFixed(0)}** | **${(inbox.nodeUs - ceiling.nodeUs).toFixed(0)}** |`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
}

await main();
