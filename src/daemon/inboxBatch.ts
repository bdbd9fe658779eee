/**
 * A batch of inbox messages against the database, for the live inbox and the replays: valid
 * envelopes go through the step in stream order (the unlocked path first, then one locked
 * transaction); what is refused is written to `inbox_quarantine` in that transaction. The caller
 * acks after this returns and naks all when it throws (docs/development.md, "The inbox and the
 * replays").
 */
import type { Kysely } from 'kysely';
import { QUARANTINE_REASON, type QuarantineReason } from '../../machines/index.js';
import { inPgTransaction, type PgPool } from '../db/pgTransaction.js';
import type { Database } from '../db/schema.js';
import { InconsistencyError } from '../errors.js';
import { decodeEnvelope, type DecodeResult } from '../messages/decodeEnvelope.js';
import { envelopeToJobEvent, serviceMismatchDetails } from '../messages/envelopeToJobEvent.js';
import { QUARANTINE_PAYLOAD_MAX_BYTES_DEFAULT, quarantineRecord } from '../messages/quarantineRecord.js';
import type { ResultObjectRule } from '../messages/resultObject.js';
import {
  applyEvents,
  applyUnlocked,
  defineStatement,
  pgPoolStepSql,
  pgStepSql,
  stepSqlOf,
  type StepItem,
  type StepOutcome,
  type StepTransaction,
} from '../step/index.js';

/** A message as it came off the stream: everything quarantine keeps. */
export interface RawMessage {
  subject: string;
  stream: string | null;
  streamSeq: number | null;
  headers: Record<string, string[]>;
  data: Uint8Array;
}

/** A message with its decoding. */
export interface InboxItem {
  raw: RawMessage;
  decoded: DecodeResult;
}

/** What became of one message. */
export type InboxOutcome =
  | { kind: 'step'; outcome: StepOutcome; msgId: string | null }
  | {
      kind: 'quarantined';
      reason: QuarantineReason;
      /** As stored: bounded, U+0000 escaped (see `quarantineRecord`). */
      jobId: string | null;
      msgId: string | null;
      details: unknown;
      /** The `service.name` the message claims, when it can be read (not a checked name). */
      serviceName: string | null;
    };

/** How much of a message a quarantine row keeps. */
export interface QuarantineLimits {
  /** The longest payload prefix stored (`QUARANTINE_PAYLOAD_MAX_BYTES`). */
  payloadMaxBytes: number;
}

const DEFAULT_LIMITS: QuarantineLimits = { payloadMaxBytes: QUARANTINE_PAYLOAD_MAX_BYTES_DEFAULT };

/** The `Nats-Msg-Id` of a message, or undefined ('' counts as missing). */
export function msgIdOf(raw: RawMessage): string | undefined {
  const v = raw.headers['Nats-Msg-Id']?.[0];
  return v ? v : undefined;
}

/** Decode a raw message (pure; never throws). */
export function decodeItem(raw: RawMessage, maxBytes: number): InboxItem {
  return { raw, decoded: decodeEnvelope({ data: raw.data, msgId: msgIdOf(raw), maxBytes }) };
}

interface QuarantineInsert {
  raw: RawMessage;
  reason: QuarantineReason;
  jobId: string | null;
  msgId: string | null;
  details: unknown;
  serviceName: string | null;
}

/** A quarantine row made bounded and storable, with the outcome the caller logs and counts. */
interface QuarantineRow {
  raw: RawMessage;
  reason: QuarantineReason;
  record: ReturnType<typeof quarantineRecord>;
  outcome: Extract<InboxOutcome, { kind: 'quarantined' }>;
}

function quarantineRow(q: QuarantineInsert, limits: QuarantineLimits): QuarantineRow {
  const record = quarantineRecord({
    msgId: q.msgId,
    jobId: q.jobId,
    details: q.details,
    headers: q.raw.headers,
    data: q.raw.data,
    payloadMaxBytes: limits.payloadMaxBytes,
  });
  return {
    raw: q.raw,
    reason: q.reason,
    record,
    outcome: {
      kind: 'quarantined',
      reason: q.reason,
      jobId: record.jobId,
      msgId: record.msgId,
      details: record.details,
      serviceName: q.serviceName,
    },
  };
}

