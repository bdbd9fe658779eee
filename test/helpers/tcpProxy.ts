import { connect, createServer, type Socket } from 'node:net';

/** Where {@link startTcpProxy} forwards connections to. */
export interface TcpProxyTarget {
  host: string;
  port: number;
}

/** A loopback TCP proxy started by {@link startTcpProxy}. */
export interface TcpProxy {
  /** Always `127.0.0.1`. */
  readonly host: string;
  /** Loopback port the proxy listens on; point the client at `127.0.0.1:<port>`. */
  readonly port: number;
  /** The target connections are forwarded to. */
  readonly target: TcpProxyTarget;
  /** Whether the proxy is cut (see {@link TcpProxy.cut}). */
  isCut(): boolean;
  /** Number of client connections currently being forwarded. */
  connectionCount(): number;
  /**
   * Makes the target unreachable: resets (RST) every current client connection and its upstream connection,
   * and resets every new client connection as soon as it is accepted, until {@link TcpProxy.restore}.
   * Idempotent.
   */
  cut(): void;
  /** Forwards new connections again. Idempotent. Connections destroyed by `cut()` stay gone. */
  restore(): void;
  /** Destroys every connection and stops listening; resolves once the listener is closed. */
  close(): Promise<void>;
}

function reset(socket: Socket): void {
  if (socket.destroyed) return;
  // resetAndDestroy() sends an RST when the socket is connected; fall back to destroy() otherwise.
  try {
    socket.resetAndDestroy();
  } catch {
    socket.destroy();
  }
}

/**
 * Starts a node:net TCP proxy on a free 127.0.0.1 port forwarding to `target`, used to make a service (e.g.
 * PostgreSQL or NATS) unreachable for the code under test and reachable again.
 *
 * Contract:
 * - Resolves once listening. Each accepted client connection gets its own upstream connection to `target`; bytes
 *   are piped both ways; when either side ends or errors, both are torn down.
 * - If the upstream connection fails, the client connection is reset.
 * - While cut, accepted client connections are reset at once (the client sees ECONNRESET / an immediate close,
 *   as it would against an unreachable service; the TCP handshake itself still completes).
 * - Socket errors are swallowed: they never surface as uncaught 'error' events in the test process.
 */
export function startTcpProxy(target: TcpProxyTarget): Promise<TcpProxy> {
  const pairs = new Set<{ client: Socket; upstream: Socket }>();
  let cut = false;

  const server = createServer({ noDelay: true }, (client) => {
    client.on('error', () => undefined);
    if (cut) {
      reset(client);
      return;
    }
    const upstream = connect({ host: target.host, port: target.port, noDelay: true });
    upstream.on('error', () => undefined);
    const pair = { client, upstream };
    pairs.add(pair);
    const teardown = (): void => {
      if (!pairs.delete(pair)) return;
      reset(client);
      reset(upstream);
    };
    client.once('close', teardown);
    upstream.once('close', teardown);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  server.on('error', () => undefined);

  return new Promise<TcpProxy>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: '127.0.0.1', port: 0 }, () => {
      server.off('error', reject);
      const address = server.address();
      if (address === null || typeof address === 'string') {
        server.close();
        reject(new Error(`startTcpProxy: unexpected listener address ${String(address)}`));
        return;
      }
      const destroyAll = (): void => {
        for (const pair of [...pairs]) {
          pairs.delete(pair);
          reset(pair.client);
          reset(pair.upstream);
        }
      };
      resolve({
        host: '127.0.0.1',
        port: address.port,
        target: { ...target },
        isCut: () => cut,
        connectionCount: () => pairs.size,
        cut() {
          cut = true;
          destroyAll();
        },
        restore() {
          cut = false;
        },
        close() {
          cut = true;
          destroyAll();
          return new Promise<void>((res) => {
            if (!server.listening) {
              res();
              return;
            }
            server.close(() => res());
          });
        },
      });
    });
  });
}
