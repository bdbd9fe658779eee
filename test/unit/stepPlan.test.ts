/**
 * The step's pure planning: a batch decided against the rows its read returned, and the write it
 * plans — the typed arrays of the one write statement (objects, jobs, files, transitions, then
 * the count of jobs it must find). No database.
 */
import { describe, expect, it } from 'vitest';
import type { JobEventInput } from '../../machines/index.js';
import type { ResultObjects, StepItem } from '../../src/step/index.js';
import { planBatch } from '../../src/step/planLocked.js';
import { planUnlocked } from '../../src/step/planUnlocked.js';
import { CONTEXT_COLUMNS } from '../../src/db/jobRow.js';
import type { StepRow } from '../../src/step/statements.js';
import { WRITE_PARAMETERS, WRITE_PARTS, type WritePart } from '../../src/step/write.js';

const NOW = new Date('2025-03-01T10:00:00.000Z');
const DEADLINE = new Date('2025-03-01T10:09:00.000Z');
const service = { name: 'tabular-parser', version: '2.3.1' };
const RULE = { resultsBucket: 'arm-ka' };
/** The rule, and no object registered before the batch. */
const OBJECTS: ResultObjects = { rule: RULE, registered: new Map() };

/** A published job's row as a read returns it (the columns a decision depends on), with its address and version. */
function publishedRow(n: number, overrides: Partial<StepRow> = {}): StepRow {
  return {
    id: `00000000-0000-4000-8000-00000000000${n}`,
    file_id: `00000000-0000-4000-9000-00000000000${n}`,
    attempt: 1,
    target_service: service.name,
    status: 'published',
    publish_attempts: 1,
    reply_deadline: String(DEADLINE.getTime()),
    result_msg_id: null,
    file_is_current: true,
    db_now: String(NOW.getTime()),
    row_address: `(0,${n})`,
    version: `${700 + n}`,
    ...overrides,
  };
}

const ack = (jobId: string): JobEventInput => ({
  type: 'ENVELOPE_PROCESSING',
  msgId: `ack:${jobId}`,
  service,
});
/** Where `row`'s job's result belongs. */
const resultKey = (row: StepRow) => `results/${row.file_id}/${row.id}/result.json`;
const done = (row: StepRow, resultS3 = { bucket: 'arm-ka', key: resultKey(row) }): JobEventInput => ({
  type: 'ENVELOPE_RESULT',
  msgId: `result:${row.id}`,
  status: 'done',
  service,
  resultS3,
  resultSchemaVersion: '1.0',
  metrics: { pages: 3 },
});
const failed = (jobId: string): JobEventInput => ({
  type: 'ENVELOPE_RESULT',
  msgId: `result:${jobId}`,
  status: 'error',
  service,
  error: { code: 'UNSUPPORTED_FORMAT', message: 'xls 95 is not supported' },
});

type Rows = Array<Record<string, unknown>>;

/** The elements of a one-dimensional array literal (`NULL` as null, quoted elements unescaped). */
function elementsOf(literal: string): Array<string | null> {
  const out: Array<string | null> = [];
  const body = literal.slice(1, -1);
  for (let i = 0; i < body.length;) {
    if (body[i] === '"') {
      let text = '';
      for (i++; body[i] !== '"'; i++) text += body[i] === '\\' ? body[++i] : body[i];
      out.push(text);
      i += 2;
    } else {
      const end = body.indexOf(',', i) === -1 ? body.length : body.indexOf(',', i);
      const text = body.slice(i, end);
      out.push(text === 'NULL' ? null : text);
      i = end + 1;
    }
  }
  return out;
}

