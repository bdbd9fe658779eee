/**
 * The publisher's rules that need neither NATS nor PostgreSQL: outage or refusal (what a 503
 * means), the course of an outage and its pause, the loop's wake delay, and the step event of a
 * publish JetStream answered.
 */
import type { JetStreamClient, PubAck } from '@nats-io/jetstream';
import { NoRespondersError, RequestError, TimeoutError } from '@nats-io/nats-core';
import { describe, expect, it } from 'vitest';
import { wakeDelayMs } from '../../src/daemon/publisher.js';
import type { DecidedAttempt, DueJobRow } from '../../src/daemon/publishJob.js';
import {
  createFailureReader,
  OUTAGE_PAUSE_MAX_MS,
  outageAfterRound,
  outagePauseMs,
} from '../../src/daemon/publisherOutage.js';
import { publishPolicies, stepItemOf } from '../../src/daemon/publisherRound.js';

const SUBJECT = 'recognition.job.tabular-parser';
const noResponders = () =>
  new RequestError(`no responders: '${SUBJECT}'`, { cause: new NoRespondersError(SUBJECT) });

/** A JetStream client whose manager knows the streams of `bound` (subject -> stream names). */
function fakeJs(bound: Record<string, string[]>): { js: JetStreamClient; asked: string[] } {
  const asked: string[] = [];
  const manager = {
    streams: {
      async *names(subject: string) {
        asked.push(subject);
        yield* bound[subject] ?? [];
      },
    },
  };
  const js = { jetstreamManager: () => Promise.resolve(manager) } as unknown as JetStreamClient;
  return { js, asked };
}

describe('outage or refusal', () => {
  it('a failure classifyPublishFailure decides is taken as it is', async () => {
    const { js, asked } = fakeJs({});
    const read = createFailureReader({ js, jobSubjects: 'recognition.job.>', provisions: false })();
    expect((await read.read(new TimeoutError(), SUBJECT)).kind).toBe('unavailable');
    expect(asked).toEqual([]);
  });

  it('where the core provisions the streams, a 503 is an outage that asks for provisioning', async () => {
    const { js, asked } = fakeJs({});
    const read = createFailureReader({ js, jobSubjects: 'recognition.job.>', provisions: true })();
    expect(read.provisionWanted).toBe(false);
    expect((await read.read(noResponders(), SUBJECT)).kind).toBe('unavailable');
    expect(read.provisionWanted).toBe(true);
    expect(asked).toEqual([]);
  });

  it.each([
    [
      'another stream binds job subjects but none this one: refused',
      { 'recognition.job.>': ['OTHER'] },
      'rejected',
    ],
    ['no stream binds job subjects: the jobs stream is missing', {}, 'unavailable'],
    ['a stream binds the subject but did not answer', { [SUBJECT]: ['RECOGNITION_JOBS'] }, 'unavailable'],
  ])('otherwise JetStream is asked: %s', async (_, bound, kind) => {
    const { js } = fakeJs(bound);
    const read = createFailureReader({ js, jobSubjects: 'recognition.job.>', provisions: false })();
    expect((await read.read(noResponders(), SUBJECT)).kind).toBe(kind);
    expect(read.provisionWanted).toBe(false);
  });

  it('JetStream is asked once per subject and round', async () => {
    const { js, asked } = fakeJs({ 'recognition.job.>': ['OTHER'] });
    const reader = createFailureReader({ js, jobSubjects: 'recognition.job.>', provisions: false });
    const round = reader();
    await Promise.all([round.read(noResponders(), SUBJECT), round.read(noResponders(), SUBJECT)]);
    expect(asked).toEqual([SUBJECT, 'recognition.job.>']);
    await reader().read(noResponders(), SUBJECT);
    expect(asked).toHaveLength(4);
  });
});

describe('the course of an outage', () => {
  it('begins with a round that put publishes off, goes on, and ends with a round that put none off', () => {
    const first = outageAfterRound(undefined, ['NATS is not connected', 'x'], 1_000);
    expect(first).toEqual({ since: 1_000, reason: 'NATS is not connected', deferred: 2, rounds: 1 });
    const second = outageAfterRound(first, ['TimeoutError: timeout'], 2_000);
    expect(second).toEqual({ since: 1_000, reason: 'NATS is not connected', deferred: 3, rounds: 2 });
    expect(outageAfterRound(second, [], 3_000)).toBeUndefined();
    expect(outageAfterRound(undefined, [], 3_000)).toBeUndefined();
  });

  it('pauses double from the backoff base, capped by the outage cap and the backoff max', () => {
    const cfg = { PUBLISH_BACKOFF_BASE_MS: 100, PUBLISH_BACKOFF_MAX_MS: 60_000 };
    expect([1, 2, 3, 4].map((r) => outagePauseMs(r, cfg))).toEqual([100, 200, 400, 800]);
    expect(outagePauseMs(100, cfg)).toBe(OUTAGE_PAUSE_MAX_MS);
    expect(outagePauseMs(100, { ...cfg, PUBLISH_BACKOFF_MAX_MS: 1_000 })).toBe(1_000);
  });
});

describe('the wake delay outside an outage', () => {
  it('sleeps until the earliest due job, at most one poll interval, at least the minimum', () => {
    expect(wakeDelayMs(null, 0, 5_000)).toBe(5_000);
    expect(wakeDelayMs(1_234.2, 0, 5_000)).toBe(1_235);
    expect(wakeDelayMs(60_000, 0, 5_000)).toBe(5_000);
    expect(wakeDelayMs(-50, 0, 5_000)).toBe(100);
  });

  it('after failed rounds, waits a pause that doubles up to the poll interval', () => {
    expect([1, 2, 3, 5].map((f) => wakeDelayMs(-50, f, 5_000))).toEqual([500, 1_000, 2_000, 5_000]);
  });
});

describe('the step event of a publish JetStream answered', () => {
  const row = { job_id: 'j1', publish_attempts: 0 } as DueJobRow;
  const base = { row, msgId: 'job:j1:1', subject: SUBJECT };
  const policies = publishPolicies({
    MAX_PUBLISH_ATTEMPTS: 5,
    PUBLISH_BACKOFF_BASE_MS: 1_000,
    PUBLISH_BACKOFF_MAX_MS: 60_000,
  });

  it('published: PUBLISHED with the reply timeout', () => {
    const attempt: DecidedAttempt = { ...base, kind: 'published', ack: { seq: 1 } as PubAck };
    expect(stepItemOf(attempt, 30_000, policies)).toEqual({
      jobId: 'j1',
      event: { type: 'PUBLISHED', replyTimeoutMs: 30_000 },
    });
  });

  it('refused: PUBLISH_FAILED with the retry policy, or a single attempt when permanent', () => {
    const refused: DecidedAttempt = { ...base, kind: 'rejected', permanent: false, error: 'too big' };
    expect(stepItemOf(refused, 30_000, policies).event).toEqual({
      type: 'PUBLISH_FAILED',
      error: 'too big',
      policy: { maxAttempts: 5, baseDelayMs: 1_000, maxDelayMs: 60_000 },
    });
    const invalid = { ...refused, permanent: true };
    expect(stepItemOf(invalid, 30_000, policies).event).toMatchObject({ policy: { maxAttempts: 1 } });
  });
});
