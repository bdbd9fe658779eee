/**
 * The quarantine as the operator console reads it: counts by reason and service, and the held
 * messages newest first with a bounded payload preview. The service is the one the message names
 * (`"service": {"name": …}` in its payload), read from the stored bytes: nothing decodes JSON a
 * message may have broken. Reads only.
 */
import { sql, type Kysely } from 'kysely';
import type { QuarantineReason } from '../../machines/index.js';
import type { Database } from './schema.js';

/** The service a stored payload names, or null: a pattern over its bytes as text, never a JSON parse. */
const SERVICE_OF = sql<string | null>`substring(encode(q.payload, 'escape')
  from '"service"\\s*:\\s*\\{[^{}]*"name"\\s*:\\s*"([A-Za-z0-9_-]{1,100})"')`;

/** How many messages are held, by reason and the service they name. */
export async function quarantineGroups(
  db: Kysely<Database>,
): Promise<Array<{ reason: QuarantineReason; service: string | null; count: number }>> {
  const { rows } = await sql<{ reason: QuarantineReason; service: string | null; n: number }>`
    SELECT q.reason, ${SERVICE_OF} AS service, count(*)::int AS n
    FROM inbox_quarantine q GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2`.execute(db);
  return rows.map((r) => ({ reason: r.reason, service: r.service, count: r.n }));
}

/** A held message as listed: its row, the service it names, the first bytes of its payload. */
export interface QuarantinedMessage {
  id: string;
  receivedAt: Date;
  reason: QuarantineReason;
  service: string | null;
  subject: string;
  streamSeq: string | null;
  msgId: string | null;
  jobId: string | null;
  details: unknown;
  headers: Record<string, string[]>;
  /** The payload's first `previewBytes` bytes, as UTF-8 (a cut character shows as U+FFFD). */
  preview: string;
  payloadBytes: number;
  replayedAt: Date | null;
  replayOutcome: string | null;
}

/** Which held messages {@link listQuarantine} reads, newest first. */
export interface QuarantineListFilter {
  reason?: QuarantineReason | undefined;
  service?: string | undefined;
  /** Only messages older than this id (the next page). */
  beforeId?: string | undefined;
  limit: number;
  previewBytes: number;
}

/** Held messages newest first (by id: the primary key, or the (reason, id) index with a reason). */
export async function listQuarantine(
  db: Kysely<Database>,
  f: QuarantineListFilter,
): Promise<QuarantinedMessage[]> {
  const reason = f.reason !== undefined ? sql`AND q.reason = ${f.reason}` : sql``;
  const service = f.service !== undefined ? sql`AND ${SERVICE_OF} = ${f.service}` : sql``;
  const before = f.beforeId !== undefined ? sql`AND q.id < ${f.beforeId}::bigint` : sql``;
  const { rows } = await sql<{
    id: string;
    received_at: Date;
    reason: QuarantineReason;
    service: string | null;
    subject: string;
    stream_seq: string | null;
    msg_id: string | null;
    job_id: string | null;
    details: unknown;
    headers: Record<string, string[]>;
    preview: Buffer;
    payload_bytes: number;
    replayed_at: Date | null;
    replay_outcome: string | null;
  }>`
    SELECT q.id, q.received_at, q.reason, ${SERVICE_OF} AS service, q.subject, q.stream_seq, q.msg_id,
           q.job_id, q.details, q.headers, substring(q.payload FROM 1 FOR ${f.previewBytes}::int) AS preview,
           octet_length(q.payload) AS payload_bytes, q.replayed_at, q.replay_outcome
    FROM inbox_quarantine q
    WHERE true ${reason} ${service} ${before}
    ORDER BY q.id DESC LIMIT ${f.limit}::int`.execute(db);
  return rows.map((r) => ({
    id: r.id,
    receivedAt: r.received_at,
    reason: r.reason,
    service: r.service,
    subject: r.subject,
    streamSeq: r.stream_seq,
    msgId: r.msg_id,
    jobId: r.job_id,
    details: r.details,
    headers: r.headers,
    preview: Buffer.from(r.preview).toString('utf8'),
    payloadBytes: r.payload_bytes,
    replayedAt: r.replayed_at,
    replayOutcome: r.replay_outcome,
  }));
}
