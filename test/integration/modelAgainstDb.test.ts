/**
 * Model against database: the paths generated from the machine itself (xstate/graph) are replayed
 * through the step against PostgreSQL, and each job ends in the rows the pure machine predicts.
 */
import { randomUUID } from 'node:crypto';
import { getSimplePaths } from 'xstate/graph';
import { describe, expect, it } from 'vitest';
import {
  JOB_STATUSES,
  decide,
  recognitionJobMachine,
  type JobEvent,
  type JobEventInput,
  type JobState,
} from '../../machines/index.js';
import { rowToJobState } from '../../src/db/jobRow.js';
import { addFile, createJob } from '../../src/db/jobs.js';
import { applyEvent } from '../../src/step/index.js';
import { baseContext, NOW, sampleEventsByKind } from '../../workshop/machineSamples.js';
import { loadAll, RESULTS } from '../helpers/fixtures.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true });

// The alphabet: the sample events, with a reply timeout in the past so that a deadline tick after
// PUBLISHED passes both in the model (fixed now) and in the database (its own clock).
const kinds = sampleEventsByKind(NOW);
const ALPHABET: JobEvent[] = [
  { ...kinds.published, replyTimeoutMs: -60_000 },
  kinds.publishFailed,
  kinds.deliveryExhausted,
  kinds.ack,
  kinds.done,
  kinds.needsCheck,
  kinds.error,
  { type: 'DEADLINE_PASSED', now: NOW },
];

type Snapshot = ReturnType<typeof recognitionJobMachine.transition>;
const paths = getSimplePaths(recognitionJobMachine, {
  input: baseContext({ nextPublishAt: NOW }),
  events: ALPHABET,
  serializeState: (s: Snapshot) => JSON.stringify([s.value, s.context]),
}).map((p) =>
  p.steps.map((s) => s.event).filter((e): e is JobEvent => (e as { type: string }).type !== 'xstate.init'),
);

/** What the pure machine predicts for a path: the job, the file's status and the transition log. */
function predict(events: JobEvent[]) {
  let job: JobState = { status: 'pending', context: baseContext({ nextPublishAt: NOW }) };
  let file = { status: 'QUEUED', error_code: null as string | null };
  const log: Array<[string, string, string, string | null]> = [];
  let registered = false;
  for (const e of events) {
    const d = decide(job, e);
    job = { status: d.to, context: d.context };
    for (const fx of d.effects) {
      if (fx.type === 'setFileStatus') file = { status: fx.params.status, error_code: fx.params.errorCode };
      if (fx.type === 'recordTransition') log.push([d.from, d.to, fx.params.event, fx.params.msgId]);
      if (fx.type === 'registerResultObject') registered = true;
    }
  }
  return { job, file, log, registered };
}

/** The comparable part of a job: every column but the clock's values, which only need to be set or not. */
function comparable(state: JobState, registered: boolean) {
  const c = state.context;
  return {
    status: state.status,
    serviceName: c.serviceName,
    serviceVersion: c.serviceVersion,
    publishAttempts: c.publishAttempts,
    metrics: c.metrics,
    errorCode: c.errorCode,
    errorMessage: c.errorMessage,
    resultSchemaVersion: c.resultSchemaVersion,
    resultMsgId: c.resultMsgId,
    hasResultObject: registered || c.resultS3ObjectId !== null,
    set: {
      nextPublishAt: c.nextPublishAt !== null,
      publishedAt: c.publishedAt !== null,
      replyDeadline: c.replyDeadline !== null,
      startedAt: c.startedAt !== null,
      finishedAt: c.finishedAt !== null,
    },
  };
}

describe('paths generated from the machine, replayed through the step against PostgreSQL', () => {
  it('there are paths to replay, reaching every status', () => {
    expect(paths.length).toBeGreaterThanOrEqual(30);
    const ends = new Set(paths.map((p) => predict(p).job.status));
    expect([...ends].sort()).toEqual([...JOB_STATUSES].sort());
  });

  it('every path ends in the rows the pure machine predicts', async () => {
    for (const events of paths) {
      const file = await addFile(t.db, { bucket: 'arm-ka', key: `uploads/${randomUUID()}`, name: 'a.xlsx' });
      const job = await createJob(t.db, { fileId: file.id, targetService: 'tabular-parser' });
      for (const e of events) {
        const { now: _now, ...input } = e;
        // Result objects are unique per (bucket, key): give each job its own.
        const forDb = (
          input.type === 'ENVELOPE_RESULT' && input.resultS3
            ? { ...input, resultS3: { bucket: 'arm-ka', key: `results/${file.id}/${job.id}/result.json` } }
            : input
        ) as JobEventInput;
        await applyEvent(t.db, job.id, forDb, RESULTS);
      }
      const expected = predict(events);
      const actual = await loadAll(t.db, job.id);
      const where = events.map((e) => e.type + ('status' in e ? `(${e.status})` : '')).join(' → ');
      expect(comparable(rowToJobState(actual.job, true), false), where).toEqual(
        comparable(expected.job, expected.registered),
      );
      expect({ status: actual.file.status, error_code: actual.file.error_code }, where).toEqual(
        expected.file,
      );
      expect(
        actual.transitions.map((r) => [r.from_status, r.to_status, r.event, r.msg_id]),
        where,
      ).toEqual(expected.log);
    }
  });
});
