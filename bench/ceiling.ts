/**
 * The inbox's ceiling: the best hand-written consumer of `core-inbox` for this workload, doing the
 * same database work as the inbox and nothing else — no XState, no schema validation, no
 * quarantine, no logging, no metrics.
 *
 * Design:
 *   1. one `consume()` loop on the durable consumer (several concurrent `fetch()` loops on one
 *      consumer slow nats-server 2.9 down; one `consume()` does not), fanning out in-process;
 *   2. envelopes gather into batches of at most {@link CeilingOptions.batchSize}; a batch that is
 *      not full leaves {@link CeilingOptions.lingerMs} after its first envelope arrived;
 *   3. up to {@link CeilingOptions.inFlight} batch transactions at once, each on its own pooled
 *      connection: BEGIN, one prepared set-based statement ({@link CEILING_SQL}), COMMIT;
 *   4. ack the batch's envelopes after its commit.
 *
 * The statement does what the inbox's step does for a result: lock the jobs that are not final
 * and do not carry the envelope's msg id yet (in id order), register the result objects, update
 * the jobs and their current files, and append one transition row each with the same detail (the
 * audit row). The bench checks that a run of it leaves the same rows as a run of the inbox.
 *
 * It assumes what the bench publishes: well-formed results, one per job. It keeps no per-job
 * order across batches in flight, which the inbox must (a job's envelopes always in stream
 * order): a ceiling need not pay for guarantees, so the inbox can be read against it.
 */
import type { ConsumerMessages, JetStreamClient, JsMsg } from '@nats-io/jetstream';
import type pg from 'pg';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../src/nats/subjects.js';
import type { ResultEnvelope } from '../src/messages/schemas.js';

/** What {@link startCeiling} needs. */
export interface CeilingOptions {
  pool: pg.Pool;
  js: JetStreamClient;
  /** Envelopes per batch transaction, at most. */
  batchSize: number;
  /** How long a batch that is not full waits for more envelopes, from its first one. */
  lingerMs: number;
  /** Batch transactions in flight, at most. */
  inFlight: number;
}

/** The design's parameters, as measured by the bench. */
export const CEILING = { batchSize: 100, lingerMs: 2, inFlight: 4 } as const;
/** The ceiling's row in the bench's report. */
export const CEILING_NAME = `ceiling: one consume(), batches of ≤ ${CEILING.batchSize} or ${CEILING.lingerMs} ms, ${CEILING.inFlight} in flight`;

/** A running ceiling consumer. */
export interface Ceiling {
  /** Stop consuming and wait for the batches in flight. */
  stop(): Promise<void>;
}

/** The bench publishes results only (`done`, `needs_check`, `error`), never acks. */
type Result = ResultEnvelope;

/**
 * One batch of results: $1…$11 are arrays with one element per envelope. The detail of the
 * transition row is the machine's for a result (status, service, error code when there is one).
 */
export const CEILING_SQL = `
  WITH input AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                         $7::jsonb[], $8::text[], $9::text[], $10::text[], $11::text[])
      AS v(job_id, msg_id, status, service_name, service_version, schema_version, metrics,
           bucket, key, error_code, error_message)
  ),
  locked AS (
    SELECT j.id, j.status AS from_status, j.file_id, i.*
    FROM input i JOIN recognition_job j ON j.id = i.job_id
    WHERE j.status NOT IN ('done', 'needs_check', 'error', 'timeout', 'dlq')
      AND j.result_msg_id IS DISTINCT FROM i.msg_id
    ORDER BY j.id
    FOR UPDATE OF j
  ),
  obj AS (
    INSERT INTO s3_object (bucket, key, bucket_role, created_by)
    SELECT l.bucket, l.key, 'results', l.service_name FROM locked l WHERE l.bucket IS NOT NULL
    ON CONFLICT (bucket, key) DO UPDATE SET bucket = EXCLUDED.bucket
    RETURNING id, bucket, key
  ),
  job AS (
    UPDATE recognition_job j
    SET status = l.status, service_name = l.service_name, service_version = l.service_version,
        finished_at = date_trunc('milliseconds', now()), metrics = l.metrics,
        error_code = l.error_code, error_message = l.error_message,
        result_schema_version = l.schema_version, result_s3_object_id = obj.id,
        result_msg_id = l.msg_id, next_publish_at = NULL, updated_at = now()
    FROM locked l LEFT JOIN obj ON obj.bucket = l.bucket AND obj.key = l.key
    WHERE j.id = l.id
  ),
  file AS (
    UPDATE stored_file f
    SET status = CASE l.status WHEN 'error' THEN 'ERROR' ELSE 'PROCESSING' END,
        error_code = l.error_code, updated_at = now()
    FROM locked l
    WHERE f.id = l.file_id AND f.current_recognition_job_id = l.id
      AND (f.status, f.error_code) IS DISTINCT FROM
          (CASE l.status WHEN 'error' THEN 'ERROR' ELSE 'PROCESSING' END, l.error_code)
  ),
  log AS (
    INSERT INTO recognition_job_transition (job_id, from_status, to_status, event, msg_id, detail)
    SELECT l.id, l.from_status, l.status, 'ENVELOPE_RESULT', l.msg_id,
           jsonb_build_object('status', l.status, 'service', l.service_name)
             || CASE WHEN l.error_code IS NULL THEN '{}'::jsonb
                     ELSE jsonb_build_object('error_code', l.error_code) END
    FROM locked l
  )
  SELECT count(*)::integer AS applied FROM locked`;