/** The write's parameters as rows: each part's arrays zipped back into one object per element (as text). */
function parsed(params: unknown[]): {
  objects: Rows;
  jobs: Rows;
  files: Rows;
  transitions: Rows;
  /** The batch's distinct transition details, which the transition rows name by place (from 1). */
  details: unknown[] | null;
  count: unknown;
  returnsJobs: unknown;
  expectedIds: unknown;
  expectedStatuses: unknown;
  expectedTargets: unknown;
  expectedFiles: unknown;
} {
  let n = 0;
  const out: Record<string, Rows> = {};
  for (const part of WRITE_PARTS) {
    const columns = Object.keys(WRITE_PARAMETERS[part]);
    const literals = columns.map(() => params[n++] as string | null);
    // An array of nulls goes as null; the longest array counts the part's rows, as unnest does.
    const rows = Math.max(...literals.map((l) => elementsOf(l ?? '{}').length));
    const arrays = literals.map((l) => (l === null ? Array<null>(rows).fill(null) : elementsOf(l)));
    out[part] = arrays[0]!.map((_, i) => Object.fromEntries(columns.map((c, k) => [c, arrays[k]![i]])));
  }
  expect(params).toHaveLength(n + 7);
  const details = params[n] as string | null;
  return {
    objects: out['objects']!,
    jobs: out['jobs']!,
    files: out['files']!,
    transitions: out['transitions']!,
    details: details === null ? null : elementsOf(details).map((d) => JSON.parse(d!) as unknown),
    count: params[n + 1],
    returnsJobs: params[n + 2],
    expectedIds: params[n + 3],
    expectedStatuses: params[n + 4],
    expectedTargets: params[n + 5],
    expectedFiles: params[n + 6],
  };
}

/** The write's parameter for `column` of `part`, as planned. */
function param(params: unknown[], part: WritePart, column: string): unknown {
  let n = 0;
  for (const p of WRITE_PARTS) {
    const columns = Object.keys(WRITE_PARAMETERS[p]);
    if (p === part) return params[n + columns.indexOf(column)];
    n += columns.length;
  }
  throw new Error(part);
}

/**
 * A job's written row (as text): its address, version and status, the columns `assigned` sets
 * with their values, null for every other column (left as it is), and the mask of the assigned
 * columns.
 */
function writtenJob(
  r: StepRow,
  where: { ctid?: string; version?: string; status: string },
  assigned: Record<string, string | null>,
  object: { result_bucket: string; result_key: string } | null = null,
): Record<string, unknown> {
  const row: Record<string, unknown> = { ctid: r.row_address, version: r.version, ...where };
  let mask = 0;
  CONTEXT_COLUMNS.forEach(([column], i) => {
    row[column] = column in assigned ? assigned[column] : null;
    if (column in assigned) mask |= 1 << i;
  });
  return { ...row, assigned: String(mask), result_bucket: null, result_key: null, ...object };
}

