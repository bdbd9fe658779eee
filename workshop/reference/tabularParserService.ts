/**
 * The reference `tabular-parser` recognition service: an example of how a service talks to the
 * core, and the counterpart the demo and the end-to-end tests run against.
 *
 * Terminology: a *job message* is what the core publishes on `recognition.job.tabular-parser`; an
 * *envelope* is what the service answers on `recognition.result` — first an ack
 * (`status = processing`), later a result (`done`, `needs_check` or `error`).
 *
 * Per job message:
 *   1. validate it against the job schema, which allows fields this version does not know (the
 *      core may add some). An invalid one cannot be fixed by redelivering it: when its `job_id`
 *      can be read, the service answers with an `error` result (`INVALID_JOB_MESSAGE`) so the job
 *      ends now instead of timing out; either way it terminates the message (`term()`);
 *   2. draw its fate from the seeded generator: `done`, `needs_check`, `error` or `silent`;
 *   3. publish the ack envelope (`Nats-Msg-Id = ack:<job_id>:<attempt>`);
 *   4. `silent`: ack the job message and never answer (the core's watchdog times the job out);
 *      otherwise wait `replyDelayMs` (± jitter), publish the result
 *      (`Nats-Msg-Id = result:<job_id>:<attempt>`), then ack the job message.
 * The job message is acked only after the envelopes were stored by JetStream: a service that dies
 * in between gets the job again, and the msg ids make the repeated envelopes harmless duplicates.
 *
 * Tracing: the job message's `traceparent`/`tracestate` headers are the parent of the service's
 * span of the job; each envelope carries the context of its own send span, a child of it. Without a
 * started SDK the job message's context is passed on to the envelopes unchanged; a job message
 * without one gives envelopes without one.
 *
 * It reads through a real JetStream durable pull consumer (`tabular-parser` on `RECOGNITION_JOBS`,
 * filtered to its subject), so several copies of the service share the work.
 */
