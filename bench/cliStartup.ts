/**
 * `npm run bench:cli`: how long the `recognition-core` command takes before it does anything,
 * beside a bare `node -e 0` on the same machine, measured side by side.
 *
 * Each command line runs `--runs` times (default 15) after one untimed run, the command lines
 * taking turns so that a busy machine slows them alike; the table gives the median wall time, its
 * ratio to `node -e 0`, and the median CPU time (user + system, Linux only) of each. With
 * `--database URL` (or DATABASE_URL set) it also runs `jobs list --limit 1` against that database,
 * beside a small Node program that opens the same client (kysely and pg) and reads one row.
 *
 * The target: `--help` within 3× `node -e 0`, and `jobs list` about as fast as the small program.
 * This prints the figures and says whether the first holds; it asserts nothing.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command, InvalidArgumentError } from 'commander';

const CLI = fileURLToPath(new URL('../../bin/recognition-core.js', import.meta.url));
/** Clock ticks per second of /proc's CPU times (the kernel's USER_HZ, 100 on Linux). */
const TICKS_PER_SECOND = 100;

/** One command line to measure. */
interface Case {
  label: string;
  args: string[];
  env?: Record<string, string>;
}

/** CPU time of this process's waited-for children so far, in ms; undefined without /proc. */
function childrenCpuMs(): number | undefined {
  try {
    // Fields 16 and 17 of /proc/self/stat (cutime, cstime), counted after the `(comm)` field.
    const stat = readFileSync('/proc/self/stat', 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[13]) + Number(fields[14])) * 1000) / TICKS_PER_SECOND;
  } catch {
    return undefined;
  }
}

/** Run `c` once; its wall and CPU time in ms. Throws when it fails. */
function runOnce(c: Case): { wallMs: number; cpuMs: number | undefined } {
  const cpuBefore = childrenCpuMs();
  const start = process.hrtime.bigint();
  const r = spawnSync(process.execPath, c.args, {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/tmp', ...c.env },
    stdio: ['ignore', 'ignore', 'pipe'],
    encoding: 'utf8',
  });
  const wallMs = Number(process.hrtime.bigint() - start) / 1e6;
  const cpuAfter = childrenCpuMs();
  if (r.status !== 0) throw new Error(`${c.label}: exit ${String(r.status)}: ${r.stderr.trim()}`);
  return {
    wallMs,
    cpuMs: cpuBefore === undefined || cpuAfter === undefined ? undefined : cpuAfter - cpuBefore,
  };
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};

function positive(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('must be a whole number of at least 1');
  return n;
}

const opts = new Command('bench:cli')
  .description('start-up time of the recognition-core command beside node -e 0')
  .option('--runs <n>', 'timed runs of each command line', positive, 15)
  .option('--database <url>', 'also time jobs list against this database (default: DATABASE_URL)')
  .parse(process.argv)
  .opts<{ runs: number; database?: string }>();

const database = opts.database ?? process.env.DATABASE_URL;
const cases: Case[] = [
  { label: 'node -e 0', args: ['-e', '0'] },
  { label: 'recognition-core --help', args: [CLI, '--help'] },
  { label: 'recognition-core --version', args: [CLI, '--version'] },
  { label: 'recognition-core jobs list --help', args: [CLI, 'jobs', 'list', '--help'] },
];
if (database) {
  const smallProgram = `
    import { Kysely, PostgresDialect, sql } from 'kysely';
    import pg from 'pg';
    const db = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2 }) }) });
    await sql\`SELECT id FROM recognition_job LIMIT 1\`.execute(db);
    await db.destroy();`;
  cases.push(
    {
      label: 'node: kysely + pg, one row',
      args: ['--input-type=module', '-e', smallProgram],
      env: { DATABASE_URL: database, NODE_PATH: '' },
    },
    {
      label: 'recognition-core jobs list --limit 1',
      args: [CLI, 'jobs', 'list', '--limit', '1'],
      env: { DATABASE_URL: database },
    },
  );
}

// The small program resolves kysely and pg from this package: run every case from its root.
process.chdir(fileURLToPath(new URL('../..', import.meta.url)));
for (const c of cases) runOnce(c);
const wall = cases.map(() => [] as number[]);
const cpu = cases.map(() => [] as number[]);
for (let round = 0; round < opts.runs; round++) {
  cases.forEach((c, i) => {
    const r = runOnce(c);
    wall[i]!.push(r.wallMs);
    if (r.cpuMs !== undefined) cpu[i]!.push(r.cpuMs);
  });
}

const base = median(wall[0]!);
const rows = cases.map((c, i) => {
  const w = median(wall[i]!);
  return [
    c.label,
    w.toFixed(0),
    `${(w / base).toFixed(2)}×`,
    cpu[i]!.length === opts.runs ? median(cpu[i]!).toFixed(0) : '-',
  ];
});
const header = ['command', 'median wall ms', '× node -e 0', 'median CPU ms'];
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
process.stdout.write(
  [
    `recognition-core start-up, ${opts.runs} runs each, medians (Node ${process.version})`,
    '',
    line(header),
    line(widths.map((w) => '-'.repeat(w))),
    ...rows.map(line),
    '',
  ].join('\n'),
);
const help = median(wall[1]!) / base;
process.stdout.write(
  `--help: ${help.toFixed(2)}× node -e 0 (target: at most 3×)${help <= 3 ? '' : ': OVER'}\n`,
);
