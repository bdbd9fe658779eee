/**
 * The stop-signal rule every long-running command follows (`src/process/stopSignals.ts`), in a
 * real child process: the first SIGTERM or SIGINT starts a graceful stop that may finish (exit 0);
 * a second signal, or a graceful stop past its bound, exits 1 at once.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const BUILT = fileURLToPath(new URL('../../dist/src/process/stopSignals.js', import.meta.url));

/**
 * A process that listens for stop signals, prints `ready`, and on the first signal prints
 * `stopping <signal>` and runs `graceful` (a JavaScript statement; awaited).
 */
function child(graceful: string, options = '{}') {
  const script = `
    import { withStopSignals } from ${JSON.stringify(BUILT)};
    const opts = ${options};
    await withStopSignals({ ...opts, onForcedExit: (why) => console.log('forced', JSON.stringify(why)) }, async (stop) => {
      // Signal listeners keep no process alive: a timer stands for the command's open sockets.
      const busy = setInterval(() => {}, 1000);
      console.log('ready');
      const signal = await stop.received;
      clearInterval(busy);
      console.log('stopping', signal, stop.signal.aborted);
      ${graceful};
    });
    console.log('stopped');
  `;
  const proc = spawn(process.execPath, ['--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: string[] = [];
  const waiters: Array<{ text: string; resolve: () => void }> = [];
  let buffer = '';
  proc.stdout.setEncoding('utf8');
  proc.stdout.on('data', (chunk: string) => {
    buffer += chunk;
    let nl: number;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      lines.push(line);
      for (const w of waiters.filter((w) => line.startsWith(w.text))) w.resolve();
    }
  });
  const exited = new Promise<number | null>((resolve) => proc.once('close', (code) => resolve(code)));
  const printed = (text: string) =>
    lines.some((l) => l.startsWith(text))
      ? Promise.resolve()
      : new Promise<void>((resolve) => waiters.push({ text, resolve }));
  return { proc, lines, exited, printed };
}

describe('stop signals', () => {
  it('the first signal stops gracefully: the work finishes and the process exits 0', async () => {
    const c = child(`await new Promise((r) => setTimeout(r, 50))`);
    await c.printed('ready');
    c.proc.kill('SIGTERM');
    expect(await c.exited).toBe(0);
    expect(c.lines).toEqual(['ready', 'stopping SIGTERM true', 'stopped']);
  });

  it('a second signal during the graceful stop exits 1 at once', async () => {
    const c = child(`await new Promise(() => setInterval(() => {}, 1000))`);
    await c.printed('ready');
    c.proc.kill('SIGINT');
    await c.printed('stopping');
    c.proc.kill('SIGINT');
    expect(await c.exited).toBe(1);
    expect(c.lines).toEqual(['ready', 'stopping SIGINT true', 'forced {"signal":"SIGINT"}']);
  });

  it('a graceful stop past forceAfterMs exits 1', async () => {
    const c = child(`await new Promise(() => setInterval(() => {}, 1000))`, '{ forceAfterMs: 200 }');
    await c.printed('ready');
    c.proc.kill('SIGTERM');
    expect(await c.exited).toBe(1);
    expect(c.lines).toEqual(['ready', 'stopping SIGTERM true', 'forced {"timeoutMs":200}']);
  });
});
