/**
 * The chaos harness's load: jobs created the way `jobs create` creates them, a scripted recognition
 * service for the jobs of `chaos-scripted` (results before acks, late results after timeouts,
 * second results with new msg ids, repeated messages), repeats of the reference service's own
 * envelopes, and invalid messages of every quarantine reason.
 *
 * Every message the harness publishes carries a `Chaos-Origin` header; an invalid one also carries
 * `Chaos-Expect: <quarantine reason>`. The stream is the record of what the inbox had to handle:
 * the end-of-run checks read it back and classify each message by these headers, so a publish
 * whose ack was lost (NATS restarting) is still accounted for.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { headers as natsHeaders, type Msg, type NatsConnection, type Subscription } from '@nats-io/nats-core';
import {
  AckPolicy,
  DeliverPolicy,
  jetstream,
  jetstreamManager,
  type ConsumerMessages,
  type JetStreamClient,
  type PubAck,
} from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { sql, type Kysely } from 'kysely';
import { QUARANTINE_REASONS, type QuarantineReason } from '../../machines/index.js';
import { addFile, createJob } from '../../src/db/jobs.js';
import type { Database } from '../../src/db/schema.js';
import { JOBS_STREAM, RESULT_SUBJECT, jobSubject } from '../../src/nats/subjects.js';
import type { Rng } from './rng.js';

/** The target service the harness itself plays (the reference service plays `tabular-parser`). */
export const SCRIPTED_SERVICE = 'chaos-scripted';
export const REFERENCE_SERVICE = 'tabular-parser';
export const ORIGIN_HEADER = 'Chaos-Origin';
export const EXPECT_HEADER = 'Chaos-Expect';

/** How long one publish may keep retrying (NATS restarting, a cluster electing a leader). */
const PUBLISH_GIVE_UP_MS = 60_000;

/** Publishing with retries, and what came of it. */
export class Publisher {
  attempts = 0;
  stored = 0;
  /** Publications JetStream dropped as duplicates (same msg id inside the duplicate window). */
  droppedAsDuplicate = 0;
  gaveUp = 0;
  private readonly js: JetStreamClient;

  constructor(nc: NatsConnection) {
    this.js = jetstream(nc, { timeout: 4_000 });
  }

  /** Publish to `recognition.result` until JetStream acks it (or {@link PUBLISH_GIVE_UP_MS} passes). */
  async publish(
    data: Uint8Array | string,
    hdrs: Record<string, string>,
    msgId: string | null,
  ): Promise<PubAck | null> {
    const h = natsHeaders();
    for (const [k, v] of Object.entries(hdrs)) h.set(k, v);
    const deadline = Date.now() + PUBLISH_GIVE_UP_MS;
    for (;;) {
      this.attempts++;
      try {
        const ack = await this.js.publish(RESULT_SUBJECT, data, {
          headers: h,
          ...(msgId ? { msgID: msgId } : {}),
        });
        if (ack.duplicate) this.droppedAsDuplicate++;
        else this.stored++;
        return ack;
      } catch {
        if (Date.now() > deadline) {
          this.gaveUp++;
          return null;
        }
        await sleep(500);
      }
    }
  }
}

const enc = new TextEncoder();
const json = (v: unknown): string => JSON.stringify(v);

/** What a scripted job does (chosen when the job is created, from the seed). */
export const SCENARIOS = {
  /** ack, then a result */
  ack_then_result: 30,
  /** the result first, then the ack (which must be ignored) */
  result_before_ack: 12,
  /** a result, never an ack */
  result_only: 8,
  /** ack, then a result after the deadline passed (the job timed out: the result is late) */
  late_result: 10,
  /** ack, result, then a second result with a new msg id (late, never applied) */
  second_result: 10,
  /** the result twice at once, same msg id (JetStream drops the second inside its window) */
  duplicate_now: 8,
  /** the result again after the duplicate window (the inbox sees it: a duplicate, no change) */
  duplicate_later: 8,
  /** two acks with different msg ids, then a result */
  ack_twice: 4,
  /** an ack without Nats-Msg-Id, then a result */
  ack_without_msg_id: 4,
  /** ack, never a result (times out) */
  silent: 4,
  /** nothing at all (times out from published) */
  no_answer: 2,
} as const;
export type Scenario = keyof typeof SCENARIOS;