describe('planBatch', () => {
  it('two events of one job: one write of its state after both, its object, its file once', () => {
    const row = publishedRow(1);
    const plan = planBatch([row], OBJECTS);
    const { outcomes, write } = plan.next([
      { jobId: row.id, event: ack(row.id) },
      { jobId: row.id, event: done(row) },
    ]);

    expect(outcomes.map((o) => [o.decision, o.from, o.to])).toEqual([
      ['applied', 'published', 'processing'],
      ['applied', 'processing', 'done'],
    ]);
    const { objects, jobs, files, transitions, details, count } = parsed(write!.params);
    // The registered result object, once.
    expect(objects).toEqual([{ bucket: 'arm-ka', key: resultKey(row), created_by: service.name }]);
    // The job's status after both events and every column they assigned (to null too), at the
    // address and version it was read at, pointing at its result object by bucket and key (the
    // statement resolves the id). The columns neither event assigned stay as they are.
    expect(jobs).toEqual([
      writtenJob(
        row,
        { status: 'done' },
        {
          service_name: service.name,
          service_version: service.version,
          next_publish_at: null,
          started_at: NOW.toISOString(),
          finished_at: NOW.toISOString(),
          metrics: JSON.stringify({ pages: 3 }),
          error_code: null,
          error_message: null,
          result_schema_version: '1.0',
          result_msg_id: `result:${row.id}`,
        },
        { result_bucket: 'arm-ka', result_key: resultKey(row) },
      ),
    ]);
    // The file change and both transitions name the job by its place among the job rows.
    expect(files).toEqual([{ job: '1', status: 'PROCESSING', error_code: null }]);
    // Both transitions, in the order applied, each naming its detail by place.
    expect(transitions).toMatchObject([
      {
        job: '1',
        from_status: 'published',
        to_status: 'processing',
        event: 'ENVELOPE_PROCESSING',
        detail: '1',
      },
      { job: '1', from_status: 'processing', to_status: 'done', event: 'ENVELOPE_RESULT', detail: '2' },
    ]);
    expect(details).toEqual([{ service: service.name }, { status: 'done', service: service.name }]);
    expect(count).toBe(1);
    expect(write!.jobIds).toEqual([row.id]);
    // A column no job of the write sets (or sets only to null) goes as null, not as an array.
    expect(param(write!.params, 'jobs', 'published_at')).toBeNull();
    expect(param(write!.params, 'jobs', 'error_code')).toBeNull();
    expect(param(write!.params, 'jobs', 'finished_at')).toBe(`{${NOW.toISOString()}}`);
    // The batch's only chunk: the statement need not return where the job stands now.
    expect(parsed(write!.params).returnsJobs).toBe(false);
    // The locked paths' rows are locked already: no reads to check.
    expect(parsed(write!.params)).toMatchObject({
      expectedIds: null,
      expectedStatuses: null,
      expectedTargets: null,
      expectedFiles: null,
    });
  });

  it("the watchdog's rows: each job at its address and version, its file by id", () => {
    const passed = { reply_deadline: String(NOW.getTime() - 1) };
    const rows = [publishedRow(1, passed), publishedRow(2, passed)];
    const { write } = planBatch(rows, OBJECTS).next(
      rows.map((r): StepItem => ({ jobId: r.id, event: { type: 'DEADLINE_PASSED' } })),
    );
    const { objects, jobs, files, transitions, count } = parsed(write!.params);
    expect(objects).toEqual([]);
    expect(jobs.map((c) => [c['ctid'], c['version'], c['status']])).toEqual(
      rows.map((r) => [r.row_address, r.version, 'timeout']),
    );
    expect(files.map((f) => f['job'])).toEqual(['1', '2']);
    expect(transitions).toHaveLength(2);
    expect(count).toBe(2);
  });

  it('file changes and transitions name their job by its place among the job rows written', () => {
    // The second job's ack repeats (it is processing already): it changes nothing, has no row.
    const rows = [publishedRow(1), publishedRow(2, { status: 'processing' }), publishedRow(3)];
    const { write } = planBatch(rows, OBJECTS).next([
      { jobId: rows[2]!.id, event: ack(rows[2]!.id) },
      { jobId: rows[1]!.id, event: ack(rows[1]!.id) },
      { jobId: rows[0]!.id, event: failed(rows[0]!.id) },
    ]);
    const { jobs, files, transitions } = parsed(write!.params);
    const rowAt = (place: unknown) => jobs[Number(place) - 1]!['ctid'];
    expect(jobs.map((j) => j['ctid'])).toEqual([rows[2]!.row_address, rows[0]!.row_address]);
    expect(files.map((f) => rowAt(f['job']))).toEqual([rows[2]!.row_address, rows[0]!.row_address]);
    expect(files.map((f) => f['status'])).toEqual(['PROCESSING', 'ERROR']);
    expect(transitions.map((t) => [rowAt(t['job']), t['event']])).toEqual([
      [rows[2]!.row_address, 'ENVELOPE_PROCESSING'],
      [rows[0]!.row_address, 'ENVELOPE_RESULT'],
    ]);
  });

  it('transition details: a document met again after another keeps its first place', () => {
    const rows = [publishedRow(1), publishedRow(2), publishedRow(3)];
    const result = (jobId: string, status: 'done' | 'needs_check'): JobEventInput => ({
      type: 'ENVELOPE_RESULT',
      msgId: `result:${jobId}`,
      status,
      service,
    });
    const statuses = ['done', 'needs_check', 'done'] as const;
    const { write } = planBatch(rows, OBJECTS).next(
      rows.map((r, i) => ({ jobId: r.id, event: result(r.id, statuses[i]!) })),
    );
    const { transitions, details } = parsed(write!.params);
    expect(details).toEqual([
      { status: 'done', service: service.name },
      { status: 'needs_check', service: service.name },
    ]);
    expect(transitions.map((t) => t['detail'])).toEqual(['1', '2', '1']);
  });

  it('result objects: one insert row per bucket and key, in their order, each job pointing at its own', () => {
    const other = { name: 'pdf-parser', version: '1.0.0' };
    const rows = [publishedRow(1), publishedRow(2, { target_service: other.name }), publishedRow(3)];
    const result = (row: StepRow, name: string, by = service): JobEventInput => ({
      type: 'ENVELOPE_RESULT',
      msgId: `result:${row.id}`,
      status: 'done',
      service: by,
      resultS3: { bucket: 'arm-ka', key: `results/${row.file_id}/${row.id}/${name}` },
    });
    const { write } = planBatch(rows, OBJECTS).next([
      { jobId: rows[2]!.id, event: result(rows[2]!, 'b.json') },
      { jobId: rows[0]!.id, event: result(rows[0]!, 'z.json') },
      { jobId: rows[1]!.id, event: result(rows[1]!, 'a.json', other) },
    ]);
    const { objects, jobs, transitions, details } = parsed(write!.params);
    // The details the results share go once: each row names its own by place.
    expect(details).toEqual([
      { status: 'done', service: service.name },
      { status: 'done', service: other.name },
    ]);
    expect(transitions.map((t) => t['detail'])).toEqual(['1', '1', '2']);
    const key = (row: StepRow, name: string) => `results/${row.file_id}/${row.id}/${name}`;
    expect(objects).toEqual([
      { bucket: 'arm-ka', key: key(rows[0]!, 'z.json'), created_by: service.name },
      { bucket: 'arm-ka', key: key(rows[1]!, 'a.json'), created_by: other.name },
      { bucket: 'arm-ka', key: key(rows[2]!, 'b.json'), created_by: service.name },
    ]);
    // Each job points at its own object by bucket and key.
    expect(jobs.map((j) => j['result_key'])).toEqual([
      key(rows[2]!, 'b.json'),
      key(rows[0]!, 'z.json'),
      key(rows[1]!, 'a.json'),
    ]);
  });

  it("a result whose object is not its job's own is not applied: its job stays as it was, nothing of it is written", () => {
    const rows = [publishedRow(1), publishedRow(2), publishedRow(3)];
    // An object registered at the third job's own key before its result came (here: as an upload).
    const upload = { bucket: 'arm-ka', key: resultKey(rows[2]!) };
    const objects: ResultObjects = {
      rule: RULE,
      registered: new Map([
        [
          `${upload.bucket.length}:${upload.bucket}/${upload.key}`,
          { bucket_role: 'uploads', created_by: 'cli' },
        ],
      ]),
    };
    const plan = planBatch(rows, objects);
    const { outcomes, write } = plan.next([
      // Another job's prefix, another bucket, an object already registered.
      { jobId: rows[0]!.id, event: done(rows[0]!, { bucket: 'arm-ka', key: resultKey(rows[1]!) }) },
      { jobId: rows[1]!.id, event: done(rows[1]!, { bucket: 'elsewhere', key: resultKey(rows[1]!) }) },
      { jobId: rows[2]!.id, event: done(rows[2]!, upload) },
      // The first job's own object, after its refused result: applied from where the job was.
      { jobId: rows[0]!.id, event: done(rows[0]!) },
    ]);
    expect(outcomes.map((o) => [o.decision, o.from, o.to, o.reason])).toEqual([
      ['object_not_owned', 'published', 'published', 'prefix'],
      ['object_not_owned', 'published', 'published', 'bucket'],
      ['object_not_owned', 'published', 'published', 'registered'],
      ['applied', 'published', 'done', null],
    ]);
    expect(outcomes[0]).toMatchObject({
      fileId: rows[0]!.file_id,
      details: {
        breach: 'prefix',
        got: { bucket: 'arm-ka', key: resultKey(rows[1]!) },
        expected: { bucket: 'arm-ka', key_prefix: `results/${rows[0]!.file_id}/${rows[0]!.id}/` },
      },
    });
    expect(outcomes[2]).toMatchObject({
      details: { breach: 'registered', registered: { bucket_role: 'uploads', created_by: 'cli' } },
    });
    const { objects: inserted, jobs, transitions } = parsed(write!.params);
    expect(inserted).toEqual([{ bucket: 'arm-ka', key: resultKey(rows[0]!), created_by: service.name }]);
    expect(jobs.map((j) => j['ctid'])).toEqual([rows[0]!.row_address]);
    expect(transitions).toHaveLength(1);
  });

  it('a batch that takes no result object: a result naming one is a bug of the caller', () => {
    const row = publishedRow(1);
    expect(() => planBatch([row]).next([{ jobId: row.id, event: done(row) }])).toThrow(/results bucket/);
    // Without an object, or not applied, no rule is needed.
    expect(planBatch([row]).next([{ jobId: row.id, event: failed(row.id) }]).outcomes[0]).toMatchObject({
      decision: 'applied',
    });
  });

  it('a job an earlier write changed is written at the address and version that write returned', () => {
    const [a, b] = [publishedRow(1), publishedRow(2)];
    const plan = planBatch([a, b], OBJECTS);
    const later = { laterChunks: true };
    const first = plan.write(plan.decide([{ jobId: a.id, event: ack(a.id) }]), later)!;
    // A write with chunks after it returns where its jobs stand now.
    expect(parsed(first.params)).toMatchObject({ returnsJobs: true });
    expect(parsed(first.params).jobs.map((j) => j['ctid'])).toEqual([a.row_address]);
    // b is untouched so far: still at its address, even before the first write returns.
    const second = plan.decide([{ jobId: b.id, event: ack(b.id) }]);
    expect(plan.waitsForMoved(second)).toBe(false);
    expect(parsed(plan.write(second, later)!.params).jobs.map((j) => j['ctid'])).toEqual([b.row_address]);
    // a again: its chunk waits for the first write's rows.
    const third = plan.decide([{ jobId: a.id, event: failed(a.id) }]);
    expect(plan.waitsForMoved(third)).toBe(true);
    expect(() => plan.write(third)).toThrow(/moved/);
    plan.moved([
      { id: a.id, row_address: '(9,1)', version: '900', file_id: a.file_id, prior_status: null },
      { id: b.id, row_address: '(9,2)', version: '900', file_id: b.file_id, prior_status: null },
    ]);
    expect(plan.waitsForMoved(third)).toBe(false);
    const { jobs, files, returnsJobs } = parsed(plan.write(third)!.params);
    // The last chunk: nothing after it needs its jobs' addresses.
    expect(returnsJobs).toBe(false);
    // What a's last event assigned anew since the first write, written where that write left
    // it: not the columns the first write set already (started_at, and the service as the
    // failure repeats it).
    expect(jobs).toEqual([
      writtenJob(
        a,
        { ctid: '(9,1)', version: '900', status: 'error' },
        {
          next_publish_at: null,
          finished_at: NOW.toISOString(),
          metrics: null,
          error_code: 'UNSUPPORTED_FORMAT',
          error_message: 'xls 95 is not supported',
          result_schema_version: null,
          result_msg_id: `result:${a.id}`,
        },
      ),
    ]);
    expect(files).toEqual([{ job: '1', status: 'ERROR', error_code: 'UNSUPPORTED_FORMAT' }]);
  });

  it('within one chunk, the last change of a file wins', () => {
    const row = publishedRow(1);
    const { write } = planBatch([row], OBJECTS).next([
      { jobId: row.id, event: ack(row.id) },
      { jobId: row.id, event: failed(row.id) },
    ]);
    const { files, transitions } = parsed(write!.params);
    expect(files).toEqual([{ job: '1', status: 'ERROR', error_code: 'UNSUPPORTED_FORMAT' }]);
    expect(transitions).toHaveLength(2);
  });

  it('nothing to write (a repeated ack) plans no write; an unknown job is reported as such', () => {
    const row = publishedRow(1, { status: 'processing' });
    const plan = planBatch([row], OBJECTS);
    const { outcomes, write } = plan.next([
      { jobId: row.id, event: ack(row.id) },
      { jobId: '00000000-0000-4000-8000-0000000000ff', event: ack('nobody') },
    ]);
    expect(outcomes.map((o) => o.decision)).toEqual(['duplicate', 'unknown_job']);
    expect(write).toBeNull();
  });
});

