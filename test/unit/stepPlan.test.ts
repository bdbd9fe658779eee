/**
 * The step's pure planning: a batch decided against the rows its read returned, and the write it
 * plans — which statement, and the parameters that statement reads ($1 objects, $2 job changes,
 * $3 file changes, $4 transitions, $5 the guarded write's count). No database.
 */
import { describe, expect, it } from 'vitest';
import type { JobEventInput } from '../../machines/index.js';
import { planBatch, type Reading, type StepItem } from '../../src/step/plan.js';
import type { LockedWithFileRow } from '../../src/step/statements.js';

const NOW = new Date('2025-03-01T10:00:00.000Z');
const PUBLISHED_AT = new Date('2025-03-01T09:59:00.000Z');
const DEADLINE = new Date('2025-03-01T10:09:00.000Z');
const service = { name: 'tabular-parser', version: '2.3.1' };

/** A published job's row as a lock reads it, with its and its file's addresses. */
function publishedRow(n: number, overrides: Partial<LockedWithFileRow> = {}): LockedWithFileRow {
  return {
    id: `00000000-0000-4000-8000-00000000000${n}`,
    file_id: `00000000-0000-4000-9000-00000000000${n}`,
    attempt: 1,
    target_service: service.name,
    status: 'published',
    service_name: null,
    service_version: null,
    publish_attempts: 1,
    next_publish_at: null,
    published_at: PUBLISHED_AT,
    reply_deadline: DEADLINE,
    started_at: null,
    finished_at: null,
    metrics: null,
    error_code: null,
    error_message: null,
    result_schema_version: null,
    result_s3_object_id: null,
    result_msg_id: null,
    file_is_current: true,
    db_now: NOW,
    row_address: `(0,${n})`,
    file_address: `(1,${n})`,
    ...overrides,
  };
}

