/**
 * The `cli` section: `recognition-core --help` beside a bare `node -e 0`, each `runs` times after an
 * untimed run, in turns so a busy machine slows both alike, in a clean environment; each its median.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { median } from './env.js';

export const CLI_LABELS = { node: 'node -e 0', help: 'recognition-core --help' } as const;
/** Each command line's median wall time, by its role in {@link CLI_LABELS}. */
export type CliResult = ReturnType<typeof measureCliStartup>;

const CLI = fileURLToPath(new URL('../../bin/recognition-core.js', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export function measureCliStartup(runs: number) {
  const cases = [['node', ['-e', '0']] as const, ['help', [CLI, '--help']] as const];
  const env = { PATH: process.env['PATH'] ?? '/usr/bin:/bin', HOME: process.env['HOME'] ?? '/tmp' };
  const once = ([role, args]: (typeof cases)[number]) => {
    const start = performance.now();
    const r = spawnSync(process.execPath, args, { cwd: ROOT, env, stdio: ['ignore', 'ignore', 'pipe'] });
    if (r.status !== 0) throw new Error(`${CLI_LABELS[role]}: exit ${r.status}: ${String(r.stderr).trim()}`);
    return performance.now() - start;
  };
  cases.forEach(once);
  const times = cases.map(() => [] as number[]);
  for (let round = 0; round < runs; round++) cases.forEach((c, i) => times[i]!.push(once(c)));
  const wall = (i: number) => ({ label: CLI_LABELS[cases[i]![0]], wallMs: median(times[i]!, Number) });
  return { runs, commands: { node: wall(0), help: wall(1) } };
}
