import { connect, createServer } from 'node:net';

/**
 * Returns a TCP port that was free on 127.0.0.1 a moment ago.
 *
 * Contract: binds a listener to `127.0.0.1:0`, reads the port the kernel chose, closes the listener and
 * resolves with that port once it is closed. The port is NOT reserved afterwards: another process could take
 * it before the caller binds it (a small race that tests accept). Rejects if the listener cannot be opened.
 */
export function freePort(): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen({ host: '127.0.0.1', port: 0, exclusive: true }, () => {
      const address = server.address();
      if (address === null || typeof address === 'string') {
        server.close();
        reject(new Error(`freePort: unexpected listener address ${String(address)}`));
        return;
      }
      const { port } = address;
      server.close((err) => (err ? reject(err) : resolve(port)));
    });
  });
}

/** Whether 127.0.0.1:`port` accepts a TCP connection within a second: a server started on it is up. */
export function acceptsTcp(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
    socket.setTimeout(1_000, () => done(false));
  });
}
