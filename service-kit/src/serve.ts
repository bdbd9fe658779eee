/**
 * `serve()`: a recognition service's side of the exchange, around one handler. Per job message, in
 * the contract's order: validate, ack `processing`, run the handler (in-progress acks meanwhile),
 * publish its one result with a msg id derived from the job, ack the job message last. At most
 * `concurrency` messages are held; on SIGTERM or `stop()` it finishes the jobs in hand and resolves
 * `stopped` (docs/contract.md).
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
import { context as otelContext, type Context } from '@opentelemetry/api';
import {
  SERVICE_NAME_PATTERN,
  envelopeMsgId,
  exchangeFromEnv,
  jobSubjectOf,
  resultKey,
  type Exchange,
  type S3Ref,
} from './exchange.js';
import type { JobMessage, ResultEnvelope } from './generated/messages.js';
import { startJobTrace, type JobTrace } from './tracing.js';
import {
  bounded,
  checkJobMessage,
  checkResultEnvelope,
  describeErrors,
  describeInvalidJob,
} from './validate.js';

/** `error.code` of the answer to a job message that does not match the job schema. */
export const INVALID_JOB_MESSAGE = 'INVALID_JOB_MESSAGE';
/** `error.code` of a job whose handler threw on every run. */
export const HANDLER_FAILED = 'HANDLER_FAILED';
/** `error.code` of a job whose handler's result the result schema refuses (a bug of the handler). */
export const INVALID_RESULT = 'INVALID_RESULT';
/** `error.code` of a job whose handler returned no outcome of its `ctx`. */
export const NO_OUTCOME = 'NO_OUTCOME';
/** The core stores at most this much of an `error.message`. */
const ERROR_MESSAGE_MAX = 10_000;

/** What a result carries besides its status. */
export interface ResultFields {
  /** The result file (use `ctx.resultKey(name)` for where it belongs). */
  result_s3?: S3Ref;
  /** Free object, stored as the job's `metrics`. */
  metrics?: Record<string, unknown>;
  result_schema_version?: string;
}

/** What a handler decided; only the methods of its `ctx` make one. */
export type Outcome =
  | { readonly kind: 'result'; readonly envelope: Readonly<Record<string, unknown>> }
  | { readonly kind: 'no_result' };

/** The handler's side of one job. */
export interface JobContext {
  /** The job recognised: answer `done`. */
  done(fields?: ResultFields): Outcome;
  /** Recognised, but a person should look: answer `needs_check`. */
  needsCheck(fields?: ResultFields): Outcome;
  /** Not recognised: answer `error` with a code and a message. Not retried. */
  fail(code: string, message: string, metrics?: Record<string, unknown>): Outcome;
  /**
   * Send no result: the job message is acked and the core times the job out at its deadline.
   * For test doubles of a service that goes silent, not for real work.
   */
  noResult(): Outcome;
  /** Where a result file named `name` belongs (bucket and key under the job's result prefix). */
  resultKey(name: string): S3Ref;
  /** 1 for the first run of the handler on this delivery, then one more per retry. */
  readonly run: number;
  /** How many times JetStream delivered this job message (1 the first time). */
  readonly deliveries: number;
  /** The job's trace context: spans the handler starts in it belong to the job's trace. */
  readonly traceContext: Context;
  /** Aborted when the service must stop at once (the drain timed out). */
  readonly signal: AbortSignal;
}

export type Handler = (job: JobMessage, ctx: JobContext) => Promise<Outcome>;

/** A pino-compatible logger; the kit logs warnings and errors, and its start and stop. */
export interface KitLogger {
  debug(fields: object, msg: string): void;
  info(fields: object, msg: string): void;
  warn(fields: object, msg: string): void;
  error(fields: object, msg: string): void;
}

