/**
 * The bridge to the Stately inspector: a local inspection server (`@statelyai/inspect/server`'s,
 * listening on loopback only) and an inspector that sends it a run of the lifecycle machine. Its
 * `flush()` resolves once the server has read every event, so a command can exit without sleeping
 * (docs/development.md, "Why the loops are built as they are").
 */
import { createServer } from 'node:http';
import { createInspector, type StatelyInspectionEvent } from '@statelyai/inspect';
import type { ActorRefLike } from 'xstate';
import WebSocket, { WebSocketServer } from 'ws';
import { UsageError } from '../errors.js';
import { readMachineGraph } from './machineGraph.js';
import { statelyConfig } from './render.js';
import { DEFAULT_INSPECT_PORT } from './inspectorDefaults.js';

export { DEFAULT_INSPECT_PORT } from './inspectorDefaults.js';
/** The hosted inspector the local page embeds. */
export const HOSTED_INSPECTOR_URL = 'https://stately.ai/inspect';

/** A run of the machine: where it starts, then each event and the snapshot it led to. */
export interface InspectionRun {
  /** Shown by the inspector as the actor's id (e.g. the job id). */
  sessionId: string;
  start: { value: string; context: Record<string, unknown> };
  steps: Array<{
    event: { type: string } & Record<string, unknown>;
    value: string;
    context: Record<string, unknown>;
  }>;
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

/** The only interface the inspection server listens on. */
export const INSPECT_HOST = '127.0.0.1';
/** Events the server holds for a page opened later (as `createInspectorServer`). */
const HELD_EVENTS = 200;

/**
 * The page: the hosted inspector in an iframe, fed every event the server relays. The page of
 * `@statelyai/inspect/server` 0.7 (MIT), which does not export it, with the address passed in.
 */
function bridgePage(wsUrl: string): string {
  return `<!DOCTYPE html>
<html>
<head>
  <title>Stately Inspector</title>
  <style>
    * { margin: 0; padding: 0; }
    html, body { height: 100%; }
    iframe { width: 100%; height: 100%; border: none; }
  </style>
</head>
<body>
  <iframe id="inspector" src="${HOSTED_INSPECTOR_URL}"></iframe>
  <script>
    const iframe = document.getElementById('inspector');
    const buffer = [];
    let connected = false;
    window.addEventListener('message', (e) => {
      if (e.data && e.data.type === '@statelyai.connected') {
        connected = true;
        buffer.forEach((event) => iframe.contentWindow.postMessage(event, '*'));
        buffer.length = 0;
      }
    });
    const ws = new WebSocket(${JSON.stringify(wsUrl)});
    ws.onmessage = (event) => {
      const data = JSON.parse(event.data);
      if (connected) iframe.contentWindow.postMessage(data, '*');
      else buffer.push(data);
    };
  </script>
</body>
</html>`;
}

/**
 * Start the inspection server on `INSPECT_HOST:port`: the page, and a relay that sends a new
 * client the events it holds, then every event another client sends; a browser page of another
 * origin is refused. A port in use is a usage error.
 */
async function startInspectionServer(port: number, wsUrl: string): Promise<{ stop(): Promise<void> }> {
  const page = bridgePage(wsUrl);
  const http = createServer((_req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/html' });
    res.end(page);
  });
  await new Promise<void>((resolve, reject) => {
    http.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        new UsageError(
          err.code === 'EADDRINUSE'
            ? `port ${port} is in use: pass --inspect-port <port> to run the inspector server elsewhere`
            : `cannot listen on ${INSPECT_HOST}:${port}: ${err.message}`,
        ),
      ),
    );
    http.listen(port, INSPECT_HOST, () => resolve());
  });
  // Attached once listening: the WebSocket server re-emits the HTTP server's errors as its own.
  // Browsers send their page's origin: only this server's own page may connect, not any site the
  // developer happens to have open (programs, like the inspector below, send no origin).
  const ownPage = new Set([`http://${INSPECT_HOST}:${port}`, `http://localhost:${port}`]);
  const wss = new WebSocketServer({
    server: http,
    verifyClient: ({ origin }: { origin?: string }) => !origin || ownPage.has(origin),
  });
  const held: string[] = [];
  wss.on('connection', (client) => {
    for (const msg of held) client.send(msg);
    client.on('message', (data) => {
      const msg = data.toString();
      held.push(msg);
      if (held.length > HELD_EVENTS) held.shift();
      for (const other of wss.clients)
        if (other !== client && other.readyState === WebSocket.OPEN) other.send(msg);
    });
  });
  return {
    stop: () =>
      new Promise<void>((resolve) => {
        for (const c of wss.clients) c.terminate();
        wss.close();
        http.close(() => resolve());
      }),
  };
}

/** The inspector's own connection to the server (listening by now). */
function connect(url: string): Promise<WebSocket> {
  return new Promise<WebSocket>((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.once('open', () => resolve(ws));
    ws.once('error', (err) =>
      reject(new Error(`the inspector server at ${url} did not accept a connection`, { cause: err })),
    );
  });
}

/**
 * Start the local inspector server on `port` and connect an inspector to it. The caller prints
 * `pageUrl` and closes the session when done.
 */
export async function startInspection(opts: { port?: number } = {}): Promise<InspectorSession> {
  const port = opts.port ?? DEFAULT_INSPECT_PORT;
  const wsUrl = `ws://${INSPECT_HOST}:${port}`;
  const server = await startInspectionServer(port, wsUrl);
  let ws: WebSocket;
  try {
    ws = await connect(wsUrl);
  } catch (err) {
    await server.stop();
    throw err;
  }
  let pending: Array<Promise<void>> = [];
  const inspector = createInspector({
    send(event: StatelyInspectionEvent) {
      pending.push(
        new Promise<void>((resolve, reject) =>
          ws.send(JSON.stringify(event), (err) => (err ? reject(err) : resolve())),
        ),
      );
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
    pageUrl: `http://${INSPECT_HOST}:${port}`,
    wsUrl,
    async send(run) {
      // The inspector reads the definition from `actorRef.logic.config`, as for a live actor.
      const actorRef = {
        sessionId: run.sessionId,
        id: run.sessionId,
        logic: { config: definition },
      } as unknown as ActorRefLike;
      let count = 0;
      inspector.actor(actorRef, { status: 'active', value: run.start.value, context: run.start.context });
      count++;
      for (const s of run.steps) {
        inspector.event(run.sessionId, s.event);
        inspector.snapshot(
          run.sessionId,
          { status: 'active', value: s.value, context: s.context },
          { event: s.event },
        );
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
      await server.stop();
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