const QUARANTINE = defineStatement(
  'inbox_quarantine',
  `
  INSERT INTO inbox_quarantine (stream, stream_seq, subject, msg_id, job_id, reason, details, payload, headers)
  SELECT q.stream, q.stream_seq, q.subject, q.msg_id, q.job_id, q.reason, q.details,
         decode(q.payload, 'base64'), COALESCE(q.headers, '{}')
  FROM jsonb_to_recordset($1::jsonb) AS q(stream text, stream_seq bigint, subject text, msg_id text,
       job_id text, reason text, details jsonb, payload text, headers jsonb)
  ON CONFLICT (stream, stream_seq) WHERE stream_seq IS NOT NULL DO NOTHING`,
);

/**
 * Insert quarantine rows; a message already quarantined (same stream sequence) is not written
 * twice. Every row is in its bounded, storable form (`quarantineRecord`), so what a sender put in
 * a message cannot make the insert fail.
 */
async function quarantine(tx: StepTransaction, rows: QuarantineRow[]): Promise<void> {
  if (rows.length === 0) return;
  const json = JSON.stringify(
    rows.map((r) => ({
      stream: r.raw.stream,
      stream_seq: r.raw.streamSeq,
      subject: r.raw.subject,
      msg_id: r.record.msgId,
      job_id: r.record.jobId,
      reason: r.reason,
      details: r.record.details,
      payload: Buffer.from(
        r.record.payload.buffer,
        r.record.payload.byteOffset,
        r.record.payload.byteLength,
      ).toString('base64'),
      headers: r.record.headers,
    })),
  );
  await stepSqlOf(tx).query(QUARANTINE, [json]);
}

/**
 * Apply a batch inside the caller's transaction. Returns one outcome per item, in order.
 * Envelopes of unknown jobs (`UNKNOWN_JOB`), envelopes the machine rejects because they come
 * from a service other than the job's `target_service` (`SERVICE_MISMATCH`, both names in the
 * details) and results whose `result_s3` is not their job's own object (`RESULT_OBJECT_NOT_OWNED`,
 * checked against `rule`) are quarantined in the same transaction; the job is left as it was.
 */
export async function applyInboxBatch(
  tx: StepTransaction,
  items: readonly InboxItem[],
  rule: ResultObjectRule,
  limits: QuarantineLimits = DEFAULT_LIMITS,
): Promise<InboxOutcome[]> {
  const outcomes: InboxOutcome[] = new Array(items.length);
  const steps: StepItem[] = [];
  const stepIndex: number[] = [];
  const quarantined: QuarantineRow[] = [];
  const keep = (i: number, q: QuarantineInsert): void => {
    const row = quarantineRow(q, limits);
    quarantined.push(row);
    outcomes[i] = row.outcome;
  };
  items.forEach((item, i) => {
    const d = item.decoded;
    if (d.ok) {
      steps.push(envelopeToJobEvent(d.envelope, d.msgId));
      stepIndex.push(i);
    } else {
      keep(i, {
        raw: item.raw,
        reason: d.reason,
        jobId: d.jobId ?? null,
        msgId: d.msgId ?? null,
        details: d.details,
        serviceName: d.serviceName ?? null,
      });
    }
  });
  const stepped = await applyEvents(tx, steps, rule);
  stepped.forEach((outcome, n) => {
    const i = stepIndex[n]!;
    const item = items[i]!;
    const msgId = item.decoded.ok ? item.decoded.msgId : null;
    const serviceName = item.decoded.ok ? item.decoded.envelope.service.name : null;
    if (outcome.decision === 'unknown_job') {
      keep(i, {
        raw: item.raw,
        reason: QUARANTINE_REASON.UNKNOWN_JOB,
        jobId: outcome.jobId,
        msgId,
        details: { message: `no recognition_job with id ${outcome.jobId}` },
        serviceName,
      });
    } else if (outcome.decision === 'rejected' && item.decoded.ok) {
      keep(i, {
        raw: item.raw,
        reason: QUARANTINE_REASON.SERVICE_MISMATCH,
        jobId: outcome.jobId,
        msgId,
        details: serviceMismatchDetails(outcome.targetService, item.decoded.envelope.service.name),
        serviceName,
      });
    } else if (outcome.decision === 'object_not_owned') {
      keep(i, {
        raw: item.raw,
        reason: QUARANTINE_REASON.RESULT_OBJECT_NOT_OWNED,
        jobId: outcome.jobId,
        msgId,
        details: outcome.details,
        serviceName,
      });
    } else {
      outcomes[i] = { kind: 'step', outcome, msgId };
    }
  });
  await quarantine(tx, quarantined);
  return outcomes;
}