/** A scripted job's plan, drawn at creation. */
interface Plan {
  scenario: Scenario;
  status: 'done' | 'needs_check' | 'error';
  secondStatus: 'done' | 'needs_check' | 'error';
  withS3: boolean;
  delays: number[];
}

const RESULT_STATUSES = { done: 6, needs_check: 2, error: 2 } as const;
const SCRIPTED = { name: SCRIPTED_SERVICE, version: '3.1.4-chaos' };

interface JobMsg {
  job_id: string;
  file_id: string;
  attempt: number;
  result_s3_prefix: { bucket: string; key_prefix: string };
  reply_deadline: string;
}

/** The job of a result envelope, with everything the stream message must carry. */
function resultEnvelope(
  job: JobMsg,
  status: Plan['status'],
  withS3: boolean,
  variant: string,
): Record<string, unknown> {
  const base = { job_id: job.job_id, status, service: SCRIPTED, sent_at: new Date().toISOString() };
  if (status === 'error') {
    return {
      ...base,
      error: {
        code: `CHAOS_${variant.toUpperCase()}`,
        message: `scripted error (${variant}) for attempt ${job.attempt}`,
      },
      metrics: { variant },
    };
  }
  return {
    ...base,
    ...(withS3
      ? {
          result_s3: {
            bucket: job.result_s3_prefix.bucket,
            key: `${job.result_s3_prefix.key_prefix}${variant}.json`,
          },
        }
      : {}),
    result_schema_version: '1.0',
    metrics: { variant, pages: job.attempt, cells: variant.length * 7 },
  };
}

/**
 * The scripted service: a durable pull consumer of `recognition.job.chaos-scripted`; each job
 * message (once per job) plays the job's scenario on timers.
 */
export class ScriptedService {
  private readonly plans = new Map<string, Plan>();
  private readonly handled = new Set<string>();
  private timers = 0;
  private stopping = false;
  private messages: ConsumerMessages | undefined;
  private reader: Promise<void> | undefined;
  readonly played: Record<string, number> = {};
  jobMessages = 0;

  constructor(
    private readonly nc: NatsConnection,
    private readonly pub: Publisher,
    private readonly rng: Rng,
    private readonly dupWindowMs: number,
  ) {}

  /** Draw the plan of a scripted job: attempt `attempt` of file `fileId` (drawn before the job exists). */
  plan(fileId: string, attempt: number): void {
    const scenario = this.rng.weighted(SCENARIOS);
    const status = this.rng.weighted(RESULT_STATUSES);
    const secondStatus = this.rng.weighted(RESULT_STATUSES);
    const withS3 = this.rng.chance(0.9);
    const delays = Array.from({ length: 3 }, () => this.rng.int(50, 600));
    this.plans.set(`${fileId}:${attempt}`, { scenario, status, secondStatus, withS3, delays });
  }

  /** Timers still to fire (sends not yet made). */
  pending(): number {
    return this.timers;
  }

