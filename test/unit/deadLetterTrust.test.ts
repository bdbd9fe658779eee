/**
 * The dead-letter loop's checks of an advisory against its consumer (src/daemon/deadLetters.ts),
 * pure: which advisories a consumer's information bears out, and NATS subject matching.
 */
import { describe, expect, it } from 'vitest';
import { subjectMatches, untrustedBecause } from '../../src/daemon/deadLetters.js';

describe('subjectMatches', () => {
  it('matches literal tokens, * for one token and > for one or more at the end', () => {
    const cases: Array<[string, string, boolean]> = [
      ['recognition.job.tabular-parser', 'recognition.job.tabular-parser', true],
      ['recognition.job.tabular-parser', 'recognition.job.ocr', false],
      ['recognition.job.tabular-parser', 'recognition.job.tabular-parser.x', false],
      ['recognition.job.*', 'recognition.job.ocr', true],
      ['recognition.job.*', 'recognition.job', false],
      ['recognition.job.*', 'recognition.job.ocr.x', false],
      ['recognition.job.>', 'recognition.job.ocr.x', true],
      ['recognition.job.>', 'recognition.job', false],
      ['*.job.>', 'recognition.job.ocr', true],
      ['>', 'anything.at.all', true],
    ];
    for (const [filter, subject, expected] of cases)
      expect(subjectMatches(filter, subject), `${filter} ~ ${subject}`).toBe(expected);
  });
});

describe('untrustedBecause', () => {
  const advisory = { stream: 'RECOGNITION_JOBS', consumer: 'tabular-parser', stream_seq: 10, deliveries: 5 };
  const consumer = (config: Record<string, unknown>, deliveredSeq = 12) => ({
    config: { max_deliver: 5, filter_subject: 'recognition.job.tabular-parser', ...config },
    delivered: { stream_seq: deliveredSeq },
  });
  const subject = 'recognition.job.tabular-parser';

  it('bears out an advisory of a consumer that gives up at its deliveries, passed the message and reads its subject', () => {
    expect(untrustedBecause(advisory, consumer({}), subject)).toBeUndefined();
    expect(untrustedBecause(advisory, consumer({}, 10), subject)).toBeUndefined();
    expect(
      untrustedBecause(
        advisory,
        consumer({ filter_subject: undefined, filter_subjects: ['x', subject] }),
        subject,
      ),
    ).toBeUndefined();
    expect(untrustedBecause(advisory, consumer({ filter_subject: undefined }), subject)).toBeUndefined();
    expect(untrustedBecause(advisory, consumer({ opt_start_seq: 10 }), subject)).toBeUndefined();
  });

  it('names why it does not', () => {
    expect(untrustedBecause(advisory, undefined, subject)).toBe('unknown_consumer');
    expect(untrustedBecause(advisory, consumer({ max_deliver: -1 }), subject)).toBe('below_max_deliver');
    expect(untrustedBecause(advisory, consumer({ max_deliver: 6 }), subject)).toBe('below_max_deliver');
    expect(untrustedBecause(advisory, consumer({}, 9), subject)).toBe('never_delivered');
    expect(untrustedBecause(advisory, consumer({ opt_start_seq: 11 }), subject)).toBe('never_delivered');
    expect(untrustedBecause(advisory, consumer({}), 'recognition.job.ocr')).toBe('not_its_subject');
    expect(
      untrustedBecause(
        advisory,
        consumer({ filter_subject: undefined, filter_subjects: ['a', 'b'] }),
        subject,
      ),
    ).toBe('not_its_subject');
  });
});
