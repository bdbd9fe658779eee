/**
 * Entry point of the bench's child processes (CPU and memory are measured alone in a fresh
 * process): `node dist/bench/child.js cpu <events>` or `… memory <n1,n2,…>`; prints one JSON line.
 */
import { measureCpu } from './cpu.js';
import { measureMemory } from './memory.js';

const [what, arg] = process.argv.slice(2);
if (what === 'cpu') {
  process.stdout.write(JSON.stringify(measureCpu(Number(arg))) + '\n');
} else if (what === 'memory') {
  process.stdout.write(JSON.stringify(measureMemory(String(arg).split(',').map(Number))) + '\n');
} else {
  process.stderr.write('usage: child.js cpu <events> | memory <n1,n2,...>\n');
  process.exit(2);
}