  /** Create the durable consumer (idempotent) and start pulling. */
  async start(): Promise<void> {
    const jsm = await jetstreamManager(this.nc);
    try {
      await jsm.consumers.info(JOBS_STREAM, SCRIPTED_SERVICE);
    } catch {
      await jsm.consumers.add(JOBS_STREAM, {
        durable_name: SCRIPTED_SERVICE,
        filter_subject: jobSubject(SCRIPTED_SERVICE),
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        // Each job message is acked as soon as it is read: a short ack wait only matters for the
        // messages a lost pull request took with it (a NATS node killed), which come back sooner.
        ack_wait: nanos(10_000),
        max_deliver: -1,
      });
    }
    const consumer = await jetstream(this.nc).consumers.get(JOBS_STREAM, SCRIPTED_SERVICE);
    this.reader = (async () => {
      while (!this.stopping) {
        try {
          // Short pulls: after a NATS node dies, a lost pull request is noticed (missed heartbeats) in seconds.
          this.messages = await consumer.consume({ max_messages: 200, expires: 5_000 });
          for await (const m of this.messages) {
            this.jobMessages++;
            let job: JobMsg;
            try {
              job = m.json<JobMsg>();
            } catch {
              m.term();
              continue;
            }
            if (!this.handled.has(job.job_id)) {
              this.handled.add(job.job_id);
              this.play(job);
            }
            m.ack();
          }
        } catch {
          // NATS restarting: pull again below.
        }
        if (!this.stopping) await sleep(500);
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.messages?.stop();
    await this.reader;
  }

  private later(ms: number, send: () => Promise<unknown>): void {
    this.timers++;
    setTimeout(
      () => {
        void send().finally(() => this.timers--);
      },
      Math.max(0, ms),
    );
  }

  private send(body: Record<string, unknown>, msgId: string | null, scenario: string): Promise<unknown> {
    return this.pub.publish(json(body), { [ORIGIN_HEADER]: `scripted:${scenario}` }, msgId);
  }

  /** Schedule the scenario's envelopes, relative to now. */
  private play(job: JobMsg): void {
    const plan = this.plans.get(`${job.file_id}:${job.attempt}`);
    if (!plan) return; // a job of another run, or a plan lost: answer nothing (it times out)
    const s = plan.scenario;
    this.played[s] = (this.played[s] ?? 0) + 1;
    const [d1, d2, d3] = plan.delays as [number, number, number];
    const ackId = `ack:${job.job_id}:${job.attempt}`;
    const resultId = `result:${job.job_id}:${job.attempt}`;
    const ack = () => ({
      job_id: job.job_id,
      status: 'processing',
      service: SCRIPTED,
      sent_at: new Date().toISOString(),
    });
    const result = resultEnvelope(job, plan.status, plan.withS3, 'result');
    const sendAck = (id: string | null = ackId) => this.send(ack(), id, s);
    const sendResult = () => this.send(result, resultId, s);
    const deadlineIn = Date.parse(job.reply_deadline) - Date.now();
    switch (s) {
      case 'ack_then_result':
        this.later(0, sendAck);
        this.later(d1, sendResult);
        break;
      case 'result_before_ack':
        this.later(0, sendResult);
        this.later(d1, sendAck);
        break;
      case 'result_only':
        this.later(d1, sendResult);
        break;
      case 'late_result':
        this.later(0, sendAck);
        this.later(deadlineIn + 2_000 + d1 * 4, sendResult);
        break;
      case 'second_result':
        this.later(0, sendAck);
        this.later(d1, sendResult);
        this.later(d1 + d2 + 100, () =>
          this.send(
            resultEnvelope(job, plan.secondStatus, plan.withS3, 'second'),
            `result:${job.job_id}:${job.attempt}:second`,
            s,
          ),
        );
        break;
      case 'duplicate_now':
        this.later(0, sendAck);
        this.later(d1, sendResult);
        this.later(d1 + 20, sendResult);
        break;
      case 'duplicate_later':
        this.later(0, sendAck);
        this.later(d1, sendResult);
        this.later(d1 + this.dupWindowMs + 1_000 + d2 * 3, sendResult);
        break;
      case 'ack_twice':
        this.later(0, sendAck);
        this.later(d1, () => sendAck(`ack:${job.job_id}:${job.attempt}:again`));
        this.later(d1 + d3, sendResult);
        break;
      case 'ack_without_msg_id':
        this.later(0, () => sendAck(null));
        this.later(d1, sendResult);
        break;
      case 'silent':
        this.later(0, sendAck);
        break;
      case 'no_answer':
        break;
    }
  }
}

/**
 * Repeats some envelopes of the reference service, byte for byte with the same msg id: half
 * inside JetStream's duplicate window (dropped by the stream), half after it (the inbox sees a
 * redelivered duplicate and must change nothing).
 */
export class Repeater {
  private sub: Subscription | undefined;
  private timers = 0;
  scheduled = 0;

  constructor(
    private readonly nc: NatsConnection,
    private readonly pub: Publisher,
    private readonly rng: Rng,
    private readonly dupWindowMs: number,
    private readonly share: number,
  ) {}

  start(): void {
    this.sub = this.nc.subscribe(RESULT_SUBJECT, {
      callback: (err, m) => {
        if (err || m.headers?.get(ORIGIN_HEADER)) return;
        this.maybeRepeat(m);
      },
    });
  }

  stop(): void {
    this.sub?.unsubscribe();
  }

  pending(): number {
    return this.timers;
  }

  private maybeRepeat(m: Msg): void {
    if (!this.rng.chance(this.share)) return;
    const msgId = m.headers?.get('Nats-Msg-Id') ?? '';
    const data = m.data.slice();
    const delay = this.rng.chance(0.5)
      ? this.rng.int(50, Math.max(100, this.dupWindowMs / 2))
      : this.dupWindowMs + this.rng.int(500, 3_000);
    this.scheduled++;
    this.timers++;
    setTimeout(() => {
      void this.pub.publish(data, { [ORIGIN_HEADER]: 'repeat' }, msgId || null).finally(() => this.timers--);
    }, delay);
  }
}

/** One invalid message for `reason`: payload and headers (the expected reason in a header). */
export function invalidMessage(
  reason: QuarantineReason,
  rng: Rng,
  opts: { realJobId: string | undefined; maxEnvelopeBytes: number },
): { data: Uint8Array; headers: Record<string, string>; msgId: string | null } {
  const headers = { [ORIGIN_HEADER]: 'invalid', [EXPECT_HEADER]: reason };
  const svc = { name: 'chaos-hostile', version: '0' };
  const someId = randomUUID();
  const msgId = `bad:${someId}`;
  const valid = {
    job_id: someId,
    status: 'done',
    service: svc,
    result_s3: { bucket: 'arm-ka', key: `results/x/${someId}/r.json` },
  };
  switch (reason) {
    case 'INVALID_JSON': {
      const variants: Array<string | Uint8Array> = [
        'this is {not json',
        json(valid).slice(0, 40),
        `{"__proto__":{"admin":true},"job_id":"${someId}","status":"processing","service":{"name":"a","version":"1"}}`,
        new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]),
        `${'['.repeat(100)}${']'.repeat(100)}`,
        `{"job_id":"${someId}","status":"processing","service":{"name":"nul\\u0000","version":"1"}}`,
        `{"job_id":"${someId}","status":"processing","service":{"name":"half\\ud800","version":"1"}}`,
        '',
      ];
      const v = rng.pick(variants);
      return { data: typeof v === 'string' ? enc.encode(v) : v, headers, msgId };
    }
    case 'SCHEMA_INVALID': {
      const variants: unknown[] = [
        { ...valid, status: 'finished' },
        { job_id: someId, status: 'done' },
        { ...valid, job_id: `job-${someId}` },
        {
          job_id: someId,
          status: 'error',
          service: svc,
          error: { code: 'X', message: 'y' },
          result_s3: valid.result_s3,
        },
        [1, 2, 3],
        null,
        42,
        { ...valid, service: { name: '', version: '1' } },
        { ...valid, metrics: [1, 2] },
        { ...valid, sent_at: 'yesterday' },
        { ...valid, service: { name: 'n'.repeat(201), version: '1' } },
        { job_id: someId, status: 'error', service: svc },
      ];
      return { data: enc.encode(json(rng.pick(variants))), headers, msgId };
    }
    case 'MISSING_MSG_ID': {
      // A well-formed result for a real job, without the header: it must never be applied.
      const jobId = opts.realJobId ?? someId;
      const body = rng.chance(0.5)
        ? {
            job_id: jobId,
            status: 'done',
            service: svc,
            result_s3: { bucket: 'arm-ka', key: `results/no-msg-id/${randomUUID()}.json` },
          }
        : {
            job_id: jobId,
            status: 'error',
            service: svc,
            error: { code: 'NO_MSG_ID', message: 'must never be applied' },
          };
      return { data: enc.encode(json(body)), headers, msgId: null };
    }
    case 'UNKNOWN_JOB': {
      const body = rng.chance(0.5) ? valid : { job_id: someId, status: 'processing', service: svc };
      return { data: enc.encode(json(body)), headers, msgId: `result:${someId}:1` };
    }
    case 'PAYLOAD_TOO_LARGE': {
      const pad = 'p'.repeat(opts.maxEnvelopeBytes + rng.int(1, 2_000));
      return { data: enc.encode(json({ ...valid, pad })), headers, msgId };
    }
    case 'SERVICE_MISMATCH': {
      // A well-formed ack or result for a real job, from a service the job was not published to.
      // Before any job exists, the same envelope names an unknown job.
      const jobId = opts.realJobId ?? someId;
      const expect = opts.realJobId === undefined ? 'UNKNOWN_JOB' : reason;
      const body = rng.chance(0.5)
        ? { job_id: jobId, status: 'processing', service: svc }
        : { job_id: jobId, status: 'error', service: svc, error: { code: 'HIJACK', message: 'not mine' } };
      return {
        data: enc.encode(json(body)),
        headers: { ...headers, [EXPECT_HEADER]: expect },
        msgId: `result:${jobId}:hostile:${someId}`,
      };
    }
    case 'RESULT_OBJECT_NOT_OWNED': {
      // A result naming an uploaded file's object. Whether a real job would still take a result
      // is decided on its row when the message arrives, so the harness cannot expect this reason
      // of a real job: it names a job that does not exist, which is quarantined first.
      const body = {
        ...valid,
        result_s3: { bucket: 'arm-ka', key: `uploads/chaos-hijack/${someId}.xlsx` },
      };
      return {
        data: enc.encode(json(body)),
        headers: { ...headers, [EXPECT_HEADER]: 'UNKNOWN_JOB' },
        msgId: `result:${someId}:1`,
      };
    }
  }
}

export { QUARANTINE_REASONS };

/** Files and jobs, created as `files add` + `jobs create` do, idempotent across lost commits. */
export class JobMaker {
  created = 0;
  superseded = 0;
  retries = 0;
  readonly byTarget: Record<string, number> = {};
  readonly jobIds: string[] = [];

