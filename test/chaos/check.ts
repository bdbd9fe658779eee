/**
 * The end of a chaos run: read back what happened (the results stream, the core-inbox consumer, the
 * database, the decisions the daemons logged) and check the invariants, each with its figures.
 *
 * How "every valid envelope was decided" is checked, and why that way: the inbox acks a message
 * only after the transaction holding its decision committed (applied: the job row, its effects and
 * a transition row; no change: nothing to write), so (1) the `core-inbox` ack floor reaching the
 * stream's last sequence with nothing pending or unacked proves that every stored message got a
 * committed decision. (2) As a second, independent witness, every decision is a JSON log line
 * (`loop: inbox`, `decision`, `job_id`, `msg_id`; LOG_LEVEL=debug so duplicates are logged too):
 * for each (job, msg id) the stream holds n copies of, the daemons must have logged at least n
 * decisions (more when a copy was redelivered after a SIGKILL). pino writes asynchronously, so a
 * SIGKILL can swallow the last lines of a process after their messages were acked; a missing line
 * is therefore accepted only when the database shows the decision (the transition row of an
 * applied envelope) or, at most once per SIGKILL, for a no-change decision, and every such case
 * is printed.
 */
import { jetstream, jetstreamManager, type ConsumerInfo } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { sql, type Kysely } from 'kysely';
import { FINAL_JOB_STATUSES, isFinalStatus, type JobStatus } from '../../machines/index.js';
import type { Database } from '../../src/db/schema.js';
import { INBOX_CONSUMER, RESULTS_STREAM } from '../../src/nats/subjects.js';
import { fileProblem, pathKey, pathProblem, type Step } from './invariants.js';
import { EXPECT_HEADER, ORIGIN_HEADER } from './load.js';

/** One message of RECOGNITION_RESULTS, classified by the harness's headers. */
export interface StreamMessage {
  seq: number;
  msgId: string | null;
  origin: string | null;
  /** The quarantine reason the harness expects, or null for a valid envelope. */
  expect: string | null;
  /** A valid envelope's parsed body. */
  body: Record<string, unknown> | null;
}

/** Decisions counted from the daemons' logs. */
export interface DecisionLedger {
  /** `${job_id}|${msg_id}` → decision → count. */
  byKey: Map<string, Record<string, number>>;
  byDecision: Record<string, number>;
  /** Stream sequences logged as quarantined, with how often. */
  quarantined: Map<number, number>;
  /** Every applied decision: its key, job, log time (ms since the epoch) and whether it was a result. */
  applied: Array<{ key: string; jobId: string; at: number; result: boolean }>;
}

export function createLedger(): DecisionLedger {
  return { byKey: new Map(), byDecision: {}, quarantined: new Map(), applied: [] };
}

/** Count one daemon log line, if it is an inbox decision. */
export function countLogLine(ledger: DecisionLedger, line: Record<string, unknown>): void {
  if (line['loop'] !== 'inbox') return;
  if (line['event'] === 'quarantined' && typeof line['stream_seq'] === 'number') {
    const seq = line['stream_seq'];
    ledger.quarantined.set(seq, (ledger.quarantined.get(seq) ?? 0) + 1);
    ledger.byDecision['quarantined'] = (ledger.byDecision['quarantined'] ?? 0) + 1;
    return;
  }
  const decision = line['decision'];
  if (typeof decision !== 'string' || typeof line['job_id'] !== 'string') return;
  const key = `${line['job_id']}|${typeof line['msg_id'] === 'string' ? line['msg_id'] : ''}`;
  const entry = ledger.byKey.get(key) ?? {};
  entry[decision] = (entry[decision] ?? 0) + 1;
  ledger.byKey.set(key, entry);
  ledger.byDecision[decision] = (ledger.byDecision[decision] ?? 0) + 1;
  if (decision === 'applied') {
    const t = typeof line['time'] === 'string' ? Date.parse(line['time']) : NaN;
    ledger.applied.push({
      key,
      jobId: line['job_id'],
      at: Number.isNaN(t) ? Date.now() : t,
      result: line['to'] !== 'processing',
    });
  }
}

