/**
 * The NATS connection: credentials and TLS from the configuration, reconnecting forever (the loops
 * pause meanwhile and readiness goes red), and a live `connected` flag for /readyz.
 */
import { readFileSync } from 'node:fs';
import { credsAuthenticator, type NatsConnection } from '@nats-io/nats-core';
import { connect, type NodeConnectionOptions } from '@nats-io/transport-node';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';

type NatsConfig = Pick<
  Config,
  | 'NATS_URL'
  | 'NATS_USER'
  | 'NATS_PASSWORD'
  | 'NATS_TOKEN'
  | 'NATS_CREDS'
  | 'NATS_TLS_CA'
  | 'NATS_TLS_CERT'
  | 'NATS_TLS_KEY'
>;

/** A connection and whether it is up right now. */
export interface Nats {
  nc: NatsConnection;
  isConnected(): boolean;
  /**
   * Call `listener` each time the client has reconnected (after the reconnect is logged), so a
   * loop that waits for NATS resumes at once. Returns the function that removes it.
   */
  onReconnect(listener: () => void): () => void;
}

/** Connection options from the configuration (exported for tests). */
export function natsOptions(cfg: NatsConfig, name: string): NodeConnectionOptions {
  // The client ignores credentials written inside server URLs (nats://user:pass@host, or
  // nats://token@host): take them out of the URLs, and use them unless NATS_USER/NATS_TOKEN is set.
  let urlAuth: { user: string; pass: string } | undefined;
  const servers = cfg.NATS_URL.split(',').map((s) => {
    const u = new URL(s.trim());
    if (!u.username) return s.trim();
    urlAuth ??= { user: decodeURIComponent(u.username), pass: decodeURIComponent(u.password) };
    u.username = '';
    u.password = '';
    return u.toString();
  });
  const opts: NodeConnectionOptions = {
    servers,
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
    waitOnFirstConnect: false,
    // Detect a dead server within seconds, so readiness goes red promptly.
    pingInterval: 5_000,
    maxPingOut: 2,
  };
  if (cfg.NATS_USER) {
    opts.user = cfg.NATS_USER;
    opts.pass = cfg.NATS_PASSWORD;
  }
  if (cfg.NATS_TOKEN) opts.token = cfg.NATS_TOKEN;
  if (urlAuth && !cfg.NATS_USER && !cfg.NATS_TOKEN) {
    if (urlAuth.pass) {
      opts.user = urlAuth.user;
      opts.pass = urlAuth.pass;
    } else {
      opts.token = urlAuth.user;
    }
  }
  if (cfg.NATS_CREDS) opts.authenticator = credsAuthenticator(readFileSync(cfg.NATS_CREDS));
  if (cfg.NATS_TLS_CA || cfg.NATS_TLS_CERT) {
    opts.tls = {
      ...(cfg.NATS_TLS_CA ? { caFile: cfg.NATS_TLS_CA } : {}),
      ...(cfg.NATS_TLS_CERT ? { certFile: cfg.NATS_TLS_CERT, keyFile: cfg.NATS_TLS_KEY } : {}),
    };
  }
  return opts;
}

/**
 * The reason a first connection failed, as an operator should read it: the client's message, plus
 * a hint where the client cannot know the cause. A server that requires client certificates
 * (mutual TLS) refuses the handshake only after it completed on the client's side (TLS 1.3), so
 * the client sees nothing but its connect timing out.
 */
export function connectFailureReason(cfg: NatsConfig, err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  if (cfg.NATS_TLS_CA && !cfg.NATS_TLS_CERT && /timeout/i.test(message)) {
    return `${message} (TLS is on without a client certificate: if the server requires one, set NATS_TLS_CERT and NATS_TLS_KEY)`;
  }
  return message;
}

/**
 * Connect to NATS. The first connection must succeed (a wrong URL or credentials end the start
 * with a clear error); afterwards the client reconnects forever and the status is logged.
 * `name`: the connection's name as the server shows it (`recognition-core` unless given);
 * `inboxPrefix`: where replies arrive (`_INBOX` unless given), for a user allowed only its own.
 */
export async function connectNats(
  cfg: NatsConfig,
  logger: Logger,
  { name = 'recognition-core', inboxPrefix }: { name?: string; inboxPrefix?: string } = {},
): Promise<Nats> {
  const nc = await connect({ ...natsOptions(cfg, name), ...(inboxPrefix ? { inboxPrefix } : {}) });
  let connected = true;
  const reconnectListeners = new Set<() => void>();
  void (async () => {
    for await (const s of nc.status()) {
      switch (s.type) {
        case 'disconnect':
          connected = false;
          logger.warn({ event: 'nats_disconnected', server: s.server }, 'NATS disconnected; reconnecting');
          break;
        case 'reconnect':
          connected = true;
          logger.info({ event: 'nats_reconnected', server: s.server }, 'NATS reconnected');
          for (const listener of reconnectListeners) listener();
          break;
        case 'error':
          logger.warn({ event: 'nats_error', err: s.error }, 'NATS error');
          break;
        default:
          break;
      }
    }
  })();
  void nc.closed().then(() => {
    connected = false;
  });
  return {
    nc,
    isConnected: () => connected && !nc.isClosed(),
    onReconnect(listener) {
      reconnectListeners.add(listener);
      return () => reconnectListeners.delete(listener);
    },
  };
}
