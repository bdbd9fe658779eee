/**
 * A loopback TCP proxy that delays every chunk by a settable time in each direction, order kept:
 * a slow network to PostgreSQL without touching PostgreSQL (the `slow-db` scenario).
 */
import { connect, createServer, type Server, type Socket } from 'node:net';

/** A running delay proxy. */
export interface DelayProxy {
  readonly port: number;
  /** The delay added to each chunk, each way (ms). */
  delayMs(): number;
  setDelay(ms: number): void;
  close(): Promise<void>;
}

/** Copy `from` to `to`, each chunk `delay()` ms after it arrived, never overtaking an earlier chunk. */
function delayedPipe(from: Socket, to: Socket, delay: () => number): void {
  let lastDue = 0;
  from.on('data', (chunk: Buffer) => {
    const due = Math.max(Date.now() + delay(), lastDue);
    lastDue = due;
    const wait = due - Date.now();
    const write = () => {
      if (!to.destroyed) to.write(chunk);
    };
    if (wait <= 0) write();
    else setTimeout(write, wait);
  });
  from.on('end', () => setTimeout(() => to.end(), Math.max(0, lastDue - Date.now())));
}

/** Start a proxy on a free 127.0.0.1 port to `127.0.0.1:targetPort`, with no delay at first. */
export function startDelayProxy(targetPort: number): Promise<DelayProxy> {
  let delay = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer({ noDelay: true }, (client) => {
    const upstream = connect({ host: '127.0.0.1', port: targetPort, noDelay: true });
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.once('close', () => {
        sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    delayedPipe(client, upstream, () => delay);
    delayedPipe(upstream, client, () => delay);
  });
  server.on('error', () => undefined);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: '127.0.0.1', port: 0 }, () => {
      const address = server.address();
      if (address === null || typeof address === 'string') {
        reject(new Error('delay proxy: no port'));
        return;
      }
      resolve({
        port: address.port,
        delayMs: () => delay,
        setDelay(ms) {
          delay = ms;
        },
        close() {
          for (const s of sockets) s.destroy();
          return new Promise((r) => server.close(() => r()));
        },
      });
    });
  });
}
