/**
 * An in-process daemon for integration tests: real PostgreSQL (the test's database), a real
 * nats-server (the test's own), configuration through the same `loadConfig` as production.
 */
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { loadConfig } from '../../src/config.js';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../../src/nats/subjects.js';
import { startDaemon, type Daemon, type DaemonOptions } from '../../src/daemon/daemon.js';
import { createLogSink, type LogSink } from './logSink.js';

export interface TestDaemon extends Daemon {
  logs: LogSink;
}

/** What {@link startTestDaemon} runs on and with; `loops` defaults to the inbox alone. */
export interface TestDaemonOptions {
  databaseUrl: string;
  natsUrl: string;
  env?: Record<string, string>;
  loops?: DaemonOptions['loops'];
  beforeInboxBatch?: DaemonOptions['beforeInboxBatch'];
  afterInboxCommit?: DaemonOptions['afterInboxCommit'];
  /** Where the daemon logs: a sink of the test's own, to read while the start is still running. */
  logs?: LogSink;
}

export async function startTestDaemon(opts: TestDaemonOptions): Promise<TestDaemon> {
  const config = loadConfig({
    DATABASE_URL: opts.databaseUrl,
    NATS_URL: opts.natsUrl,
    HTTP_PORT: '0',
    HTTP_HOST: '127.0.0.1',
    LOG_LEVEL: 'debug',
    ...opts.env,
  });
  const logs = opts.logs ?? createLogSink();
  const daemon = await startDaemon({
    config,
    logger: logs.logger,
    loops: opts.loops ?? { inbox: true, watchdog: false, publisher: false, deadLetters: false, http: false },
    beforeInboxBatch: opts.beforeInboxBatch,
    afterInboxCommit: opts.afterInboxCommit,
  });
  return Object.assign(daemon, { logs });
}

/** Poll `check` until it returns a truthy value or `timeoutMs` passes (then throw with `what`). */
export async function waitFor<T>(
  check: () => Promise<T> | T,
  what: string,
  timeoutMs = 20_000,
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v) return v as NonNullable<T>;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Wait until `core-inbox` has acked every message published to the results stream so far. */
export async function inboxDrained(nc: NatsConnection, timeoutMs = 20_000): Promise<void> {
  const jsm = await jetstreamManager(nc);
  const target = (await jsm.streams.info(RESULTS_STREAM)).state.last_seq;
  await waitFor(
    async () => {
      const info = await jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER);
      return info.ack_floor.stream_seq >= target && info.num_ack_pending === 0;
    },
    'core-inbox to ack every message',
    timeoutMs,
  );
}
