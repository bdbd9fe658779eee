/**
 * The conformance check: drive a recognition service through a private set of jobs on a real NATS
 * and report, check by check, whether it keeps the contract (docs/contract.md). It uses streams and
 * a consumer of its own (`CONFORMANCE_<ID>_*`), never the core's, points the service's exchange
 * variables at them and deletes them at the end. The checks: ack-deadline, result-schema,
 * service-name, traceparent, stable-msg-ids, invalid-job, sigterm (docs/contract.md, "Checking a service: conformance").
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import {
  AckPolicy,
  DeliverPolicy,
  RetentionPolicy,
  StorageType,
  jetstream,
  jetstreamManager,
} from '@nats-io/jetstream';
import { headers as natsHeaders, nanos, type Msg, type NatsConnection } from '@nats-io/nats-core';
import { INVALID_JOB_MESSAGE } from './serve.js';
import { EXCHANGE_ENV, envelopeMsgId, type Exchange } from './exchange.js';
import { checkResultEnvelope } from './validate.js';

/** The names of the checks, in the order they run. */
export const CONFORMANCE_CHECKS = [
  'ack-deadline',
  'result-schema',
  'service-name',
  'traceparent',
  'stable-msg-ids',
  'invalid-job',
  'sigterm',
] as const;
export type ConformanceCheckName = (typeof CONFORMANCE_CHECKS)[number];

export interface ConformanceCheck {
  name: ConformanceCheckName;
  ok: boolean;
  detail: string;
}

export interface ConformanceReport {
  service: string;
  ok: boolean;
  checks: ConformanceCheck[];
  /** The last lines the service printed, for a failed run. */
  serviceOutput: string[];
}

export interface ConformanceOptions {
  /** A connection to the NATS the service connects to. */
  nats: NatsConnection;
  /** Its URL, given to the service as `NATS_URL`. */
  natsUrl: string;
  /** The target service: subject suffix and `service.name` expected. */
  service: string;
  /** The service's command and arguments, spawned without a shell (signals reach it). */
  command: readonly string[];
  /** The service's environment besides the exchange variables (default: this process's). */
  env?: NodeJS.ProcessEnv;
  /** Within how long the `processing` ack must arrive (default 10 s). */
  ackTimeoutMs?: number;
  /** Within how long a result must arrive; also the jobs' `reply_deadline` (default 30 s). */
  resultTimeoutMs?: number;
  /** Within how long SIGTERM must stop the service (default 30 s). */
  stopTimeoutMs?: number;
  /** The ack wait of the service's durable consumer on the private stream (default 5 s). */
  ackWaitMs?: number;
  /** Each check as it is decided. */
  onCheck?: ((check: ConformanceCheck) => void) | undefined;
}

interface Seen {
  at: number;
  msgId: string;
  traceparent: string;
  body: unknown;
  envelope: Record<string, unknown> | undefined;
}