export interface ServeOptions {
  /** The service's name: subject suffix, durable consumer and `service.name` of its envelopes. */
  service: string;
  /** `service.version` of its envelopes. */
  version: string;
  /** A connection the caller owns (and drains after `stopped`). */
  nats: NatsConnection;
  handle: Handler;
  /** Job messages held at once (default 8). */
  concurrency?: number;
  /** Where jobs come from and envelopes go (default: `exchangeFromEnv(process.env)`). */
  exchange?: Exchange;
  /** The durable consumer the kit creates when it is missing (an existing one is used as it is). */
  consumer?: { ackWaitMs?: number; maxDeliver?: number };
  /** Runs of a throwing handler before its job is answered `error`, and the backoff between. */
  retry?: { attempts?: number; backoffMs?: number; maxBackoffMs?: number };
  /** Signals that stop the service (default SIGTERM and SIGINT; `false` for none). */
  signals?: readonly NodeJS.Signals[] | false;
  /** How long a stop waits for the jobs in hand before aborting their `signal` (default 60 s). */
  drainTimeoutMs?: number;
  logger?: KitLogger;
}

/** The kit's counters. */
export interface ServiceCounters {
  /** Job messages delivered (redeliveries included). */
  received: number;
  /** Of which JetStream had delivered before. */
  redelivered: number;
  /** Job messages that did not match the schema. */
  invalid: number;
  /** `processing` acks published. */
  acked: number;
  done: number;
  needs_check: number;
  error: number;
  /** Jobs acked without a result (`ctx.noResult()`). */
  no_result: number;
  /** Handler runs that threw. */
  handler_errors: number;
  /** Job messages given back to JetStream because an envelope was not stored. */
  naks: number;
  /** In-progress acks sent. */
  working: number;
  /** Job messages in hand now. */
  in_flight: number;
}

export interface RunningService {
  /** Pull no more, finish the jobs in hand, then resolve (as a stop signal does). */
  stop(): Promise<void>;
  /** Resolves once the service stopped. */
  readonly stopped: Promise<void>;
  counters(): ServiceCounters;
}

const DEFAULT_ACK_WAIT_MS = 30_000;
const DEFAULT_MAX_DELIVER = 5;
/** A pull waits at most this long for job messages, so a stop or a lost server is noticed soon. */
const PULL_EXPIRES_MS = 5_000;

/** A log line as JSON, errors as their message. */
function line(level: string, msg: string, fields: object): string {
  return `${JSON.stringify({ level, msg, ...fields }, (_k, v: unknown) =>
    v instanceof Error ? { message: v.message, name: v.name } : v,
  )}\n`;
}

/** Without a logger of the service's own: warnings and errors on stderr, as JSON lines. */
const quiet: KitLogger = {
  debug: () => undefined,
  info: () => undefined,
  warn: (fields, msg) => process.stderr.write(line('warn', msg, fields)),
  error: (fields, msg) => process.stderr.write(line('error', msg, fields)),
};

const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/**
 * The job an invalid job message still names, and its error result's `Nats-Msg-Id`:
 * `result:<job_id>:<attempt>` with the message's `attempt` when it is a whole number from 1, else
 * `0`, the same on every delivery. `null` when it names none (no uuid `job_id`). Pure.
 */
export function invalidJobAnswer(value: unknown): { jobId: string; resultMsgId: string } | null {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return null;
  const { job_id: jobId, attempt } = value as Record<string, unknown>;
  if (typeof jobId !== 'string' || !UUID.test(jobId)) return null;
  const n = typeof attempt === 'number' && Number.isInteger(attempt) && attempt >= 1 ? attempt : 0;
  return { jobId, resultMsgId: envelopeMsgId('result', jobId, n) };
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
  });

function outcomeOf(status: 'done' | 'needs_check', fields: ResultFields | undefined): Outcome {
  const { result_s3, metrics, result_schema_version } = fields ?? {};
  return {
    kind: 'result',
    envelope: {
      status,
      ...(result_s3 ? { result_s3: { bucket: result_s3.bucket, key: result_s3.key } } : {}),
      ...(result_schema_version !== undefined ? { result_schema_version } : {}),
      ...(metrics ? { metrics } : {}),
    },
  };
}

