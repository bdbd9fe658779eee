/**
 * How long the `recognition-core` command takes before it does anything, beside a bare
 * `node -e 0` on the same machine; and `jobs list --limit 1` against the bench's database beside
 * a small Node program that opens the same client (kysely and pg) and reads one row.
 *
 * Each command line runs `runs` times after one untimed run, the command lines taking turns so
 * that a busy machine slows them alike; each is reported as its median wall time and its median
 * CPU time (user + system, from /proc; Linux only).
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** One command line's medians. */
export interface CliCommand {
  label: string;
  wallMs: number;
  cpuMs: number | null;
}

/** The section's result: each command line's medians, by its role in {@link CLI_LABELS}. */
export interface CliResult {
  runs: number;
  commands: Record<keyof typeof CLI_LABELS, CliCommand>;
}

/** The command lines, by the role the report gives each. */
export const CLI_LABELS = {
  node: 'node -e 0',
  help: 'recognition-core --help',
  client: 'node: kysely + pg, one row',
  list: 'recognition-core jobs list --limit 1',
} as const;

const CLI = fileURLToPath(new URL('../../bin/recognition-core.js', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** CPU ms of this process's waited-for children so far (cutime + cstime), or null without /proc. */
function childrenCpuMs(): number | null {
  try {
    const stat = readFileSync('/proc/self/stat', 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[13]) + Number(fields[14])) * 1000) / 100;
  } catch {
    return null;
  }
}

const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Measure every command line `runs` times, in turns. */
export function measureCliStartup(databaseUrl: string, runs: number): CliResult {
  const smallProgram = `
    import { Kysely, PostgresDialect, sql } from 'kysely';
    import pg from 'pg';
    const db = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2 }) }) });
    await sql\`SELECT id FROM recognition_job LIMIT 1\`.execute(db);
    await db.destroy();`;
  const cases: Array<[role: keyof typeof CLI_LABELS, args: string[]]> = [
    ['node', ['-e', '0']],
    ['help', [CLI, '--help']],
    ['client', ['--input-type=module', '-e', smallProgram]],
    ['list', [CLI, 'jobs', 'list', '--limit', '1']],
  ];
  // A clean environment; the small program resolves kysely and pg from the package's root.
  const env = {
    PATH: process.env['PATH'] ?? '/usr/bin:/bin',
    HOME: process.env['HOME'] ?? '/tmp',
    DATABASE_URL: databaseUrl,
  };
  const once = ([role, args]: (typeof cases)[number]) => {
    const cpu0 = childrenCpuMs();
    const start = performance.now();
    const r = spawnSync(process.execPath, args, { cwd: ROOT, env, stdio: ['ignore', 'ignore', 'pipe'] });
    const wallMs = performance.now() - start;
    const cpu1 = childrenCpuMs();
    if (r.status !== 0) throw new Error(`${CLI_LABELS[role]}: exit ${r.status}: ${String(r.stderr).trim()}`);
    return { wallMs, cpuMs: cpu0 === null || cpu1 === null ? null : cpu1 - cpu0 };
  };
  cases.forEach(once);
  const times = cases.map(() => [] as Array<ReturnType<typeof once>>);
  for (let round = 0; round < runs; round++) cases.forEach((c, i) => times[i]!.push(once(c)));
  const medians = cases.map(([role], i): [string, CliCommand] => {
    const cpu = times[i]!.map((t) => t.cpuMs);
    const wallMs = median(times[i]!.map((t) => t.wallMs));
    return [
      role,
      { label: CLI_LABELS[role], wallMs, cpuMs: cpu.includes(null) ? null : median(cpu as number[]) },
    ];
  });
  return { runs, commands: Object.fromEntries(medians) as CliResult['commands'] };
}