const TRACEPARENT_FORMAT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `p`'s value, or null when it takes longer than `ms` (the timer is cleared either way). */
async function within<T>(p: Promise<T>, ms: number): Promise<T | null> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<null>((r) => (timer = setTimeout(() => r(null), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

/** The private exchange of run `id`. Pure. */
export function conformanceExchange(id: string): Exchange & { resultsStream: string } {
  return {
    jobsStream: `CONFORMANCE_${id.toUpperCase()}_JOBS`,
    resultsStream: `CONFORMANCE_${id.toUpperCase()}_RESULTS`,
    jobSubjectPrefix: `conformance_${id}.recognition.job.`,
    resultSubject: `conformance_${id}.recognition.result`,
  };
}

/** A job message as the core publishes it. */
function jobMessage(jobId: string, deadlineMs: number): Record<string, unknown> {
  const fileId = randomUUID();
  const now = Date.now();
  return {
    job_id: jobId,
    file_id: fileId,
    attempt: 1,
    source_s3: { bucket: 'conformance-uploads', key: `uploads/${fileId}/conformance.csv` },
    result_s3_prefix: { bucket: 'conformance-results', key_prefix: `results/${fileId}/${jobId}/` },
    reply_subject: 'recognition.result',
    reply_deadline: new Date(now + deadlineMs).toISOString(),
    published_at: new Date(now).toISOString(),
  };
}

/** Run every check against the service; never throws for a failing service, only for NATS. */
export async function runConformance(opts: ConformanceOptions): Promise<ConformanceReport> {
  const ackTimeoutMs = opts.ackTimeoutMs ?? 10_000;
  const resultTimeoutMs = opts.resultTimeoutMs ?? 30_000;
  const stopTimeoutMs = opts.stopTimeoutMs ?? 30_000;
  const ackWaitMs = opts.ackWaitMs ?? 5_000;
  const id = randomBytes(4).toString('hex');
  const ex = conformanceExchange(id);
  const subject = `${ex.jobSubjectPrefix}${opts.service}`;
  const jsm = await jetstreamManager(opts.nats);
  const js = jetstream(opts.nats);
  const checks: ConformanceCheck[] = [];
  const output: string[] = [];
  const seen = new Map<string, Seen[]>();
  const children: ChildProcess[] = [];

  const record = (name: ConformanceCheckName, ok: boolean, detail: string) => {
    const c = { name, ok, detail };
    checks.push(c);
    opts.onCheck?.(c);
  };

  await jsm.streams.add({
    name: ex.jobsStream,
    subjects: [`${ex.jobSubjectPrefix}>`],
    storage: StorageType.Memory,
    retention: RetentionPolicy.Limits,
    duplicate_window: nanos(120_000),
  });
  await jsm.streams.add({
    name: ex.resultsStream,
    subjects: [ex.resultSubject],
    storage: StorageType.Memory,
    duplicate_window: nanos(120_000),
  });
  await jsm.consumers.add(ex.jobsStream, {
    durable_name: opts.service,
    filter_subject: subject,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(ackWaitMs),
    max_deliver: 5,
  });
  const sub = opts.nats.subscribe(ex.resultSubject, {
    callback: (_err, msg: Msg) => {
      let body: unknown;
      try {
        body = msg.json();
      } catch {
        body = undefined;
      }
      const envelope =
        body && typeof body === 'object' && !Array.isArray(body)
          ? (body as Record<string, unknown>)
          : undefined;
      const jobId = typeof envelope?.job_id === 'string' ? envelope.job_id : '';
      const list = seen.get(jobId) ?? [];
      list.push({
        at: Date.now(),
        msgId: msg.headers?.get('Nats-Msg-Id') ?? '',
        traceparent: msg.headers?.get('traceparent') ?? '',
        body,
        envelope,
      });
      seen.set(jobId, list);
    },
  });
  await opts.nats.flush();

  function start(): { child: ChildProcess; exited: Promise<{ code: number | null; signal: string | null }> } {
    const [cmd, ...args] = opts.command;
    if (!cmd) throw new Error('conformance: no command to run the service');
    const child = spawn(cmd, args, {
      env: {
        ...(opts.env ?? process.env),
        NATS_URL: opts.natsUrl,
        [EXCHANGE_ENV.jobsStream]: ex.jobsStream,
        [EXCHANGE_ENV.jobSubjectPrefix]: ex.jobSubjectPrefix,
        [EXCHANGE_ENV.resultSubject]: ex.resultSubject,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(child);
    // A command that cannot start (not found, not executable) fails every check, and says why.
    child.on('error', (err) => output.push(`cannot run ${cmd}: ${err.message}`));
    for (const stream of [child.stdout!, child.stderr!]) {
      stream.setEncoding('utf8');
      stream.on('data', (chunk: string) => {
        output.push(...chunk.split('\n').filter(Boolean));
        if (output.length > 200) output.splice(0, output.length - 200);
      });
    }
    const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
      child.once('close', (code, signal) => resolve({ code, signal })),
    );
    return { child, exited };
  }

  async function publishJob(body: unknown, msgId: string, traceparent?: string): Promise<number> {
    const h = natsHeaders();
    h.set('Nats-Msg-Id', msgId);
    if (traceparent) h.set('traceparent', traceparent);
    const data = typeof body === 'string' ? body : JSON.stringify(body);
    const at = Date.now();
    await js.publish(subject, data, { headers: h });
    return at;
  }

  const envelopes = (jobId: string) => seen.get(jobId) ?? [];
  const statusOf = (s: Seen) => (typeof s.envelope?.status === 'string' ? s.envelope.status : '');
  const isResult = (s: Seen) => ['done', 'needs_check', 'error'].includes(statusOf(s));
  async function until(pred: () => boolean, ms: number): Promise<boolean> {
    const end = Date.now() + ms;
    while (!pred()) {
      if (Date.now() > end) return false;
      await sleep(25);
    }
    return true;
  }

  let current = start();
  try {
    // One job, with a trace context of the conformance run's own.
    const jobA = randomUUID();
    const traceId = randomBytes(16).toString('hex');
    const bodyA = jobMessage(jobA, resultTimeoutMs);
    const sentA = await publishJob(
      bodyA,
      `job:${jobA}:1`,
      `00-${traceId}-${randomBytes(8).toString('hex')}-01`,
    );
    const acked = await until(() => envelopes(jobA).some((s) => statusOf(s) === 'processing'), ackTimeoutMs);
    const ack = envelopes(jobA).find((s) => statusOf(s) === 'processing');
    record(
      'ack-deadline',
      acked,
      acked
        ? `processing ack ${ack!.at - sentA} ms after publication`
        : `no processing ack within ${ackTimeoutMs} ms`,
    );
    const answered = await until(() => envelopes(jobA).some(isResult), resultTimeoutMs);
    await sleep(200);
    const first = [...envelopes(jobA)];
    const invalid = first
      .map((s) => ({ s, check: checkResultEnvelope(s.body) }))
      .filter((x) => !x.check.valid);
    record(
      'result-schema',
      answered && first.length > 0 && invalid.length === 0,
      !answered
        ? `no result within ${resultTimeoutMs} ms`
        : invalid.length
          ? `${invalid.length} envelope(s) fail the result schema: ${invalid
              .map((x) =>
                x.check.valid
                  ? ''
                  : x.check.errors.map((e) => `${e.instancePath || '/'} ${e.message}`).join('; '),
              )
              .join(' | ')}`
          : `${first.length} envelope(s), all valid; result ${statusOf(first.find(isResult)!)}`,
    );
    const names = [
      ...new Set(first.map((s) => JSON.stringify((s.envelope?.service as { name?: unknown })?.name))),
    ];
    record(
      'service-name',
      first.length > 0 && names.length === 1 && names[0] === JSON.stringify(opts.service),
      first.length === 0
        ? 'no envelope to judge'
        : `service.name ${names.join(', ')}; expected "${opts.service}"`,
    );
    const untraced = first.filter((s) => TRACEPARENT_FORMAT.exec(s.traceparent)?.[1] !== traceId);
    record(
      'traceparent',
      first.length > 0 && untraced.length === 0,
      first.length === 0
        ? 'no envelope to judge'
        : untraced.length
          ? `${untraced.length} of ${first.length} envelope(s) without the job's trace (traceparent ${untraced
              .map((s) => JSON.stringify(s.traceparent))
              .join(', ')})`
          : `every envelope continues trace ${traceId}`,
    );

    // The same job message again, as JetStream hands it over after a lost ack.
    const before = first.length;
    const firstResults = first.filter(isResult).length;
    await publishJob(bodyA, `conformance-redelivery:${jobA}`);
    const redelivered = await until(
      () => envelopes(jobA).filter(isResult).length > firstResults,
      resultTimeoutMs,
    );
    await sleep(200);
    const all = envelopes(jobA);
    const byStatus = new Map<string, Set<string>>();
    for (const s of all) {
      const set = byStatus.get(statusOf(s)) ?? new Set<string>();
      set.add(s.msgId);
      byStatus.set(statusOf(s), set);
    }
    const unstable = [...byStatus].filter(([, ids]) => ids.size > 1 || ids.has(''));
    record(
      'stable-msg-ids',
      redelivered && all.length > before && unstable.length === 0,
      !redelivered
        ? `no result for the job delivered again within ${resultTimeoutMs} ms`
        : unstable.length
          ? unstable
              .map(([st, ids]) => `${st}: ${[...ids].map((i) => JSON.stringify(i)).join(', ')}`)
              .join('; ')
          : `the same ids on both deliveries: ${[...byStatus].map(([st, ids]) => `${st} ${[...ids][0]}`).join(', ')}`,
    );

    // A job message the schema refuses, and one that is not JSON.
    const jobB = randomUUID();
    await publishJob({ job_id: jobB, attempt: 1, reply_subject: 'recognition.result' }, `job:${jobB}:1`);
    await publishJob('{not json', `conformance-garbage:${id}`);
    const answeredB = await until(() => envelopes(jobB).some(isResult), resultTimeoutMs);
    // Both messages leave the consumer (terminated), within two ack waits.
    const settled = await (async () => {
      const end = Date.now() + ackWaitMs * 2 + 1_000;
      for (;;) {
        const info = await jsm.consumers.info(ex.jobsStream, opts.service);
        if (info.num_ack_pending === 0 && info.num_pending === 0) return { ok: true, info };
        if (Date.now() > end) return { ok: false, info };
        await sleep(100);
      }
    })();
    const b = envelopes(jobB).find(isResult);
    const bError = (b?.envelope?.error as { code?: unknown } | undefined)?.code;
    const problems: string[] = [];
    if (!answeredB) problems.push(`no answer within ${resultTimeoutMs} ms`);
    else {
      if (statusOf(b!) !== 'error' || bError !== INVALID_JOB_MESSAGE)
        problems.push(`answered ${statusOf(b!)} ${JSON.stringify(bError)}, not error ${INVALID_JOB_MESSAGE}`);
      if (b!.msgId !== envelopeMsgId('result', jobB, 1))
        problems.push(`Nats-Msg-Id ${JSON.stringify(b!.msgId)}, not result:${jobB}:1`);
      if (!checkResultEnvelope(b!.body).valid) problems.push('the answer fails the result schema');
    }
    if (!settled.ok)
      problems.push(
        `the messages were not terminated (${settled.info.num_ack_pending} unacked, ${settled.info.num_redelivered} redelivered)`,
      );
    if (envelopes('').length > 0) problems.push(`${envelopes('').length} envelope(s) naming no job`);
    record(
      'invalid-job',
      problems.length === 0,
      problems.length
        ? problems.join('; ')
        : `answered error ${INVALID_JOB_MESSAGE} as result:<job_id>:1, both terminated`,
    );

    // SIGTERM with jobs in hand.
    const jobsD = [randomUUID(), randomUUID(), randomUUID()];
    for (const j of jobsD) await publishJob(jobMessage(j, resultTimeoutMs), `job:${j}:1`);
    await until(() => jobsD.every((j) => envelopes(j).length > 0), ackTimeoutMs);
    const inHand = jobsD.filter((j) => !envelopes(j).some(isResult)).length;
    current.child.kill('SIGTERM');
    const stopped = await within(current.exited, stopTimeoutMs);
    const stopProblems: string[] = [];
    if (!stopped) {
      stopProblems.push(`still running ${stopTimeoutMs} ms after SIGTERM`);
      current.child.kill('SIGKILL');
      await current.exited;
    } else if (stopped.code !== 0) stopProblems.push(`exit code ${stopped.code}, signal ${stopped.signal}`);
    const missing = jobsD.filter((j) => !envelopes(j).some(isResult));
    let restartedFor = 0;
    if (missing.length > 0) {
      // Not lost if JetStream hands them to the next copy.
      restartedFor = missing.length;
      current = start();
      await until(() => jobsD.every((j) => envelopes(j).some(isResult)), ackWaitMs + resultTimeoutMs);
    }
    const lost = jobsD.filter((j) => !envelopes(j).some(isResult));
    if (lost.length) stopProblems.push(`${lost.length} of ${jobsD.length} job(s) never got a result`);
    record(
      'sigterm',
      stopProblems.length === 0,
      stopProblems.length
        ? stopProblems.join('; ')
        : `stopped with exit code 0, ${inHand} job(s) in hand at SIGTERM; every job answered${
            restartedFor ? ` (${restartedFor} by the restarted copy)` : ''
          }`,
    );
  } finally {
    for (const child of children)
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const done = await within(new Promise((r) => child.once('close', r)), stopTimeoutMs);
        if (done === null) child.kill('SIGKILL');
      }
    sub.unsubscribe();
    await jsm.streams.delete(ex.jobsStream).catch(() => undefined);
    await jsm.streams.delete(ex.resultsStream).catch(() => undefined);
  }
  for (const name of CONFORMANCE_CHECKS)
    if (!checks.some((c) => c.name === name)) record(name, false, 'not run: the run stopped before it');
  return { service: opts.service, ok: checks.every((c) => c.ok), checks, serviceOutput: output.slice(-30) };
}