/** The statement's name: prepared once per connection. */
const STATEMENT_NAME = 'bench_ceiling_batch';

function parametersOf(msgs: readonly JsMsg[], envelopes: readonly Result[]): unknown[] {
  const columns: unknown[][] = Array.from({ length: 11 }, () => []);
  for (const [i, m] of msgs.entries()) {
    const r = envelopes[i]!;
    const row = [
      r.job_id,
      m.headers?.get('Nats-Msg-Id') ?? '',
      r.status,
      r.service.name,
      r.service.version,
      r.result_schema_version ?? null,
      r.metrics ? JSON.stringify(r.metrics) : null,
      r.result_s3?.bucket ?? null,
      r.result_s3?.key ?? null,
      r.error?.code ?? null,
      r.error?.message ?? null,
    ];
    row.forEach((v, i) => columns[i]!.push(v));
  }
  return columns;
}

/** BEGIN, the statement, COMMIT; then ack. A failed batch is nak'd. */
async function applyBatch(pool: pg.Pool, msgs: readonly JsMsg[]): Promise<void> {
  const envelopes = msgs.map((m) => m.json<Result>());
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const values = parametersOf(msgs, envelopes);
    await client.query({ name: STATEMENT_NAME, text: CEILING_SQL, values });
    await client.query('COMMIT');
    client.release();
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    client.release();
    throw err;
  }
  for (const m of msgs) m.ack();
}

/** Start consuming `core-inbox` with the ceiling's design. */
export async function startCeiling(opts: CeilingOptions): Promise<Ceiling> {
  const consumer = await opts.js.consumers.get(RESULTS_STREAM, INBOX_CONSUMER);
  // Enough buffered for every batch in flight and as many more gathering.
  const maxBuffered = opts.batchSize * opts.inFlight * 2;
  const messages: ConsumerMessages = await consumer.consume({ max_messages: maxBuffered });
  const ready: JsMsg[][] = [];
  const running = new Set<Promise<void>>();
  let gathering: JsMsg[] = [];
  let timer: NodeJS.Timeout | undefined;
  let held = 0;
  let wakeReader: (() => void) | undefined;

  /** Start ready batches while fewer than `inFlight` run. */
  const pump = () => {
    while (ready.length > 0 && running.size < opts.inFlight) {
      const batch = ready.shift()!;
      const p = applyBatch(opts.pool, batch)
        .catch(() => batch.forEach((m) => m.nak(250)))
        .finally(() => {
          running.delete(p);
          held -= batch.length;
          pump();
          wakeReader?.();
        });
      running.add(p);
    }
  };
  const close = () => {
    if (timer) clearTimeout(timer);
    timer = undefined;
    if (gathering.length === 0) return;
    ready.push(gathering);
    gathering = [];
    pump();
  };

  const loop = (async () => {
    for await (const m of messages) {
      gathering.push(m);
      held++;
      if (gathering.length >= opts.batchSize) close();
      else timer ??= setTimeout(close, opts.lingerMs);
      // Back-pressure: no more than `maxBuffered` envelopes received and not yet acked.
      while (held >= maxBuffered) await new Promise<void>((resolve) => (wakeReader = resolve));
    }
    close();
    await Promise.all(running);
  })();

  return {
    async stop() {
      await messages.close();
      close();
      await loop;
      while (running.size > 0 || ready.length > 0) {
        pump();
        await Promise.all(running);
      }
    },
  };
}