import {
  AckPolicy,
  DeliverPolicy,
  jetstream,
  jetstreamManager,
  type ConsumerMessages,
  type JsMsg,
} from '@nats-io/jetstream';
import { headers as natsHeaders, nanos, type NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../../src/logger.js';
import {
  UUID_PATTERN,
  checkJobMessage,
  type JobMessage,
  type SchemaError,
} from '../../src/messages/schemas.js';
import { CONTRACT_NAMES, jobSubject, type ExchangeNames } from '../../src/nats/subjects.js';
import { startServiceJobTrace, type ServiceJobTrace } from '../../src/tracing/jobSpans.js';
import { headerFieldsOf } from '../../src/tracing/tracing.js';
import {
  DEFAULT_WEIGHTS,
  TABULAR_PARSER,
  mulberry32,
  pickFate,
  type Fate,
  type FateWeights,
} from './fates.js';

export { DEFAULT_WEIGHTS, FATES, TABULAR_PARSER, parseWeights } from './fates.js';
export type { Fate, FateWeights } from './fates.js';

/**
 * The `error.code` of the result a service sends for a job message that does not match the job
 * schema (docs/contract.md): the job ends `error` at once instead of waiting for its deadline.
 */
export const INVALID_JOB_MESSAGE = 'INVALID_JOB_MESSAGE';

const UUID = new RegExp(UUID_PATTERN);
/** At most this much of the validator's errors goes into the error result's message. */
const INVALID_MESSAGE_MAX = 2_000;

/**
 * What the service can still answer for a job message that is not valid: the job it names, when
 * its `job_id` is a uuid, and the `Nats-Msg-Id` of the error result, `result:<job_id>:<attempt>`
 * with the message's `attempt` when it is a whole number from 1, else `0` (no real attempt has it),
 * so that a redelivered message gives the same id. `null` when no job can be named. Pure.
 */
export function invalidJobAnswer(value: unknown): { jobId: string; resultMsgId: string } | null {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return null;
  const { job_id: jobId, attempt } = value as Record<string, unknown>;
  if (typeof jobId !== 'string' || !UUID.test(jobId)) return null;
  const n = typeof attempt === 'number' && Number.isInteger(attempt) && attempt >= 1 ? attempt : 0;
  return { jobId, resultMsgId: `result:${jobId}:${n}` };
}

/** The validator's errors in one line, for the error result and the log. Pure. */
export function describeInvalidJob(errors: readonly SchemaError[]): string {
  const text = `the job message does not match recognition-job-message.schema.json: ${errors
    .map((e) => `${e.instancePath || '/'} ${e.message ?? e.keyword}`)
    .join('; ')}`;
  return text.length > INVALID_MESSAGE_MAX ? `${text.slice(0, INVALID_MESSAGE_MAX - 1)}…` : text;
}

/** Error codes a real parser reports; the generator picks one for each `error`. */
const ERROR_CODES = [
  { code: 'UNSUPPORTED_FORMAT', message: 'the file is not a spreadsheet this parser reads (xls 95, ods)' },
  { code: 'CORRUPTED_FILE', message: 'the workbook could not be opened: truncated zip archive' },
] as const;

export interface TabularParserOptions {
  nc: NatsConnection;
  /** Seed of the fate generator. */
  seed: number;
  weights?: FateWeights;
  /** Mean delay between the ack and the result; each job varies it by ±50 %. */
  replyDelayMs?: number;
  /** `service.name` in envelopes (default `tabular-parser`; also the subject suffix and durable). */
  name?: string;
  /** `service.version` in envelopes. */
  version?: string;
  logger: Logger;
  /** Jobs handled at once; more stay in the consumer. */
  maxInFlight?: number;
  /**
   * The exchange to serve: its jobs stream and subject, and the subject envelopes go to (the
   * contract's by default; the demo on shared servers passes its own).
   */
  names?: ExchangeNames;
}

/** What the service did so far. */
export interface TabularParserStats {
  received: number;
  acked: number;
  done: number;
  needs_check: number;
  error: number;
  silent: number;
  invalid: number;
  /** Jobs given back to JetStream (nak) because publishing an envelope failed. */
  retried: number;
  inFlight: number;
}

export interface TabularParserService {
  /** Stop pulling, finish the jobs in hand (their results are published), then resolve. */
  stop(): Promise<void>;
  stats(): TabularParserStats;
}

/** JetStream redelivers a job the service has not acked within this time (it died, or NATS did). */
const ACK_WAIT_MS = 30_000;
/**
 * Deliveries before JetStream gives up on a job message; the core's dead-letter loop then moves
 * the job to `dlq` (MAX_DELIVERIES) instead of letting it wait for a timeout.
 */
const MAX_DELIVER = 5;

/** Create the durable consumer if it does not exist yet (idempotent; several copies may race). */
async function ensureConsumer(nc: NatsConnection, name: string, names: ExchangeNames): Promise<void> {
  const jsm = await jetstreamManager(nc);
  try {
    await jsm.streams.info(names.jobsStream);
  } catch (err) {
    if (/stream not found/i.test((err as Error).message)) {
      throw new Error(
        `stream ${names.jobsStream} not found: start recognition-core first (it creates the streams)`,
        { cause: err },
      );
    }
    throw err;
  }
  try {
    await jsm.consumers.info(names.jobsStream, name);
  } catch (err) {
    if (!/consumer not found/i.test((err as Error).message)) throw err;
    await jsm.consumers.add(names.jobsStream, {
      durable_name: name,
      filter_subject: jobSubject(name, names),
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      ack_wait: nanos(ACK_WAIT_MS),
      max_deliver: MAX_DELIVER,
    });
  }
}

/**
 * Start the service: ensure its durable consumer, then handle job messages until `stop()`.
 * Resolves once the consumer is bound. Throws when `RECOGNITION_JOBS` does not exist.
 */
export async function startTabularParser(opts: TabularParserOptions): Promise<TabularParserService> {
  const name = opts.name ?? TABULAR_PARSER;
  const version = opts.version ?? '1.0.0-reference';
  const weights = opts.weights ?? DEFAULT_WEIGHTS;
  const replyDelayMs = opts.replyDelayMs ?? 400;
  const maxInFlight = opts.maxInFlight ?? 256;
  const names = opts.names ?? CONTRACT_NAMES;
  const log = opts.logger.child({ component: name });
  const random = mulberry32(opts.seed);
  const service = { name, version };
  const stats: TabularParserStats = {
    received: 0,
    acked: 0,
    done: 0,
    needs_check: 0,
    error: 0,
    silent: 0,
    invalid: 0,
    retried: 0,
    inFlight: 0,
  };

  await ensureConsumer(opts.nc, name, names);
  const js = jetstream(opts.nc);
  const consumer = await js.consumers.get(names.jobsStream, name);
  const inFlight = new Set<Promise<void>>();
  let stopping = false;
  let messages: ConsumerMessages | undefined;

  async function publish(
    jobId: string,
    msgId: string,
    body: Record<string, unknown>,
    traced: ServiceJobTrace | undefined,
  ): Promise<void> {
    const send = traced?.send(msgId);
    const h = send?.headers ? natsHeaders() : undefined;
    if (h && send?.headers) for (const [k, v] of Object.entries(headerFieldsOf(send.headers))) h.set(k, v);
    try {
      await js.publish(
        names.resultSubject,
        JSON.stringify({ job_id: jobId, service, ...body, sent_at: new Date().toISOString() }),
        h ? { msgID: msgId, headers: h } : { msgID: msgId },
      );
      send?.end();
    } catch (err) {
      send?.end(err);
      throw err;
    }
  }

  /** Steps 3–4 for one job whose fate was drawn. */
  async function handle(
    msg: JsMsg,
    job: JobMessage,
    fate: Fate,
    delayMs: number,
    errorPick: number,
  ): Promise<void> {
    const traced = startServiceJobTrace({
      headers: msg.headers,
      subject: msg.subject,
      jobId: job.job_id,
      msgId: msg.headers?.get('Nats-Msg-Id') || undefined,
    });
    const jlog = log.child({ job_id: job.job_id, ...traced?.logFields });
    try {
      // 3. Ack envelope: the core moves the job to processing.
      await publish(job.job_id, `ack:${job.job_id}:${job.attempt}`, { status: 'processing' }, traced);
      stats.acked++;
      if (fate !== 'silent') {
        // 4. The "work", then the result.
        await new Promise((r) => setTimeout(r, delayMs));
        const resultMsgId = `result:${job.job_id}:${job.attempt}`;
        const metrics = { pages: 1 + (errorPick % 12), duration_ms: Math.round(delayMs) };
        if (fate === 'error') {
          await publish(
            job.job_id,
            resultMsgId,
            { status: 'error', error: ERROR_CODES[errorPick % ERROR_CODES.length], metrics },
            traced,
          );
        } else {
          await publish(
            job.job_id,
            resultMsgId,
            {
              status: fate,
              result_s3: {
                bucket: job.result_s3_prefix.bucket,
                key: `${job.result_s3_prefix.key_prefix}result.json`,
              },
              result_schema_version: '1.0',
              metrics:
                fate === 'needs_check' ? { ...metrics, low_confidence_cells: 3 + (errorPick % 20) } : metrics,
            },
            traced,
          );
        }
      }
      msg.ack();
      stats[fate]++;
      traced?.end(fate);
      jlog.debug({ event: 'answered', fate }, `job answered: ${fate}`);
    } catch (err) {
      // JetStream did not store an envelope (NATS unreachable): give the job back, try again later.
      stats.retried++;
      traced?.fail(err);
      msg.nak(1_000);
      jlog.warn(
        { err, event: 'publish_failed', fate },
        'could not publish an envelope; the job message will come back',
      );
    }
  }

  /**
   * Step 1 for a job message that is not valid: answer its job with an `error` result when it
   * names one, then terminate the message. A failed publish gives the message back, as for a
   * valid job.
   */
  async function answerInvalid(msg: JsMsg, value: unknown, reason: string): Promise<void> {
    const answer = invalidJobAnswer(value);
    const fields = { event: 'invalid_job_message', stream_seq: msg.seq, reason };
    if (!answer) {
      msg.term();
      log.warn(fields, 'invalid job message naming no job: terminated');
      return;
    }
    try {
      await publish(
        answer.jobId,
        answer.resultMsgId,
        { status: 'error', error: { code: INVALID_JOB_MESSAGE, message: reason } },
        undefined,
      );
    } catch (err) {
      stats.retried++;
      msg.nak(1_000);
      log.warn(
        { ...fields, err, job_id: answer.jobId },
        'could not answer an invalid job message; it will come back',
      );
      return;
    }
    msg.term();
    log.warn(
      { ...fields, job_id: answer.jobId },
      `invalid job message: answered ${INVALID_JOB_MESSAGE}, terminated`,
    );
  }

  function onMessage(msg: JsMsg): void {
    stats.received++;
    let value: unknown;
    let job: JobMessage | undefined;
    let reason: string;
    try {
      // 1. Validate (fields this version does not know are allowed, and ignored).
      value = msg.json();
      const check = checkJobMessage(value);
      if (check.valid) job = check.value;
      reason = check.valid ? '' : describeInvalidJob(check.errors);
    } catch (err) {
      reason = `the job message is not JSON: ${(err as Error).message}`;
    }
    if (!job) {
      stats.invalid++;
      const task = answerInvalid(msg, value, reason).finally(() => {
        inFlight.delete(task);
        stats.inFlight = inFlight.size;
      });
      inFlight.add(task);
      stats.inFlight = inFlight.size;
      return;
    }
    // 2. Draw everything random now, in delivery order, so a seed gives a repeatable mix.
    const fate = pickFate(weights, random());
    const delayMs = replyDelayMs * (0.5 + random());
    const errorPick = Math.floor(random() * 1000);
    const task = handle(msg, job, fate, delayMs, errorPick).finally(() => {
      inFlight.delete(task);
      stats.inFlight = inFlight.size;
    });
    inFlight.add(task);
    stats.inFlight = inFlight.size;
  }

  async function read(): Promise<void> {
    while (!stopping) {
      try {
        // Short pulls (5 s, the client's default is 30 s): after a cluster node fails, a pull held by
        // it is abandoned within seconds instead of stalling the service for half a minute.
        messages = await consumer.consume({ max_messages: Math.min(maxInFlight, 1000), expires: 5_000 });
        for await (const msg of messages) {
          onMessage(msg);
          // Back-pressure: hold the next message until a job in hand is finished.
          while (inFlight.size >= maxInFlight && !stopping) await Promise.race(inFlight);
          if (stopping) break;
        }
      } catch (err) {
        if (!stopping) log.warn({ err, event: 'consume_error' }, 'consuming job messages failed; retrying');
      }
      if (!stopping) await new Promise((r) => setTimeout(r, 1_000));
    }
  }

  const reader = read();
  log.info(
    { event: 'service_started', seed: opts.seed, weights },
    `${name} listening on ${jobSubject(name, names)}`,
  );
  return {
    async stop() {
      stopping = true;
      await messages?.close();
      await reader;
      await Promise.allSettled([...inFlight]);
      log.info({ event: 'service_stopped', ...stats }, `${name} stopped`);
    },
    stats: () => ({ ...stats }),
  };
}
