/**
 * The raw ceiling: a minimal hand-written consumer of `core-inbox` that runs the same statements as
 * the inbox and nothing else — no XState, no schema validation, no quarantine, no logging, no
 * metrics. It is what "the speed of the database" means for this workload on this machine.
 *
 * Per envelope, inside one transaction: lock the job (`SELECT … FOR UPDATE`), register the result
 * object (`INSERT … ON CONFLICT` into `s3_object`), update the job, update its file (guarded by
 * `current_recognition_job_id`), insert the transition. Commit, then ack.
 *
 * Two modes:
 * - `message`: one transaction per envelope, `inFlight` envelopes at once (a semaphore over
 *   `consume()`), each on its own pooled connection;
 * - `batch`: fetch `batchSize` envelopes, apply them in one transaction with one multi-row
 *   statement per kind (`unnest` arrays), commit, ack them all, fetch the next batch. Fetching and
 *   applying take turns: that is the simple design the daemon has to beat.
 *
 * It assumes well-formed `done`/`needs_check`/`error` results (the bench publishes only those);
 * a job already final or carrying the same msg id is skipped, as the machine would.
 */
import type { Consumer, JetStreamClient, JsMsg } from '@nats-io/jetstream';
import type pg from 'pg';
import { inPgTransaction } from '../src/db/pgTransaction.js';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../src/nats/subjects.js';
import type { ResultEnvelope } from '../src/messages/schemas.js';

/** What {@link startRawConsumer} needs. */
export interface RawConsumerOptions {
  pool: pg.Pool;
  js: JetStreamClient;
  mode: 'message' | 'batch';
  /** `message` mode: transactions in flight. */
  inFlight: number;
  /** `batch` mode: envelopes fetched and applied per transaction. */
  batchSize: number;
}

/** A running raw consumer. */
export interface RawConsumer {
  /** Stop pulling and wait for the transactions in flight. */
  stop(): Promise<void>;
}

/** The bench publishes results only (`done`, `needs_check`, `error`), never acks. */
type Envelope = ResultEnvelope;

const FINAL = new Set(['done', 'needs_check', 'error', 'timeout', 'dlq']);

function parse(m: JsMsg): { env: Envelope; msgId: string } {
  return { env: m.json<Envelope>(), msgId: m.headers?.get('Nats-Msg-Id') ?? '' };
}

/** One envelope, one transaction. */
async function applyOne(pool: pg.Pool, m: JsMsg): Promise<void> {
  const { env, msgId } = parse(m);
  await inPgTransaction(pool, async (client: pg.PoolClient) => {
    const { rows } = await client.query<{ status: string; result_msg_id: string | null; file_id: string }>(
      'SELECT status, result_msg_id, file_id FROM recognition_job WHERE id = $1 FOR UPDATE',
      [env.job_id],
    );
    const job = rows[0];
    if (job && !FINAL.has(job.status) && job.result_msg_id !== msgId) {
      let objectId: string | null = null;
      if (env.result_s3) {
        const o = await client.query<{ id: string }>(
          `INSERT INTO s3_object (bucket, key, bucket_role, created_by) VALUES ($1, $2, 'results', $3)
           ON CONFLICT (bucket, key) DO UPDATE SET bucket = EXCLUDED.bucket RETURNING id`,
          [env.result_s3.bucket, env.result_s3.key, env.service.name],
        );
        objectId = o.rows[0]!.id;
      }
      await client.query(
        `UPDATE recognition_job SET status = $2, service_name = $3, service_version = $4, finished_at = now(),
           metrics = $5, error_code = $6, error_message = $7, result_schema_version = $8,
           result_s3_object_id = $9, result_msg_id = $10, next_publish_at = NULL, updated_at = now()
         WHERE id = $1`,
        [
          env.job_id,
          env.status,
          env.service.name,
          env.service.version,
          env.metrics ? JSON.stringify(env.metrics) : null,
          env.error?.code ?? null,
          env.error?.message ?? null,
          env.result_schema_version ?? null,
          objectId,
          msgId,
        ],
      );
      const fileStatus = env.status === 'error' ? 'ERROR' : 'PROCESSING';
      await client.query(
        `UPDATE stored_file SET status = $3, error_code = $4, updated_at = now()
         WHERE id = $1 AND current_recognition_job_id = $2 AND (status, error_code) IS DISTINCT FROM ($3, $4)`,
        [job.file_id, env.job_id, fileStatus, env.error?.code ?? null],
      );
      await client.query(
        `INSERT INTO recognition_job_transition (job_id, from_status, to_status, event, msg_id)
         VALUES ($1, $2, $3, 'ENVELOPE_RESULT', $4)`,
        [env.job_id, job.status, env.status, msgId],
      );
    }
  });
  m.ack();
}