function failure(
  code: string,
  message: string,
  metrics?: Record<string, unknown>,
): Extract<Outcome, { kind: 'result' }> {
  return {
    kind: 'result',
    envelope: {
      status: 'error',
      error: { code: bounded(code, 200), message: bounded(message, ERROR_MESSAGE_MAX) },
      ...(metrics ? { metrics } : {}),
    },
  };
}

/** Ensure the durable consumer of `service` (idempotent; copies of the service may race). */
async function ensureConsumer(
  nc: NatsConnection,
  service: string,
  exchange: Exchange,
  settings: { ackWaitMs: number; maxDeliver: number },
): Promise<number> {
  const jsm = await jetstreamManager(nc);
  try {
    await jsm.streams.info(exchange.jobsStream);
  } catch (err) {
    if (/stream not found/i.test((err as Error).message))
      throw new Error(`stream ${exchange.jobsStream} not found: the core creates it when it starts`, {
        cause: err,
      });
    throw err;
  }
  try {
    const info = await jsm.consumers.info(exchange.jobsStream, service);
    return info.config.ack_wait ? info.config.ack_wait / 1e6 : settings.ackWaitMs;
  } catch (err) {
    if (!/consumer not found/i.test((err as Error).message)) throw err;
  }
  try {
    await jsm.consumers.add(exchange.jobsStream, {
      durable_name: service,
      filter_subject: jobSubjectOf(service, exchange),
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      ack_wait: nanos(settings.ackWaitMs),
      max_deliver: settings.maxDeliver,
    });
  } catch (err) {
    // Another copy created it first with the same settings.
    if (!/already in use|already exists/i.test((err as Error).message)) throw err;
  }
  return settings.ackWaitMs;
}