export type { PgPool, PgPoolClient } from '../db/pgTransaction.js';

function isKysely(db: Kysely<Database> | PgPool): db is Kysely<Database> {
  return typeof (db as Partial<Kysely<Database>>).transaction === 'function';
}

/** What {@link applyInboxBatchTx} reports besides its outcomes. */
export interface InboxBatchHooks {
  /**
   * The unlocked path met an inconsistency (its plan or its write's rows are not what they must
   * be); the batch goes through the locked path instead, which decides every envelope on its
   * locked row.
   */
  unlockedInconsistent?: (err: InconsistencyError) => void;
}

/** How {@link applyInboxBatchTx} bounds quarantine rows and what it reports besides its outcomes. */
export interface InboxBatchOptions {
  limits?: QuarantineLimits | undefined;
  hooks?: InboxBatchHooks;
}

/**
 * Apply a batch in its own transaction (committed when this resolves). On a pg pool the step's
 * statements are prepared and planned once per connection (named statements, generic plans);
 * through Kysely they are not.
 */
export async function applyInboxBatchTx(
  db: Kysely<Database> | PgPool,
  items: readonly InboxItem[],
  rule: ResultObjectRule,
  { limits = DEFAULT_LIMITS, hooks = {} }: InboxBatchOptions = {},
): Promise<InboxOutcome[]> {
  if (isKysely(db)) return db.transaction().execute((tx) => applyInboxBatch(tx, items, rule, limits));
  return (
    (await applyBatchUnlocked(db, items, rule, hooks)) ??
    inPgTransaction(db, (client) => applyInboxBatch(pgStepSql(client), items, rule, limits), {
      genericPlans: true,
    })
  );
}

/**
 * A batch of valid envelopes on the step's unlocked path: one statement instead of four (see
 * `applyUnlocked` in `src/step/`). `null` when the batch holds an invalid envelope, or the path
 * hands the work back (an unknown job, an envelope the machine rejects, or a result whose object
 * is not its job's, is quarantined by the transaction; a job not as its envelope assumes is
 * decided on its locked row; nothing is written then), or the path meets an inconsistency of its
 * own (reported to `hooks`); the locked path then decides the batch.
 */
async function applyBatchUnlocked(
  pool: PgPool,
  items: readonly InboxItem[],
  rule: ResultObjectRule,
  hooks: InboxBatchHooks,
): Promise<InboxOutcome[] | null> {
  try {
    const sent = sendUnlocked(pool, items, rule);
    if (!sent) return null;
    const outcomes = await sent.outcomes;
    return outcomes?.map((outcome, i) => ({ kind: 'step', outcome, msgId: sent.msgIds[i] ?? null })) ?? null;
  } catch (err) {
    // An inconsistency is this path's bug, never the batch's: the locked path decides it again.
    if (!(err instanceof InconsistencyError)) throw err;
    hooks.unlockedInconsistent?.(err);
    return null;
  }
}

/**
 * The batch's events handed to the unlocked path, which plans its write before a connection is
 * taken; null when the batch holds an invalid envelope. The events are garbage once this returns:
 * only the write's parameters and what the outcomes need wait for the write.
 */
function sendUnlocked(
  pool: PgPool,
  items: readonly InboxItem[],
  rule: ResultObjectRule,
): { outcomes: Promise<StepOutcome[] | null>; msgIds: Array<string | null> } | null {
  const steps: StepItem[] = [];
  const msgIds: Array<string | null> = [];
  for (const item of items) {
    if (!item.decoded.ok) return null;
    steps.push(envelopeToJobEvent(item.decoded.envelope, item.decoded.msgId));
    msgIds.push(item.decoded.msgId);
  }
  if (steps.length === 0) return null;
  return { outcomes: applyUnlocked(pgPoolStepSql(pool), steps, rule), msgIds };
}