const ack = (jobId: string): JobEventInput => ({
  type: 'ENVELOPE_PROCESSING',
  msgId: `ack:${jobId}`,
  service,
});
const done = (jobId: string): JobEventInput => ({
  type: 'ENVELOPE_RESULT',
  msgId: `result:${jobId}`,
  status: 'done',
  service,
  resultS3: { bucket: 'arm-ka', key: `results/${jobId}.json` },
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

/** The write's parameters, parsed back from JSON. */
const parsed = (params: string[]) => params.map((p, i) => (i < 4 ? JSON.parse(p) : p));

describe('planBatch', () => {
  it('two events of one job under lock: one write at the row address, its object, its file once', () => {
    const row = publishedRow(1);
    const plan = planBatch({ locked: 'jobs', rows: [row] });
    const { outcomes, write } = plan.next([
      { jobId: row.id, event: ack(row.id) },
      { jobId: row.id, event: done(row.id) },
    ]);

    expect(outcomes.map((o) => [o.decision, o.from, o.to])).toEqual([
      ['applied', 'published', 'processing'],
      ['applied', 'processing', 'done'],
    ]);
    expect(write?.mode).toBe('jobsAtAddress');
    const [objects, changes, files, transitions, ...rest] = parsed(write!.params);
    // $1: the registered result object, once.
    expect(objects).toEqual([{ bucket: 'arm-ka', key: `results/${row.id}.json`, created_by: service.name }]);
    // $2: the job's columns changed by both events against the row as read, at its address,
    // pointing at its result object by bucket and key (the statement resolves the id).
    expect(changes).toEqual([
      {
        id: row.id,
        ctid: '(0,1)',
        status: 'done',
        service_name: service.name,
        service_version: service.version,
        started_at: NOW.toISOString(),
        finished_at: NOW.toISOString(),
        metrics: { pages: 3 },
        result_schema_version: '1.0',
        result_msg_id: `result:${row.id}`,
        result_object: { bucket: 'arm-ka', key: `results/${row.id}.json` },
      },
    ]);
    // $3: the file, once; no address (the file is not locked).
    expect(files).toEqual([{ file_id: row.file_id, job_id: row.id, status: 'PROCESSING', error_code: null }]);
    // $4: both transitions, in the order applied.
    expect(transitions).toMatchObject([
      {
        seq: 0,
        job_id: row.id,
        from_status: 'published',
        to_status: 'processing',
        event: 'ENVELOPE_PROCESSING',
      },
      { seq: 1, job_id: row.id, from_status: 'processing', to_status: 'done', event: 'ENVELOPE_RESULT' },
    ]);
    expect(rest).toEqual([]);
  });

  it("the watchdog's rows (files locked too): jobs and files at their addresses", () => {
    const passed = { reply_deadline: new Date(NOW.getTime() - 1) };
    const rows = [publishedRow(1, passed), publishedRow(2, passed)];
    const plan = planBatch({ locked: 'jobs and files', rows });
    const { write } = plan.next(
      rows.map((r): StepItem => ({ jobId: r.id, event: { type: 'DEADLINE_PASSED' } })),
    );
    expect(write?.mode).toBe('jobsAndFilesAtAddress');
    const [objects, changes, files, transitions] = parsed(write!.params);
    expect(objects).toEqual([]);
    expect(
      changes.map((c: { id: string; ctid: string; status: string }) => [c.id, c.ctid, c.status]),
    ).toEqual(rows.map((r) => [r.id, r.row_address, 'timeout']));
    expect(files.map((f: { file_id: string; ctid: string }) => [f.file_id, f.ctid])).toEqual(
      rows.map((r) => [r.file_id, r.file_address]),
    );
    expect(transitions).toHaveLength(2);
  });

  it('a job a chunk wrote has moved: the next chunk that changes it finds rows by id; the last file change wins', () => {
    const [a, b] = [publishedRow(1), publishedRow(2)];
    const plan = planBatch({ locked: 'jobs and files', rows: [a, b] });
    expect(plan.next([{ jobId: a.id, event: ack(a.id) }]).write?.mode).toBe('jobsAndFilesAtAddress');
    // b is untouched so far: still at its addresses.
    expect(plan.next([{ jobId: b.id, event: ack(b.id) }]).write?.mode).toBe('jobsAndFilesAtAddress');
    const { write } = plan.next([{ jobId: a.id, event: failed(a.id) }]);
    expect(write?.mode).toBe('byId');
    const [, changes, files] = parsed(write!.params);
    // Only what this chunk changed, against what the first chunk wrote; no addresses.
    expect(changes).toEqual([
      {
        id: a.id,
        status: 'error',
        finished_at: NOW.toISOString(),
        error_code: 'UNSUPPORTED_FORMAT',
        error_message: 'xls 95 is not supported',
        result_msg_id: `result:${a.id}`,
      },
    ]);
    expect(files).toEqual([
      { file_id: a.file_id, job_id: a.id, status: 'ERROR', error_code: 'UNSUPPORTED_FORMAT' },
    ]);
  });

  it('within one chunk, the last change of a file wins', () => {
    const row = publishedRow(1);
    const { write } = planBatch({ locked: 'jobs', rows: [row] }).next([
      { jobId: row.id, event: ack(row.id) },
      { jobId: row.id, event: failed(row.id) },
    ]);
    const [, , files, transitions] = parsed(write!.params);
    expect(files).toEqual([
      { file_id: row.file_id, job_id: row.id, status: 'ERROR', error_code: 'UNSUPPORTED_FORMAT' },
    ]);
    expect(transitions).toHaveLength(2);
  });

  it('read without a lock: the guarded write, each job at its version, and the count it must update', () => {
    const { row_address: _r, file_address: _f, ...row } = publishedRow(1);
    const read: Reading = { locked: false, rows: [{ ...row, version: '777' }] };
    const { write } = planBatch(read).next([{ jobId: row.id, event: ack(row.id) }]);
    expect(write?.mode).toBe('guarded');
    const [, changes, files, , count] = parsed(write!.params);
    expect(changes).toEqual([
      {
        id: row.id,
        version: '777',
        status: 'processing',
        service_name: service.name,
        service_version: service.version,
        started_at: NOW.toISOString(),
      },
    ]);
    expect(files).toEqual([{ file_id: row.file_id, job_id: row.id, status: 'PROCESSING', error_code: null }]);
    expect(count).toBe('1');
  });

  it('nothing to write (a repeated ack) plans no write; an unknown job is reported as such', () => {
    const row = { ...publishedRow(1), status: 'processing' as const, started_at: NOW };
    const plan = planBatch({ locked: 'jobs', rows: [row] });
    const { outcomes, write } = plan.next([
      { jobId: row.id, event: ack(row.id) },
      { jobId: '00000000-0000-4000-8000-0000000000ff', event: ack('nobody') },
    ]);
    expect(outcomes.map((o) => o.decision)).toEqual(['duplicate', 'unknown_job']);
    expect(write).toBeNull();
  });
});