/** Read every message of the results stream, in order. */
export async function readResultsStream(
  nc: NatsConnection,
): Promise<{ messages: StreamMessage[]; lastSeq: number }> {
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(RESULTS_STREAM);
  const lastSeq = info.state.last_seq;
  const messages: StreamMessage[] = [];
  if (info.state.messages === 0) return { messages, lastSeq };
  const consumer = await jetstream(nc).consumers.get(RESULTS_STREAM, {});
  const iter = await consumer.consume({ max_messages: 2_000 });
  const dec = new TextDecoder();
  // A stream with holes (messages deleted) never delivers last_seq: stop once nothing comes for a while.
  let lastAt = Date.now();
  const idle = setInterval(() => {
    if (Date.now() - lastAt > 10_000) iter.stop();
  }, 1_000);
  for await (const m of iter) {
    lastAt = Date.now();
    const expect = m.headers?.get(EXPECT_HEADER) || null;
    let body: Record<string, unknown> | null = null;
    if (!expect) {
      try {
        body = JSON.parse(dec.decode(m.data)) as Record<string, unknown>;
      } catch {
        body = null;
      }
    }
    messages.push({
      seq: m.seq,
      msgId: m.headers?.get('Nats-Msg-Id') || null,
      origin: m.headers?.get(ORIGIN_HEADER) || null,
      expect,
      body,
    });
    if (m.seq >= lastSeq) break;
  }
  clearInterval(idle);
  iter.stop();
  return { messages, lastSeq };
}

export async function readConsumer(nc: NatsConnection): Promise<ConsumerInfo> {
  const jsm = await jetstreamManager(nc);
  return jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER);
}

interface JobRowLite {
  id: string;
  file_id: string;
  status: JobStatus;
  target_service: string;
  service_name: string | null;
  service_version: string | null;
  error_code: string | null;
  error_message: string | null;
  metrics: Record<string, unknown> | null;
  result_schema_version: string | null;
  result_s3_object_id: string | null;
  result_msg_id: string | null;
  reply_deadline: Date | null;
  deadline_passed: boolean;
}

/** Everything the checks read from the database. */
export interface DbState {
  jobs: JobRowLite[];
  transitions: Map<string, Array<Step & { msg_id: string | null }>>;
  transitionRows: number;
  files: Array<{
    id: string;
    status: string;
    error_code: string | null;
    current_recognition_job_id: string | null;
  }>;
  resultObjects: Array<{ id: string; bucket: string; key: string; created_by: string }>;
  quarantine: Array<{ stream: string | null; stream_seq: string | null; reason: string }>;
}

export async function readDb(db: Kysely<Database>): Promise<DbState> {
  const jobs = (
    await sql<JobRowLite>`
      SELECT id, file_id, status, target_service, service_name, service_version, error_code, error_message, metrics,
             result_schema_version, result_s3_object_id, result_msg_id, reply_deadline,
             (reply_deadline IS NOT NULL AND reply_deadline < now()) AS deadline_passed
      FROM recognition_job ORDER BY created_at, id`.execute(db)
  ).rows;
  const rows = await db
    .selectFrom('recognition_job_transition')
    .select(['job_id', 'from_status', 'to_status', 'event', 'msg_id'])
    .orderBy('job_id')
    .orderBy('id')
    .execute();
  const transitions = new Map<string, Array<Step & { msg_id: string | null }>>();
  for (const r of rows) {
    const list = transitions.get(r.job_id) ?? [];
    list.push({ from: r.from_status, to: r.to_status, event: r.event, msg_id: r.msg_id });
    transitions.set(r.job_id, list);
  }
  const files = await db
    .selectFrom('stored_file')
    .select(['id', 'status', 'error_code', 'current_recognition_job_id'])
    .execute();
  const resultObjects = await db
    .selectFrom('s3_object')
    .select(['id', 'bucket', 'key', 'created_by'])
    .where('bucket_role', '=', 'results')
    .execute();
  const quarantine = await db
    .selectFrom('inbox_quarantine')
    .select(['stream', 'stream_seq', 'reason'])
    .execute();
  return { jobs, transitions, transitionRows: rows.length, files, resultObjects, quarantine };
}

