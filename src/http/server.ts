/**
 * The daemon's HTTP endpoints: `/healthz` (the process is alive), `/readyz` (database reachable,
 * commits completing, NATS connected, consumer bound; a JSON body says which part is not and why),
 * `/metrics` (Prometheus text format) and any extra pages the daemon mounts (the live statechart).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import { redactUrl } from '../config.js';
import type { Logger } from '../logger.js';
import { sharedAnswer } from './shared.js';

/**
 * What a readiness check answers: `true` when that part works; `false`, or `{ ok: false, reason }`
 * to say why, when it does not.
 */
export type CheckAnswer = boolean | { ok: boolean; reason?: string };

/** Each readiness check, by name. A check that throws counts as failed, its error as the reason. */
export type ReadinessChecks = Record<string, () => Promise<CheckAnswer> | CheckAnswer>;

/** The answer of {@link readiness}: every check's verdict, and a reason for each failed one that gave one. */
export interface ReadinessReport {
  ready: boolean;
  checks: Record<string, boolean>;
  /** Only when a check failed: why, by check name. */
  reasons?: Record<string, string>;
}

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

/**
 * Scrapes within this time of a rendered /metrics body get that body: rendering it (the process
 * metrics included) costs milliseconds of the daemon's one thread, so a burst of scrapes costs
 * one render a second.
 */
export const METRICS_REUSE_MS = 1_000;

/** A check that does not answer within this time counts as failed, so /readyz never hangs. */
const CHECK_TIMEOUT_MS = 2_000;

async function runCheck(
  check: () => Promise<CheckAnswer> | CheckAnswer,
): Promise<{ ok: boolean; reason?: string }> {
  let timer: NodeJS.Timeout | undefined;
  try {
    const answer = await Promise.race([
      Promise.resolve().then(check),
      new Promise<CheckAnswer>((resolve) => {
        timer = setTimeout(
          () => resolve({ ok: false, reason: `no answer within ${CHECK_TIMEOUT_MS / 1000} s` }),
          CHECK_TIMEOUT_MS,
        );
      }),
    ]);
    return typeof answer === 'boolean' ? { ok: answer } : answer;
  } catch (err) {
    return { ok: false, reason: err instanceof Error ? err.message : String(err) };
  } finally {
    clearTimeout(timer);
  }
}

/** Evaluate every readiness check concurrently. */
export async function readiness(checks: ReadinessChecks): Promise<ReadinessReport> {
  const entries = await Promise.all(
    Object.entries(checks).map(async ([name, c]) => [name, await runCheck(c)] as const),
  );
  const report: ReadinessReport = {
    ready: entries.every(([, r]) => r.ok),
    checks: Object.fromEntries(entries.map(([name, r]) => [name, r.ok])),
  };
  const reasons = entries.filter(([, r]) => !r.ok && r.reason !== undefined);
  // The body is served without authentication: a reason never carries a password.
  if (reasons.length > 0)
    report.reasons = Object.fromEntries(reasons.map(([name, r]) => [name, redactUrl(r.reason!)]));
  return report;
}

function send(res: ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' });
  res.end(body);
}

/** Start listening; resolves with the bound port (HTTP_PORT=0 picks a free one). */
export async function startHttpServer(opts: HttpOptions): Promise<HttpServer> {
  const metricsBody = sharedAnswer(() => opts.registry.metrics(), METRICS_REUSE_MS);
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
        if (path === '/metrics') return send(res, 200, opts.registry.contentType, await metricsBody());
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
  return listening(server, opts.host, opts.port);
}

/**
 * `server` listening on `host`:`port` (0: a free port), with its bound port and a close that ends
 * every connection, so a stop never waits for an idle keep-alive.
 */
export async function listening(server: Server, host: string, port: number): Promise<HttpServer> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  return {
    server,
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