  constructor(
    private readonly db: Kysely<Database>,
    private readonly seed: number,
  ) {}

  /** Create file `index` and its first job for `target`; retried through database outages. */
  async create(
    index: number,
    target: string,
    beforeJob?: (fileId: string) => void,
  ): Promise<{ fileId: string; jobId: string }> {
    const key = `uploads/chaos-${this.seed}/${index}.xlsx`;
    const out = await this.retry(async () => {
      const fileId = await this.fileFor(key, index);
      beforeJob?.(fileId);
      const existing = await this.db
        .selectFrom('recognition_job')
        .select('id')
        .where('file_id', '=', fileId)
        .where('attempt', '=', 1)
        .executeTakeFirst();
      const jobId = existing?.id ?? (await createJob(this.db, { fileId, targetService: target })).id;
      return { fileId, jobId };
    });
    this.created++;
    this.byTarget[target] = (this.byTarget[target] ?? 0) + 1;
    this.jobIds.push(out.jobId);
    return out;
  }

  /** A second job for a file (a new attempt): the first job is no longer the file's current job. */
  async supersede(fileId: string, target: string): Promise<string> {
    const jobId = await this.retry(async () => {
      const existing = await this.db
        .selectFrom('recognition_job')
        .select('id')
        .where('file_id', '=', fileId)
        .where('attempt', '=', 2)
        .executeTakeFirst();
      return existing?.id ?? (await createJob(this.db, { fileId, targetService: target })).id;
    });
    this.superseded++;
    this.created++;
    this.byTarget[target] = (this.byTarget[target] ?? 0) + 1;
    this.jobIds.push(jobId);
    return jobId;
  }

  private async fileFor(key: string, index: number): Promise<string> {
    const found = await sql<{ id: string }>`
      SELECT f.id FROM stored_file f JOIN s3_object o ON o.id = f.s3_object_id
      WHERE o.bucket = 'arm-ka' AND o.key = ${key}`.execute(this.db);
    if (found.rows[0]) return found.rows[0].id;
    return (
      await addFile(this.db, { bucket: 'arm-ka', key, name: `chaos-${index}.xlsx`, createdBy: 'chaos' })
    ).id;
  }

  private async retry<T>(work: () => Promise<T>): Promise<T> {
    const deadline = Date.now() + 120_000;
    for (;;) {
      try {
        return await work();
      } catch (err) {
        if (Date.now() > deadline) throw err;
        this.retries++;
        await sleep(300);
      }
    }
  }
}
