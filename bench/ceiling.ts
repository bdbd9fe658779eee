/**
 * The inbox's ceiling (bench/README.md, "ceiling"): the best hand-written consumer of `core-inbox`
 * for this workload, the step's database work for a result and nothing else, on well-formed results.
 * Run as a file (`DATABASE_URL`, `NATS_URL`) it is the ceiling as a process, consuming until SIGTERM.
 */
import { jetstream, type ConsumerMessages, type JetStreamClient, type JsMsg } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../src/nats/subjects.js';
import type { ResultEnvelope } from '../src/messages/schemas.js';
import { inPgTransaction } from '../src/db/pgTransaction.js';
import { applyV8Flags } from '../src/process/v8Flags.js';

/** Envelopes per batch at most; how long a batch not full waits from its first one; batches in flight. */
export const CEILING = { batchSize: 200, lingerMs: 2, inFlight: 4 } as const;
export const CEILING_NAME = `ceiling: one consume(), batches of ≤ ${CEILING.batchSize} or ${CEILING.lingerMs} ms, ${CEILING.inFlight} in flight`;
/** The `application_name` of the ceiling process's backends; the name of its prepared statement. */
export const CEILING_PROCESS_APPLICATION = 'bench-ceiling-process';
export const CEILING_STATEMENT = 'bench_ceiling_batch';

/** One batch: $1…$11 hold one element per envelope; the transition's detail is the machine's. */
export const CEILING_SQL = `
  WITH input AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[],
                         $8::text[], $9::text[], $10::text[], $11::text[])
      AS v(job_id, msg_id, status, service_name, service_version, schema_version, metrics, bucket, key,
           error_code, error_message)
  ),
  locked AS (
    SELECT j.id, j.status AS from_status, j.file_id, i.* FROM input i JOIN recognition_job j ON j.id = i.job_id
    WHERE j.status NOT IN ('done', 'needs_check', 'error', 'timeout', 'dlq')
      AND j.result_msg_id IS DISTINCT FROM i.msg_id
    ORDER BY j.id FOR UPDATE OF j
  ),
  obj AS (
    INSERT INTO s3_object (bucket, key, bucket_role, created_by)
    SELECT l.bucket, l.key, 'results', l.service_name FROM locked l WHERE l.bucket IS NOT NULL
    ON CONFLICT (bucket, key) DO UPDATE SET bucket = EXCLUDED.bucket RETURNING id, bucket, key
  ),
  job AS (
    UPDATE recognition_job j
    SET status = l.status, service_name = l.service_name, service_version = l.service_version,
        finished_at = date_trunc('milliseconds', now()), metrics = l.metrics, error_code = l.error_code,
        error_message = l.error_message, result_schema_version = l.schema_version,
        result_s3_object_id = obj.id,
        result_msg_id = l.msg_id, next_publish_at = NULL, updated_at = now()
    FROM locked l LEFT JOIN obj ON obj.bucket = l.bucket AND obj.key = l.key WHERE j.id = l.id
  ),
  file AS (
    UPDATE stored_file f
    SET status = CASE l.status WHEN 'error' THEN 'ERROR' ELSE 'PROCESSING' END, error_code = l.error_code,
        updated_at = now()
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

/** Called with a batch's job ids once it has committed (the latency section's clock). */
export type CeilingCommitHook = (jobIds: readonly string[]) => void;

/** {@link CEILING_SQL}'s parameters for a batch: empty arrays, one per parameter. */
export const ceilingParameters = (): unknown[][] => Array.from({ length: 11 }, () => []);

/** Add one result (as the bench publishes it) and its msg id to a batch's parameters. */
export function addCeilingResult(values: unknown[][], r: ResultEnvelope, msgId: string): void {
  const { service, result_s3: s3, error } = r;
  const metrics = r.metrics ? JSON.stringify(r.metrics) : null;
  const result = [r.job_id, msgId, r.status, service.name, service.version, r.result_schema_version ?? null];
  const rest = [metrics, s3?.bucket ?? null, s3?.key ?? null, error?.code ?? null, error?.message ?? null];
  [...result, ...rest].forEach((v, i) => values[i]!.push(v));
}

/**
 * Consume `core-inbox` with the ceiling's design on a pool of its own (10 connections, as the
 * daemon's, its backends named `applicationName`): batches BEGIN, {@link CEILING_SQL}, COMMIT, then
 * ack; a failed batch is nak'd. `stop()` stops consuming, waits for the batches, closes the pool.
 */
export async function startCeiling(
  databaseUrl: string,
  js: JetStreamClient,
  applicationName = 'bench-ceiling',
  afterCommit?: CeilingCommitHook,
): Promise<{ stop(): Promise<void> }> {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 10, application_name: applicationName });
  // A connection that the bench's final `DROP DATABASE … FORCE` cuts must not end the run.
  pool.on('connect', (client) => client.on('error', () => undefined));
  const { batchSize, lingerMs, inFlight } = CEILING;
  // Enough buffered for every batch in flight and as many more gathering.
  const maxBuffered = batchSize * inFlight * 2;
  const messages: ConsumerMessages = await js.consumers
    .get(RESULTS_STREAM, INBOX_CONSUMER)
    .then((c) => c.consume({ max_messages: maxBuffered }))
    .catch(async (err: unknown) => {
      await pool.end();
      throw err;
    });
  const apply = async (msgs: readonly JsMsg[]) => {
    const values = ceilingParameters();
    for (const m of msgs)
      addCeilingResult(values, m.json<ResultEnvelope>(), m.headers?.get('Nats-Msg-Id') ?? '');
    await inPgTransaction(pool, (c) => c.query({ name: CEILING_STATEMENT, text: CEILING_SQL, values }));
    afterCommit?.(values[0] as string[]);
    for (const m of msgs) m.ack();
  };
  const [ready, running] = [[] as JsMsg[][], new Set<Promise<void>>()];
  let [gathering, held] = [[] as JsMsg[], 0];
  let timer: NodeJS.Timeout | undefined;
  let wakeReader: (() => void) | undefined;
  /** Start ready batches while fewer than `inFlight` run. */
  const pump = () => {
    while (ready.length > 0 && running.size < inFlight) {
      const batch = ready.shift()!;
      const p = apply(batch)
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
    clearTimeout(timer);
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
      if (gathering.length >= batchSize) close();
      else timer ??= setTimeout(close, lingerMs);
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
      for (; running.size > 0 || ready.length > 0; await Promise.all(running)) pump();
      await pool.end();
    },
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  // The daemon's V8 settings: the ceiling is what such a process allows.
  applyV8Flags();
  const [databaseUrl, natsUrl] = [process.env['DATABASE_URL'], process.env['NATS_URL']];
  if (!databaseUrl || !natsUrl) throw new Error('the ceiling process needs DATABASE_URL and NATS_URL');
  const nc = await connect({ servers: natsUrl, name: 'bench-ceiling-process' });
  const ceiling = await startCeiling(databaseUrl, jetstream(nc), CEILING_PROCESS_APPLICATION);
  const fail = (err: unknown) => (console.error(err), process.exit(1));
  const stop = () => ceiling.stop().then(() => nc.drain());
  process.once('SIGTERM', () => void stop().then(() => process.exit(0), fail));
}
