/**
 * The bridge to the Stately inspector: a local inspection server (`@statelyai/inspect/server`)
 * and an inspector (`@statelyai/inspect`) that sends it a run of the lifecycle machine, as the
 * inspector's own actor/event/snapshot events. A developer opens the server's page in a browser;
 * that page embeds the hosted inspector (https://stately.ai/inspect) and relays every event the
 * server holds (the last 200), so it may be opened before or after the run.
 *
 * Why not `createWebSocketInspector`: it gives no way to know when the events have left the
 * process (a command would have to sleep before exiting), and it re-sends its whole buffer on every
 * reconnection. The adapter here is the same wire protocol (one JSON inspection event per WebSocket
 * message) with a `flush()` that resolves once the server has read every event.
 */
import { createServer } from 'node:net';
import { createInspector, type StatelyInspectionEvent } from '@statelyai/inspect';
import { createInspectorServer } from '@statelyai/inspect/server';
import type { ActorRefLike } from 'xstate';
import WebSocket from 'ws';
import { UsageError } from '../errors.js';
import { readMachineGraph } from './machineGraph.js';
import { statelyConfig } from './render.js';

/** Not 8080: that is the daemon's default HTTP_PORT, and a developer often runs both. */
export const DEFAULT_INSPECT_PORT = 8090;
/** The hosted inspector the local page embeds. */
export const HOSTED_INSPECTOR_URL = 'https://stately.ai/inspect';
/** How long to wait for the local server to accept connections after it was started. */
const CONNECT_TIMEOUT_MS = 5_000;

/** A run of the machine: where it starts, then each event and the snapshot it led to. */
export interface InspectionRun {
  /** Shown by the inspector as the actor's id (e.g. the job id). */
  sessionId: string;
  start: { value: string; context: Record<string, unknown> };
  steps: Array<{ event: { type: string } & Record<string, unknown>; value: string; context: Record<string, unknown> }>;
}

export interface InspectorSession {
  port: number;
  /** The page a developer opens in a browser. */
  pageUrl: string;
  /** The WebSocket the page (and any other client) connects to. */
  wsUrl: string;
  /** Send a run; resolves with the number of inspection events once the server has read them all. */
  send(run: InspectionRun): Promise<number>;
  close(): Promise<void>;
}

function assertPortFree(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        new UsageError(
          err.code === 'EADDRINUSE'
            ? `port ${port} is in use: pass --inspect-port <port> to run the inspector server elsewhere`
            : `cannot listen on port ${port}: ${err.message}`,
        ),
      ),
    );
    probe.listen(port, () => probe.close(() => resolve()));
  });
}

async function connect(url: string): Promise<WebSocket> {
  const deadline = Date.now() + CONNECT_TIMEOUT_MS;
  for (;;) {
    try {
      return await new Promise<WebSocket>((resolve, reject) => {
        const ws = new WebSocket(url);
        ws.once('open', () => resolve(ws));
        ws.once('error', reject);
      });
    } catch (err) {
      // The server was just started and may not listen yet.
      if (Date.now() > deadline) throw new Error(`the inspector server at ${url} did not accept a connection`, { cause: err });
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

/**
 * Start the local inspector server on `port` and connect an inspector to it. The caller prints
 * `pageUrl` and closes the session when done.
 */
export async function startInspection(opts: { port?: number } = {}): Promise<InspectorSession> {
  const port = opts.port ?? DEFAULT_INSPECT_PORT;
  await assertPortFree(port);
  const server = createInspectorServer({ port, url: HOSTED_INSPECTOR_URL, autoOpen: false });
  const wsUrl = `ws://localhost:${port}`;
  let ws: WebSocket;
  try {
    ws = await connect(wsUrl);
  } catch (err) {
    server.stop();
    throw err;
  }
  let pending: Array<Promise<void>> = [];
  const inspector = createInspector({
    send(event: StatelyInspectionEvent) {
      pending.push(new Promise<void>((resolve, reject) => ws.send(JSON.stringify(event), (err) => (err ? reject(err) : resolve()))));
    },
  });
  const definition = statelyConfig(readMachineGraph());

  /** A ping answered means the server has read every frame sent before it (frames are ordered). */
  const roundTrip = () =>
    new Promise<void>((resolve) => {
      ws.once('pong', () => resolve());
      ws.ping();
    });

  return {
    port,
    pageUrl: `http://localhost:${port}`,
    wsUrl,
    async send(run) {
      // The inspector reads the definition from `actorRef.logic.config`, as for a live actor.
      const actorRef = { sessionId: run.sessionId, id: run.sessionId, logic: { config: definition } } as unknown as ActorRefLike;
      let count = 0;
      inspector.actor(actorRef, { status: 'active', value: run.start.value, context: run.start.context });
      count++;
      for (const s of run.steps) {
        inspector.event(run.sessionId, s.event);
        inspector.snapshot(run.sessionId, { status: 'active', value: s.value, context: s.context }, { event: s.event });
        count += 2;
      }
      const sent = pending;
      pending = [];
      await Promise.all(sent);
      await roundTrip();
      return count;
    },
    async close() {
      await new Promise<void>((resolve) => {
        if (ws.readyState === WebSocket.CLOSED) return resolve();
        ws.once('close', () => resolve());
        ws.close();
        setTimeout(() => {
          ws.terminate();
          resolve();
        }, 1_000).unref();
      });
      server.stop();
    },
  };
}

/** How a developer opens the inspector, for the command's output. */
export function inspectorInstructions(session: InspectorSession): string {
  return [
    `Stately inspector: open ${session.pageUrl} in a browser.`,
    `  That page is served by the local inspector server; it embeds the hosted inspector (${HOSTED_INSPECTOR_URL},`,
    `  which needs internet access) and relays the events the server holds on ${session.wsUrl}.`,
  ].join('\n');
}

/** Keep the process alive until Ctrl-C (SIGINT) or SIGTERM. */
export function waitForSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const done = (signal: NodeJS.Signals) => {
      process.off('SIGINT', done);
      process.off('SIGTERM', done);
      resolve(signal);
    };
    process.on('SIGINT', done);
    process.on('SIGTERM', done);
  });
}