/** One checked invariant. */
export interface Invariant {
  name: string;
  ok: boolean;
  /** Figures, one line. */
  figures: string;
  /** Up to a few examples of what failed (or what was tolerated). */
  notes: string[];
}

export interface CheckInput {
  stream: { messages: StreamMessage[]; lastSeq: number };
  consumer: ConsumerInfo;
  db: DbState;
  ledger: DecisionLedger;
  /** SIGKILLs of daemons during the run. */
  kills: number;
}

const sample = <T>(items: T[], n = 5): T[] => items.slice(0, n);
const count = <T>(items: T[], key: (t: T) => string): Record<string, number> => {
  const out: Record<string, number> = {};
  for (const t of items) out[key(t)] = (out[key(t)] ?? 0) + 1;
  return out;
};
export const fmt = (r: Record<string, number>): string =>
  Object.entries(r)
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(sortKeys(a)) === JSON.stringify(sortKeys(b));
}
function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === 'object') {
    return Object.fromEntries(
      Object.entries(v as Record<string, unknown>)
        .sort(([a], [b]) => (a < b ? -1 : 1))
        .map(([k, x]) => [k, sortKeys(x)]),
    );
  }
  return v;
}

/** Check every invariant. Pure: reads its input only. */
export function checkInvariants(input: CheckInput): Invariant[] {
  const { stream, consumer, db, ledger } = input;
  const out: Invariant[] = [];
  const valid = stream.messages.filter((m) => m.expect === null);
  const invalid = stream.messages.filter((m) => m.expect !== null);
  const jobsById = new Map(db.jobs.map((j) => [j.id, j]));
  const objectsById = new Map(db.resultObjects.map((o) => [o.id, o]));
  /** Valid stream messages by `${job_id}|${msg_id}`. */
  const validByKey = new Map<string, StreamMessage[]>();
  for (const m of valid) {
    const jobId = typeof m.body?.['job_id'] === 'string' ? m.body['job_id'] : '?';
    const key = `${jobId}|${m.msgId ?? ''}`;
    validByKey.set(key, [...(validByKey.get(key) ?? []), m]);
  }

  // 1. Paths of the machine.
  {
    const bad: string[] = [];
    for (const j of db.jobs) {
      const problem = pathProblem(db.transitions.get(j.id) ?? [], j.status);
      if (problem) bad.push(`${j.id}: ${problem}`);
    }
    out.push({
      name: 'transition log is a path of the machine',
      ok: bad.length === 0,
      figures: `${db.jobs.length - bad.length}/${db.jobs.length} jobs: their ${db.transitionRows} transition rows chain from pending through legal steps of the machine to the job's status`,
      notes: sample(bad),
    });
  }

  // 2. Nothing left waiting.
  {
    const open = db.jobs.filter((j) => !isFinalStatus(j.status));
    const overdue = open.filter((j) => j.deadline_passed);
    out.push({
      name: 'no job left open after its deadline',
      ok: open.length === 0,
      figures: `${db.jobs.length} jobs, all final: ${fmt(count(db.jobs, (j) => j.status))}; open ${open.length} (${overdue.length} past their deadline)`,
      notes: sample(
        open.map((j) => `${j.id} still ${j.status}${j.deadline_passed ? ' (deadline passed)' : ''}`),
      ),
    });
  }

  // 3. Results: one at most, each s3_object once, stored as sent.
  {
    const bad: string[] = [];
    let applied = 0;
    let withS3 = 0;
    const referenced = new Map<string, string>();
    for (const j of db.jobs) {
      const results = (db.transitions.get(j.id) ?? []).filter((s) => s.event === 'ENVELOPE_RESULT');
      if (results.length > 1) bad.push(`${j.id}: ${results.length} results applied`);
      const r = results[0];
      if (!r) {
        if (j.result_msg_id !== null || j.result_s3_object_id !== null)
          bad.push(`${j.id}: result columns set without an applied result`);
        continue;
      }
      applied++;
      if (j.result_msg_id !== r.msg_id)
        bad.push(`${j.id}: result_msg_id ${j.result_msg_id} ≠ transition msg id ${r.msg_id}`);
      const obj = j.result_s3_object_id ? objectsById.get(j.result_s3_object_id) : undefined;
      if (j.result_s3_object_id) {
        withS3++;
        if (!obj) bad.push(`${j.id}: result_s3_object_id ${j.result_s3_object_id} is not a results object`);
        const other = referenced.get(j.result_s3_object_id);
        if (other) bad.push(`${j.id} and ${other} share s3_object ${j.result_s3_object_id}`);
        referenced.set(j.result_s3_object_id, j.id);
      }
      // Stored as sent: some copy of the applied message in the stream has exactly these fields.
      const copies = validByKey.get(`${j.id}|${r.msg_id ?? ''}`) ?? [];
      const matches = copies.some((m) => {
        const b = m.body!;
        const svc = b['service'] as { name: string; version: string };
        const err = b['error'] as { code: string; message: string } | undefined;
        const s3 = b['result_s3'] as { bucket: string; key: string } | undefined;
        return (
          b['status'] === j.status &&
          svc.name === j.service_name &&
          svc.version === j.service_version &&
          (err?.code ?? null) === j.error_code &&
          (err?.message ?? null) === j.error_message &&
          ((b['result_schema_version'] as string | undefined) ?? null) === j.result_schema_version &&
          sameJson(b['metrics'] ?? null, j.metrics) &&
          (s3
            ? obj !== undefined &&
              obj.bucket === s3.bucket &&
              obj.key === s3.key &&
              obj.created_by === svc.name
            : j.result_s3_object_id === null)
        );
      });
      if (!matches)
        bad.push(
          `${j.id}: stored result differs from every stream copy of ${r.msg_id} (${copies.length} copies)`,
        );
    }
    const orphans = db.resultObjects.filter((o) => !referenced.has(o.id));
    for (const o of orphans) bad.push(`s3_object ${o.id} (${o.key}) is referenced by no job`);
    out.push({
      name: 'at most one result per job, its s3_object once, stored verbatim',
      ok: bad.length === 0,
      figures: `${applied} jobs with one applied result, 0 allowed with more; ${db.resultObjects.length} results s3_object rows = ${withS3} applied results with result_s3 (${referenced.size} distinct, ${orphans.length} orphan); every applied result equals a stream copy of its message`,
      notes: sample(bad),
    });
  }

  // 4. Every valid envelope decided.
  {
    const bad: string[] = [];
    const tolerated: string[] = [];
    let linesTotal = 0;
    let fromDb = 0;
    const invented: string[] = [];
    // Transition rows of envelopes must come from messages in the stream.
    for (const [jobId, steps] of db.transitions) {
      for (const s of steps) {
        if (!s.event.startsWith('ENVELOPE_')) continue;
        if (!validByKey.has(`${jobId}|${s.msg_id ?? ''}`))
          invented.push(`${jobId}: ${s.event} ${s.msg_id} is in no stream message`);
      }
    }
    for (const [key, copies] of validByKey) {
      const lines = ledger.byKey.get(key) ?? {};
      const logged = Object.values(lines).reduce((a, b) => a + b, 0);
      linesTotal += logged;
      if (logged >= copies.length) continue;
      const [jobId, msgId] = key.split('|') as [string, string];
      const appliedInDb = (db.transitions.get(jobId) ?? []).some(
        (s) => s.event.startsWith('ENVELOPE_') && (s.msg_id ?? '') === msgId,
      );
      const missing = copies.length - logged - (appliedInDb && !(lines['applied'] ?? 0) ? 1 : 0);
      if (appliedInDb && !(lines['applied'] ?? 0)) fromDb++;
      if (missing <= 0) continue;
      const what = `${key}: ${copies.length} in the stream (seq ${copies.map((c) => c.seq).join(',')}), ${logged} decisions logged${appliedInDb ? ', applied in the database' : ''}`;
      if (!jobsById.has(jobId)) bad.push(`${what}; no such job`);
      else tolerated.push(what);
    }
    const withinKills = tolerated.length <= input.kills;
    const ok = bad.length === 0 && invented.length === 0 && withinKills;
    out.push({
      name: 'every valid envelope applied or decided without change',
      ok,
      figures:
        `${valid.length} valid envelopes in the stream (${validByKey.size} distinct job/msg id), ${linesTotal} inbox decisions logged (${fmt(ledger.byDecision)}); ` +
        `${fromDb} decision lines lost with a SIGKILL but shown by a transition row; ${tolerated.length} no-change lines lost with a SIGKILL (allowed ≤ ${input.kills}); ` +
        `${invented.length} transition rows without a stream message`,
      notes: [
        ...sample(bad),
        ...sample(invented),
        ...sample(tolerated).map((t) => `${withinKills ? 'tolerated' : 'missing'}: ${t}`),
      ],
    });
  }

  // 5. Quarantine: every invalid message exactly once, nothing else.
  {
    const bad: string[] = [];
    const rowsBySeq = new Map<number, string[]>();
    let nullSeq = 0;
    for (const q of db.quarantine) {
      if (q.stream_seq === null || q.stream !== RESULTS_STREAM) {
        nullSeq++;
        continue;
      }
      const seq = Number(q.stream_seq);
      rowsBySeq.set(seq, [...(rowsBySeq.get(seq) ?? []), q.reason]);
    }
    for (const m of invalid) {
      const reasons = rowsBySeq.get(m.seq) ?? [];
      if (reasons.length !== 1) bad.push(`seq ${m.seq} (${m.expect}): ${reasons.length} quarantine rows`);
      else if (reasons[0] !== m.expect)
        bad.push(`seq ${m.seq}: quarantined ${reasons[0]}, expected ${m.expect}`);
    }
    const invalidSeqs = new Set(invalid.map((m) => m.seq));
    const wrong = [...rowsBySeq.keys()].filter((s) => !invalidSeqs.has(s));
    for (const s of wrong)
      bad.push(`seq ${s}: a valid envelope was quarantined (${rowsBySeq.get(s)!.join(', ')})`);
    if (nullSeq > 0) bad.push(`${nullSeq} quarantine rows without a stream sequence`);
    const notLogged = invalid.filter((m) => !ledger.quarantined.has(m.seq)).length;
    out.push({
      name: 'every invalid message quarantined exactly once',
      ok: bad.length === 0,
      figures: `${invalid.length} invalid messages in the stream (${fmt(count(invalid, (m) => m.expect!))}), ${db.quarantine.length} quarantine rows, ${wrong.length} valid ones quarantined; ${invalid.length - notLogged} quarantine decisions logged`,
      notes: sample(bad),
    });
  }

  // 6. core-inbox drained.
  {
    const c = consumer;
    const ok = c.num_pending === 0 && c.num_ack_pending === 0 && c.ack_floor.stream_seq === stream.lastSeq;
    out.push({
      name: 'core-inbox drained: everything acked',
      ok,
      figures: `ack floor ${c.ack_floor.stream_seq} = last stream seq ${stream.lastSeq}; pending ${c.num_pending}, unacked ${c.num_ack_pending}; ${stream.messages.length} messages read back`,
      notes:
        stream.messages.length === stream.lastSeq
          ? []
          : [`read ${stream.messages.length} messages, last seq ${stream.lastSeq}`],
    });
  }

  // 7. Files agree with their current jobs.
  {
    const bad: string[] = [];
    for (const f of db.files) {
      const job = f.current_recognition_job_id ? jobsById.get(f.current_recognition_job_id) : undefined;
      if (!job) {
        bad.push(`file ${f.id}: no current job`);
        continue;
      }
      const p = fileProblem(f, job);
      if (p) bad.push(`file ${f.id}: ${p}`);
    }
    out.push({
      name: 'every file agrees with its current job',
      ok: bad.length === 0,
      figures: `${db.files.length - bad.length}/${db.files.length} files: ${fmt(count(db.files, (f) => `${f.status}${f.error_code ? `(${f.error_code})` : ''}`))}`,
      notes: sample(bad),
    });
  }
  return out;
}

/** The most common paths, for the summary. */
export function pathHistogram(db: DbState, top = 10): Array<[string, number]> {
  const h = count(db.jobs, (j) => pathKey(db.transitions.get(j.id) ?? []));
  return Object.entries(h)
    .sort((a, b) => b[1] - a[1])
    .slice(0, top);
}

export { FINAL_JOB_STATUSES };