/** A fetched batch, one transaction, one multi-row statement per kind. */
async function applyBatch(pool: pg.Pool, msgs: JsMsg[]): Promise<void> {
  const items = msgs.map(parse);
  await inPgTransaction(pool, async (client: pg.PoolClient) => {
    const { rows } = await client.query<{
      id: string;
      status: string;
      result_msg_id: string | null;
      file_id: string;
    }>(
      // unnest drives the lookups through the primary key (with `id = ANY($1)` the planner may pick
      // a sequential scan on a small table): the same lock query form as the step's.
      `SELECT j.id, j.status, j.result_msg_id, j.file_id FROM unnest($1::uuid[]) AS k(id)
       JOIN recognition_job j ON j.id = k.id ORDER BY j.id FOR UPDATE OF j`,
      [[...new Set(items.map((i) => i.env.job_id))]],
    );
    const jobs = new Map(rows.map((r) => [r.id, r]));
    // One envelope per job in a batch here (the bench publishes one result per job).
    const apply = items.filter((i) => {
      const job = jobs.get(i.env.job_id);
      return job && !FINAL.has(job.status) && job.result_msg_id !== i.msgId;
    });
    if (apply.length > 0) {
      const withObject = apply.filter((i) => i.env.result_s3);
      const ids = new Map<string, string>();
      if (withObject.length > 0) {
        const o = await client.query<{ id: string; bucket: string; key: string }>(
          `INSERT INTO s3_object (bucket, key, bucket_role, created_by)
           SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[])
           ON CONFLICT (bucket, key) DO UPDATE SET bucket = EXCLUDED.bucket RETURNING id, bucket, key`,
          [
            withObject.map((i) => i.env.result_s3!.bucket),
            withObject.map((i) => i.env.result_s3!.key),
            withObject.map(() => 'results'),
            withObject.map((i) => i.env.service.name),
          ],
        );
        for (const r of o.rows) ids.set(`${r.bucket}/${r.key}`, r.id);
      }
      await client.query(
        `UPDATE recognition_job j SET status = v.status, service_name = v.sn, service_version = v.sv, finished_at = now(),
           metrics = v.metrics, error_code = v.ec, error_message = v.em, result_schema_version = v.rsv,
           result_s3_object_id = v.oid, result_msg_id = v.mid, next_publish_at = NULL, updated_at = now()
         FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::text[], $7::text[], $8::text[],
                     $9::bigint[], $10::text[]) AS v(id, status, sn, sv, metrics, ec, em, rsv, oid, mid)
         WHERE j.id = v.id`,
        [
          apply.map((i) => i.env.job_id),
          apply.map((i) => i.env.status),
          apply.map((i) => i.env.service.name),
          apply.map((i) => i.env.service.version),
          apply.map((i) => (i.env.metrics ? JSON.stringify(i.env.metrics) : null)),
          apply.map((i) => i.env.error?.code ?? null),
          apply.map((i) => i.env.error?.message ?? null),
          apply.map((i) => i.env.result_schema_version ?? null),
          apply.map((i) =>
            i.env.result_s3 ? (ids.get(`${i.env.result_s3.bucket}/${i.env.result_s3.key}`) ?? null) : null,
          ),
          apply.map((i) => i.msgId),
        ],
      );
      await client.query(
        `UPDATE stored_file f SET status = v.status, error_code = v.ec, updated_at = now()
         FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[]) AS v(file_id, job_id, status, ec)
         WHERE f.id = v.file_id AND f.current_recognition_job_id = v.job_id
           AND (f.status, f.error_code) IS DISTINCT FROM (v.status, v.ec)`,
        [
          apply.map((i) => jobs.get(i.env.job_id)!.file_id),
          apply.map((i) => i.env.job_id),
          apply.map((i) => (i.env.status === 'error' ? 'ERROR' : 'PROCESSING')),
          apply.map((i) => i.env.error?.code ?? null),
        ],
      );
      await client.query(
        `INSERT INTO recognition_job_transition (job_id, from_status, to_status, event, msg_id)
         SELECT v.job_id, v.from_status, v.to_status, 'ENVELOPE_RESULT', v.msg_id
         FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[]) AS v(job_id, from_status, to_status, msg_id)`,
        [
          apply.map((i) => i.env.job_id),
          apply.map((i) => jobs.get(i.env.job_id)!.status),
          apply.map((i) => i.env.status),
          apply.map((i) => i.msgId),
        ],
      );
    }
  });
  for (const m of msgs) m.ack();
}

/** Start consuming `core-inbox` in `opts.mode`. A failed transaction naks its envelopes. */
export async function startRawConsumer(opts: RawConsumerOptions): Promise<RawConsumer> {
  const consumer: Consumer = await opts.js.consumers.get(RESULTS_STREAM, INBOX_CONSUMER);
  let stopping = false;
  let stopPulling: (() => void) | undefined;

  async function runMessages(): Promise<void> {
    const messages = await consumer.consume({ max_messages: opts.inFlight * 25 });
    stopPulling = () => void messages.stop();
    const running = new Set<Promise<void>>();
    for await (const m of messages) {
      const p = applyOne(opts.pool, m).catch(() => m.nak(250));
      running.add(p);
      void p.then(() => running.delete(p));
      if (running.size >= opts.inFlight) await Promise.race(running);
      if (stopping) break;
    }
    await Promise.all(running);
  }

  async function runBatches(): Promise<void> {
    while (!stopping) {
      const msgs: JsMsg[] = [];
      const fetched = await consumer.fetch({ max_messages: opts.batchSize, expires: 1_000 });
      for await (const m of fetched) msgs.push(m);
      if (msgs.length === 0) continue;
      await applyBatch(opts.pool, msgs).catch(() => msgs.forEach((m) => m.nak(250)));
    }
  }

  const done = opts.mode === 'message' ? runMessages() : runBatches();
  return {
    async stop() {
      stopping = true;
      stopPulling?.();
      await done;
    },
  };
}
