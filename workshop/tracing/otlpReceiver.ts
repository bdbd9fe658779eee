/**
 * A small OTLP/HTTP trace receiver on this machine: `POST /v1/traces` with an OTLP JSON body
 * (gzip or not), decoded into flat spans kept in memory. It is the endpoint the real exporter sends
 * to in the tests and in `demo --trace`; not a collector (no protobuf, no retries, no storage).
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';

/** A span as received, with the resource's `service.name`. Ids are lowercase hex. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** Absent for a root span. */
  parentSpanId: string | undefined;
  name: string;
  kind: 'internal' | 'server' | 'client' | 'producer' | 'consumer' | 'unspecified';
  serviceName: string;
  startTimeUnixNano: bigint;
  endTimeUnixNano: bigint;
  attributes: Record<string, unknown>;
  links: Array<{ traceId: string; spanId: string }>;
  /** 0 unset, 1 ok, 2 error. */
  statusCode: number;
}

export interface OtlpReceiver {
  /** The base URL (`OTEL_EXPORTER_OTLP_ENDPOINT`), e.g. `http://127.0.0.1:43181`. */
  url: string;
  /** The traces URL (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`): `url` + `/v1/traces`. */
  tracesUrl: string;
  /** Every span received so far, in arrival order. */
  spans(): ReceivedSpan[];
  /** Export requests received (bodies that decoded). */
  requests(): number;
  /** Resolves with the spans once `pred` holds for them; rejects after `timeoutMs`. */
  waitFor(pred: (spans: ReceivedSpan[]) => boolean, timeoutMs?: number): Promise<ReceivedSpan[]>;
  close(): Promise<void>;
}

/** The largest export body accepted: far above the exporter's batches, bounded against a runaway. */
const MAX_BODY_BYTES = 32 * 1024 * 1024;

const KINDS: ReceivedSpan['kind'][] = ['unspecified', 'internal', 'server', 'client', 'producer', 'consumer'];

interface AnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: number | string;
  doubleValue?: number;
  arrayValue?: { values?: AnyValue[] };
}
interface KeyValue {
  key: string;
  value?: AnyValue;
}

function valueOf(v: AnyValue | undefined): unknown {
  if (!v) return undefined;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.arrayValue) return (v.arrayValue.values ?? []).map(valueOf);
  return undefined;
}

function attributesOf(kvs: KeyValue[] | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const kv of kvs ?? []) out[kv.key] = valueOf(kv.value);
  return out;
}

/** OTLP JSON ids are hex; an encoder that sends base64 (the protobuf JSON mapping) is read too. */
function idOf(v: unknown, bytes: number): string {
  if (typeof v !== 'string' || v === '') return '';
  if (new RegExp(`^[0-9a-fA-F]{${bytes * 2}}$`).test(v)) return v.toLowerCase();
  return Buffer.from(v, 'base64').toString('hex');
}