describe('planUnlocked (the unlocked path)', () => {
  /** What the locked path's write holds for `rows`, as the expected write must hold it. */
  const lockedWrite = (rows: StepRow[], items: StepItem[]) =>
    parsed(planBatch(rows, OBJECTS).next(items).write!.params);

  it("plans the locked path's write for the rows it expects, found by id, with its clock and the statuses it expects", () => {
    const rows = [publishedRow(1), publishedRow(2)];
    const items = [
      { jobId: rows[0]!.id, event: done(rows[0]!) },
      { jobId: rows[1]!.id, event: ack(rows[1]!.id) },
    ];
    const planned = parsed(planUnlocked(items, RULE)!.params);
    const locked = lockedWrite(rows, items);
    // The same rows, but each job found by its id (no address or version), its times the
    // database's clock at the write (`now`), and its transitions' `from_status` the status the
    // write locks it in.
    const asExpected = (r: Record<string, unknown>) => {
      const out: Record<string, unknown> = { ...r, ctid: null, version: null };
      for (const k of ['finished_at', 'started_at']) if (out[k] !== null) out[k] = 'now';
      return out;
    };
    expect(planned.jobs).toEqual(locked.jobs.map(asExpected));
    expect(planned.objects).toEqual(locked.objects);
    expect(planned.files).toEqual(locked.files);
    expect(planned.details).toEqual(locked.details);
    expect(planned.transitions).toEqual(locked.transitions.map((t) => ({ ...t, from_status: null })));
    expect(planned).toMatchObject({ count: 2, returnsJobs: true });
    expect(planned.expectedIds).toBe(`{${rows.map((r) => r.id).join(',')}}`);
    // A result is the same in pending, published and processing (bits 0–2); an ack only in published.
    expect(planned.expectedStatuses).toBe('{7,2}');
    expect(planned.expectedTargets).toBe(`{"${service.name}","${service.name}"}`);
    // The file the result object's key names, for the write to compare with the job's.
    expect(planned.expectedFiles).toBe(`{"${rows[0]!.file_id}",NULL}`);
  });

  it("plans nothing for a result whose key alone shows it is not its job's object", () => {
    const row = publishedRow(1, { id: 'abcdef00-0000-4000-8000-00000000000a' });
    const other = publishedRow(2);
    const plan = (resultS3: { bucket: string; key: string }, jobId = row.id) =>
      planUnlocked([{ jobId, event: done({ ...row, id: jobId }, resultS3) }], RULE);
    expect(plan({ bucket: 'arm-ka', key: resultKey(row) })).not.toBeNull();
    expect(plan({ bucket: 'elsewhere', key: resultKey(row) })).toBeNull();
    expect(plan({ bucket: 'arm-ka', key: resultKey(other) })).toBeNull();
    expect(plan({ bucket: 'arm-ka', key: `uploads/${row.file_id}.xlsx` })).toBeNull();
    expect(plan({ bucket: 'arm-ka', key: `results/${row.file_id}/${row.id}/` })).toBeNull();
    // A job id not written as PostgreSQL writes it: only its row can tell.
    const upper = row.id.toUpperCase();
    expect(plan({ bucket: 'arm-ka', key: `results/${row.file_id}/${upper}/r.json` }, upper)).toBeNull();
    // Another job's file in the key: the key alone cannot tell, the write compares it.
    const planned = parsed(
      plan({ bucket: 'arm-ka', key: `results/${other.file_id}/${row.id}/r.json` })!.params,
    );
    expect(planned.expectedFiles).toBe(`{"${other.file_id}"}`);
    expect(() => planUnlocked([{ jobId: row.id, event: done(row) }])).toThrow(/results bucket/);
  });

  it("makes its outcomes from the rows the write returns: each job's file and the status it was locked in", () => {
    const [a, b] = [publishedRow(1), publishedRow(2)];
    const plan = planUnlocked(
      [
        { jobId: a.id, event: done(a) },
        { jobId: b.id, event: failed(b.id) },
      ],
      RULE,
    )!;
    const outcomes = plan.outcomes([
      { id: b.id, row_address: null, version: null, file_id: b.file_id, prior_status: 'pending' },
      { id: a.id, row_address: null, version: null, file_id: a.file_id, prior_status: 'processing' },
    ]);
    expect(outcomes).toMatchObject([
      {
        jobId: a.id,
        decision: 'applied',
        from: 'processing',
        to: 'done',
        fileId: a.file_id,
        targetService: service.name,
      },
      {
        jobId: b.id,
        decision: 'applied',
        from: 'pending',
        to: 'error',
        fileId: b.file_id,
        targetService: service.name,
      },
    ]);
    // A write that found a job not as expected wrote nothing and returns no job.
    expect(
      plan.outcomes([{ id: null, row_address: null, version: null, file_id: null, prior_status: null }]),
    ).toBeNull();
  });

  it('plans nothing for two events of one job, or an event without an unlocked decision', () => {
    const row = publishedRow(1);
    expect(
      planUnlocked([
        { jobId: row.id, event: ack(row.id) },
        { jobId: row.id, event: done(row) },
      ]),
    ).toBeNull();
    expect(planUnlocked([{ jobId: row.id, event: { type: 'DEADLINE_PASSED' } }])).toBeNull();
  });
});