/** Start serving. Resolves once the durable consumer is bound; throws when the jobs stream is missing. */
export async function serve(opts: ServeOptions): Promise<RunningService> {
  if (!SERVICE_NAME_PATTERN.test(opts.service))
    throw new Error(`service name must be letters, digits, _ and -: ${JSON.stringify(opts.service)}`);
  const log = opts.logger ?? quiet;
  const exchange = opts.exchange ?? exchangeFromEnv(process.env);
  const concurrency = Math.max(1, opts.concurrency ?? 8);
  const attempts = Math.max(1, opts.retry?.attempts ?? 3);
  const backoffMs = opts.retry?.backoffMs ?? 1_000;
  const maxBackoffMs = opts.retry?.maxBackoffMs ?? 30_000;
  const drainTimeoutMs = opts.drainTimeoutMs ?? 60_000;
  const serviceField = { name: opts.service, version: opts.version };
  const counters: ServiceCounters = {
    received: 0,
    redelivered: 0,
    invalid: 0,
    acked: 0,
    done: 0,
    needs_check: 0,
    error: 0,
    no_result: 0,
    handler_errors: 0,
    naks: 0,
    working: 0,
    in_flight: 0,
  };

  const ackWaitMs = await ensureConsumer(opts.nats, opts.service, exchange, {
    ackWaitMs: opts.consumer?.ackWaitMs ?? DEFAULT_ACK_WAIT_MS,
    maxDeliver: opts.consumer?.maxDeliver ?? DEFAULT_MAX_DELIVER,
  });
  const heartbeatMs = Math.max(50, Math.floor(ackWaitMs / 3));
  const js = jetstream(opts.nats);
  const consumer = await js.consumers.get(exchange.jobsStream, opts.service);
  const inFlight = new Set<Promise<void>>();
  const abort = new AbortController();
  let stopping = false;
  let pull: ConsumerMessages | undefined;

  /** Publish one envelope and wait for JetStream to store it; throws when it did not. */
  async function publish(msgId: string, body: Record<string, unknown>, traced: JobTrace | undefined) {
    const envelope = {
      job_id: body.job_id,
      service: serviceField,
      ...body,
      sent_at: new Date().toISOString(),
    };
    const check = checkResultEnvelope(envelope);
    if (!check.valid)
      throw new Error(`envelope ${msgId} does not match the result schema: ${describeErrors(check.errors)}`);
    const send = traced?.send(exchange.resultSubject, msgId);
    const h = natsHeaders();
    for (const [k, v] of Object.entries(send?.headers ?? {})) h.set(k, v);
    try {
      await js.publish(exchange.resultSubject, JSON.stringify(envelope), { msgID: msgId, headers: h });
      send?.end();
    } catch (err) {
      send?.end(err);
      throw err;
    }
  }

  /** Keep the message from redelivery while its job is in hand. */
  function heartbeat(msg: JsMsg): () => void {
    const timer = setInterval(() => {
      msg.working();
      counters.working++;
    }, heartbeatMs);
    return () => clearInterval(timer);
  }

  async function answerInvalid(msg: JsMsg, value: unknown, reason: string): Promise<void> {
    counters.invalid++;
    const answer = invalidJobAnswer(value);
    const fields = { event: 'invalid_job_message', stream_seq: msg.seq, reason };
    if (!answer) {
      msg.term();
      log.warn(fields, 'invalid job message naming no job: terminated');
      return;
    }
    try {
      await publish(
        answer.resultMsgId,
        {
          job_id: answer.jobId,
          status: 'error',
          error: { code: INVALID_JOB_MESSAGE, message: bounded(reason, ERROR_MESSAGE_MAX) },
        },
        undefined,
      );
    } catch (err) {
      counters.naks++;
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

  /** Run the handler until it returns an outcome or has thrown `attempts` times. */
  async function decide(job: JobMessage, msg: JsMsg, traced: JobTrace): Promise<Outcome> {
    for (let run = 1; ; run++) {
      const ctx: JobContext = {
        done: (fields) => outcomeOf('done', fields),
        needsCheck: (fields) => outcomeOf('needs_check', fields),
        fail: failure,
        noResult: () => ({ kind: 'no_result' }),
        resultKey: (name) => resultKey(job, name),
        run,
        deliveries: msg.info.deliveryCount,
        traceContext: traced.context,
        signal: abort.signal,
      };
      try {
        const outcome = await otelContext.with(traced.context, () => opts.handle(job, ctx));
        if (outcome && (outcome.kind === 'result' || outcome.kind === 'no_result')) return outcome;
        return failure(NO_OUTCOME, 'the handler returned no outcome of its ctx (done, needsCheck, fail)');
      } catch (err) {
        counters.handler_errors++;
        const message = err instanceof Error ? err.message : String(err);
        if (run >= attempts || abort.signal.aborted) {
          log.error(
            { event: 'handler_failed', job_id: job.job_id, run, err },
            'the handler failed; answering error',
          );
          return failure(HANDLER_FAILED, `the handler failed ${run} time(s): ${message}`);
        }
        const wait = Math.min(maxBackoffMs, backoffMs * 2 ** (run - 1));
        log.warn(
          { event: 'handler_retry', job_id: job.job_id, run, wait_ms: wait, err },
          'the handler threw; running it again',
        );
        await sleep(wait, abort.signal);
      }
    }
  }

  async function handleJob(msg: JsMsg, job: JobMessage): Promise<void> {
    const traced = startJobTrace({
      headers: msg.headers,
      subject: msg.subject,
      jobId: job.job_id,
      msgId: msg.headers?.get('Nats-Msg-Id') || undefined,
    });
    const stopHeartbeat = heartbeat(msg);
    let outcomeName = 'failed';
    try {
      await publish(
        envelopeMsgId('ack', job.job_id, job.attempt),
        { job_id: job.job_id, status: 'processing' },
        traced,
      );
      counters.acked++;
      const outcome = await decide(job, msg, traced);
      if (outcome.kind === 'result') {
        let body: Record<string, unknown> = { ...outcome.envelope, job_id: job.job_id };
        // A result the core would quarantine is the handler's bug, which a redelivery repeats:
        // the job is answered `error` instead, naming what the schema refused.
        const check = checkResultEnvelope({ ...body, service: serviceField });
        if (!check.valid) {
          const message = `the handler's result does not match the result schema: ${describeErrors(check.errors)}`;
          log.error({ event: 'invalid_result', job_id: job.job_id, reason: message }, message);
          body = { ...failure(INVALID_RESULT, message).envelope, job_id: job.job_id };
        }
        await publish(envelopeMsgId('result', job.job_id, job.attempt), body, traced);
        outcomeName = String(body.status);
        counters[body.status as 'done' | 'needs_check' | 'error']++;
      } else {
        outcomeName = 'no_result';
        counters.no_result++;
      }
      stopHeartbeat();
      msg.ack();
    } catch (err) {
      // An envelope was not stored (NATS unreachable, or the envelope is not valid): give the
      // job back; it comes again, and its envelopes then carry the same ids.
      stopHeartbeat();
      counters.naks++;
      msg.nak(1_000);
      log.warn(
        { err, event: 'publish_failed', job_id: job.job_id },
        'could not publish an envelope; the job message will come back',
      );
    } finally {
      traced.end(outcomeName);
    }
  }

  function onMessage(msg: JsMsg): void {
    if (stopping) {
      // Delivered after the stop: give it back at once for another copy.
      msg.nak();
      return;
    }
    counters.received++;
    if (msg.info.redelivered) counters.redelivered++;
    let value: unknown;
    let job: JobMessage | undefined;
    let reason = '';
    try {
      value = msg.json();
      const check = checkJobMessage(value);
      if (check.valid) job = check.value;
      else reason = describeInvalidJob(check.errors);
    } catch (err) {
      reason = `the job message is not JSON: ${(err as Error).message}`;
    }
    const task = (job ? handleJob(msg, job) : answerInvalid(msg, value, reason))
      .catch((err: unknown) => log.error({ err, event: 'job_crashed' }, 'handling a job message failed'))
      .finally(() => {
        inFlight.delete(task);
        counters.in_flight = inFlight.size;
      });
    inFlight.add(task);
    counters.in_flight = inFlight.size;
  }

  async function read(): Promise<void> {
    while (!stopping) {
      try {
        const free = concurrency - inFlight.size;
        if (free <= 0) {
          await Promise.race(inFlight);
          continue;
        }
        pull = await consumer.fetch({ max_messages: free, expires: PULL_EXPIRES_MS });
        for await (const msg of pull) onMessage(msg);
      } catch (err) {
        if (stopping) break;
        log.warn({ err, event: 'consume_error' }, 'pulling job messages failed; retrying');
        await sleep(1_000);
      }
    }
  }

  const reader = read();
  let stopped: Promise<void> | undefined;
  let resolveStopped!: () => void;
  const whenStopped = new Promise<void>((r) => (resolveStopped = r));
  const onSignal = (signal: NodeJS.Signals) => {
    log.info({ event: 'stop_signal', signal }, `${signal}: finishing the jobs in hand`);
    void stop();
  };
  const signals = opts.signals === false ? [] : (opts.signals ?? ['SIGTERM', 'SIGINT']);
  for (const s of signals) process.on(s, onSignal);

  function stop(): Promise<void> {
    stopped ??= (async () => {
      stopping = true;
      for (const s of signals) process.off(s, onSignal);
      await pull?.close();
      await reader;
      const timer = setTimeout(() => abort.abort(), drainTimeoutMs);
      await Promise.allSettled([...inFlight]);
      clearTimeout(timer);
      log.info({ event: 'service_stopped', ...counters }, `${opts.service} stopped`);
      resolveStopped();
    })();
    return stopped;
  }

  log.info(
    { event: 'service_started', subject: jobSubjectOf(opts.service, exchange), concurrency },
    `${opts.service} listening on ${jobSubjectOf(opts.service, exchange)}`,
  );
  return {
    stop,
    stopped: whenStopped,
    counters: () => ({ ...counters }),
  };
}

export type { ResultEnvelope };