/** Decode one OTLP JSON `ExportTraceServiceRequest` into flat spans. */
export function decodeOtlpJson(body: unknown): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  const resourceSpans = (body as { resourceSpans?: unknown[] }).resourceSpans ?? [];
  for (const rs of resourceSpans as Array<{
    resource?: { attributes?: KeyValue[] };
    scopeSpans?: Array<{ spans?: Array<Record<string, unknown>> }>;
  }>) {
    const resource = attributesOf(rs.resource?.attributes);
    const serviceName = typeof resource['service.name'] === 'string' ? resource['service.name'] : '';
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        const parent = idOf(s.parentSpanId, 8);
        out.push({
          traceId: idOf(s.traceId, 16),
          spanId: idOf(s.spanId, 8),
          parentSpanId: parent || undefined,
          name: String(s.name ?? ''),
          kind: KINDS[Number(s.kind ?? 0)] ?? 'unspecified',
          serviceName,
          startTimeUnixNano: BigInt(String(s.startTimeUnixNano ?? 0)),
          endTimeUnixNano: BigInt(String(s.endTimeUnixNano ?? 0)),
          attributes: attributesOf(s.attributes as KeyValue[] | undefined),
          links: ((s.links as Array<{ traceId?: unknown; spanId?: unknown }> | undefined) ?? []).map((l) => ({
            traceId: idOf(l.traceId, 16),
            spanId: idOf(l.spanId, 8),
          })),
          statusCode: Number((s.status as { code?: unknown } | undefined)?.code ?? 0),
        });
      }
    }
  }
  return out;
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY_BYTES) {
        reject(new Error('body too large'));
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

/** Start a receiver on `host` (default 127.0.0.1) and a free port. */
export async function startOtlpReceiver(opts: { host?: string } = {}): Promise<OtlpReceiver> {
  const received: ReceivedSpan[] = [];
  let requests = 0;
  const waiters = new Set<() => void>();
  const answer = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  const server = createServer((req, res) => {
    if (req.method !== 'POST' || req.url?.split('?')[0] !== '/v1/traces') {
      answer(res, 404, { message: 'only POST /v1/traces' });
      return;
    }
    if (!String(req.headers['content-type'] ?? '').startsWith('application/json')) {
      answer(res, 415, { message: 'OTLP JSON only (application/json)' });
      return;
    }
    readBody(req).then(
      (raw) => {
        try {
          const text = (req.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw).toString('utf8');
          received.push(...decodeOtlpJson(JSON.parse(text)));
          requests += 1;
          answer(res, 200, {});
          for (const wake of [...waiters]) wake();
        } catch (err) {
          answer(res, 400, { message: (err as Error).message });
        }
      },
      (err: Error) => answer(res, 413, { message: err.message }),
    );
  });
  const host = opts.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const url = `http://${host}:${port}`;
  return {
    url,
    tracesUrl: `${url}/v1/traces`,
    spans: () => [...received],
    requests: () => requests,
    waitFor(pred, timeoutMs = 20_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (!pred(received)) return;
          clearTimeout(timer);
          waiters.delete(check);
          resolve([...received]);
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(
            new Error(`OTLP receiver: condition not met within ${timeoutMs} ms (${received.length} spans)`),
          );
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * One trace's spans as an indented tree (children by start time), one line per span:
 * `name  [service] kind  job=…  (links: n)`. Spans whose parent was not received are roots.
 */
export function renderSpanTree(spans: readonly ReceivedSpan[], traceId: string): string {
  const mine = spans.filter((s) => s.traceId === traceId);
  const ids = new Set(mine.map((s) => s.spanId));
  const children = new Map<string | undefined, ReceivedSpan[]>();
  for (const s of mine) {
    const key = s.parentSpanId && ids.has(s.parentSpanId) ? s.parentSpanId : undefined;
    const list = children.get(key) ?? [];
    list.push(s);
    children.set(key, list);
  }
  const lines: string[] = [];
  const walk = (parent: string | undefined, depth: number) => {
    const list = (children.get(parent) ?? []).sort((a, b) =>
      a.startTimeUnixNano < b.startTimeUnixNano ? -1 : a.startTimeUnixNano > b.startTimeUnixNano ? 1 : 0,
    );
    for (const s of list) {
      const ms = Number(s.endTimeUnixNano - s.startTimeUnixNano) / 1e6;
      const extra = [
        s.attributes['recognition.step.decision']
          ? `decision=${String(s.attributes['recognition.step.decision'])}`
          : '',
        s.attributes['recognition.job.to'] ? `to=${String(s.attributes['recognition.job.to'])}` : '',
        s.links.length ? `links=${s.links.length}` : '',
        s.statusCode === 2 ? 'ERROR' : '',
      ]
        .filter(Boolean)
        .join(' ');
      lines.push(
        `${'  '.repeat(depth)}${s.name}  [${s.serviceName}, ${s.kind}, ${ms.toFixed(1)} ms]${extra ? `  ${extra}` : ''}`,
      );
      walk(s.spanId, depth + 1);
    }
  };
  walk(undefined, 0);
  return lines.join('\n');
}
