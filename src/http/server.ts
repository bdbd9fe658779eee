/**
 * The daemon's HTTP endpoints: `/healthz` (the process is alive), `/readyz` (database reachable,
 * NATS connected, consumer bound; a JSON body says which part is not), `/metrics` (Prometheus
 * text format) and any extra pages the daemon mounts (the live statechart).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import type { Logger } from '../logger.js';

/** Each readiness check: true when that part works. */
export type ReadinessChecks = Record<string, () => Promise<boolean> | boolean>;

export type RouteHandler = (req: IncomingMessage, res: ServerResponse) => Promise<void> | void;

export interface HttpOptions {
  host: string;
  port: number;
  logger: Logger;
  registry: Registry;
  readiness: ReadinessChecks;
  routes?: Record<string, RouteHandler>;
}

export interface HttpServer {
  server: Server;
  port: number;
  close(): Promise<void>;
}

/** A check that does not answer within this time counts as failed, so /readyz never hangs. */
const CHECK_TIMEOUT_MS = 2_000;

async function runCheck(check: () => Promise<boolean> | boolean): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      Promise.resolve().then(check),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), CHECK_TIMEOUT_MS);
      }),
    ]);
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
}

/** Evaluate every readiness check concurrently. */
export async function readiness(
  checks: ReadinessChecks,
): Promise<{ ready: boolean; checks: Record<string, boolean> }> {
  const entries = await Promise.all(
    Object.entries(checks).map(async ([name, c]) => [name, await runCheck(c)] as const),
  );
  const result = Object.fromEntries(entries);
  return { ready: entries.every(([, ok]) => ok), checks: result };
}

function send(res: ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' });
  res.end(body);
}

/** Start listening; resolves with the bound port (HTTP_PORT=0 picks a free one). */
export async function startHttpServer(opts: HttpOptions): Promise<HttpServer> {
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    void (async () => {
      try {
        if (req.method !== 'GET' && req.method !== 'HEAD')
          return send(res, 405, 'text/plain', 'method not allowed\n');
        if (path === '/healthz') return send(res, 200, 'application/json', '{"status":"ok"}\n');
        if (path === '/readyz') {
          const r = await readiness(opts.readiness);
          return send(res, r.ready ? 200 : 503, 'application/json', JSON.stringify(r) + '\n');
        }
        if (path === '/metrics')
          return send(res, 200, opts.registry.contentType, await opts.registry.metrics());
        const route = opts.routes?.[path];
        if (route) return await route(req, res);
        return send(res, 404, 'text/plain', 'not found\n');
      } catch (err) {
        opts.logger.error({ err, path }, 'HTTP handler failed');
        if (!res.headersSent) send(res, 500, 'text/plain', 'internal error\n');
        else res.end();
      }
    })();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    server,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
