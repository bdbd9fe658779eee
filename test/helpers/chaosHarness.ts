/**
 * The built chaos harness (`dist/test/chaos/run.js`, which `npm test` builds first), run as a child
 * process by the integration tests that take its short runs into `npm test`.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** Where the built harness is; a test checks it exists before running it. */
export const CHAOS_HARNESS = fileURLToPath(new URL('../../dist/test/chaos/run.js', import.meta.url));

/**
 * Run the harness with `args` and collect its stdout and stderr. After `timeoutMs` it is sent
 * SIGINT, so it stops its servers and reports what it has rather than being cut off.
 */
export function runChaosHarness(
  args: string[],
  timeoutMs: number,
): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CHAOS_HARNESS, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (output += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (output += c));
    const timer = setTimeout(() => child.kill('SIGINT'), timeoutMs);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}
