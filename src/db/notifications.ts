/**
 * PostgreSQL `LISTEN` on a dedicated connection (built from the pool's settings) that comes back by
 * itself, with a growing delay. `onNotify` is called once after every recovery: notifications sent
 * while nobody listened are lost, so the listener assumes it missed some.
 */
import pg from 'pg';
import type { Logger } from '../logger.js';

/** First delay before reopening a dropped LISTEN connection; doubles up to the max. */
const RECONNECT_BASE_MS = 250;
/**
 * Longest delay between reconnection attempts: bounds how long the listener stays deaf after the
 * server comes back (the callers' polls cover the gap anyway) without hammering a server that is
 * still down.
 */
const RECONNECT_MAX_MS = 10_000;

export interface NotificationListenerOptions {
  /** Connection settings; a pool's `options` work as they are. */
  connection: pg.ClientConfig;
  /** The channel to LISTEN on (an identifier: letters, digits, underscores). */
  channel: string;
  /**
   * Called for every notification, and once whenever listening resumes after a failure
   * (`payload` undefined); not after a first connection that succeeded at once. Must not throw; it should only schedule work.
   */
  onNotify: (payload: string | undefined) => void;
  logger: Logger;
  /** Shown in `pg_stat_activity.application_name`. */
  applicationName?: string;
}

/** A running listener. */
export interface NotificationListener {
  /** Whether the LISTEN is established right now. */
  isListening(): boolean;
  /** Close the connection and stop reconnecting. Idempotent. */
  close(): Promise<void>;
}

/**
 * Start listening on `channel`. Never throws and never gives up: connection failures are logged at
 * warn and retried with a capped exponential backoff until {@link NotificationListener.close}.
 * Resolves once the first attempt has finished (listening or scheduled to retry).
 */
export async function listenForNotifications(
  opts: NotificationListenerOptions,
): Promise<NotificationListener> {
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(opts.channel))
    throw new Error(`invalid LISTEN channel: ${opts.channel}`);
  const log = opts.logger.child({ channel: opts.channel });
  let closed = false;
  let listening = false;
  let failures = 0;
  let everListened = false;
  let client: pg.Client | undefined;
  let timer: NodeJS.Timeout | undefined;

  const scheduleReconnect = () => {
    if (closed || timer) return;
    const delay = Math.min(RECONNECT_BASE_MS * 2 ** failures, RECONNECT_MAX_MS);
    failures += 1;
    timer = setTimeout(() => {
      timer = undefined;
      void connect();
    }, delay);
  };

  const dropped = (c: pg.Client, err?: Error) => {
    if (client !== c) return;
    client = undefined;
    listening = false;
    c.removeAllListeners('notification');
    void c.end().catch(() => undefined);
    if (closed) return;
    log.warn({ event: 'listen_dropped', err }, 'LISTEN connection dropped; reconnecting');
    scheduleReconnect();
  };

  async function connect(): Promise<void> {
    if (closed) return;
    // 1. Open a client of our own (never a pool connection: LISTEN is per session).
    const c = new pg.Client({
      ...opts.connection,
      application_name: opts.applicationName ?? opts.connection.application_name,
      keepAlive: true,
    });
    c.on('error', (err) => dropped(c, err));
    c.on('end', () => dropped(c));
    client = c;
    try {
      // 2. Connect and LISTEN.
      await c.connect();
      await c.query(`LISTEN ${opts.channel}`);
      if (closed || client !== c) {
        await c.end().catch(() => undefined);
        return;
      }
      // 3. Deliver notifications; after a reconnection, one wake-up for whatever was missed.
      c.on('notification', (n) => {
        if (n.channel === opts.channel) opts.onNotify(n.payload);
      });
      listening = true;
      // Deaf for a while (a drop, or a first connection that failed): say so once.
      const recovered = everListened || failures > 0;
      failures = 0;
      if (recovered) {
        log.info({ event: 'listen_restored' }, 'LISTEN connection restored');
        opts.onNotify(undefined);
      }
      everListened = true;
    } catch (err) {
      if (client === c) {
        client = undefined;
        void c.end().catch(() => undefined);
        if (!closed) {
          log.warn({ event: 'listen_failed', err }, 'could not LISTEN; retrying');
          scheduleReconnect();
        }
      }
    }
  }

  await connect();
  return {
    isListening: () => listening,
    async close() {
      closed = true;
      listening = false;
      if (timer) clearTimeout(timer);
      timer = undefined;
      const c = client;
      client = undefined;
      if (c) {
        c.removeAllListeners('notification');
        await c.end().catch(() => undefined);
      }
    },
  };
}
