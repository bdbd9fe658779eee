/**
 * The pure rule of a result's object: in the results bucket, under the job's own prefix
 * `results/<file_id>/<job_id>/`. The locked path decides it on the job's row, the unlocked path on
 * the key alone (the write then compares the file id the key names with the job's): both must say
 * the same of every object.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  claimedFileId,
  objectKey,
  resultKeyPrefix,
  resultObjectBreach,
  resultObjectDetails,
} from '../../src/messages/resultObject.js';

const RULE = { resultsBucket: 'arm-ka' };
const owner = {
  fileId: '0b8f7a52-51d4-4f5e-a0a7-6c3d2e1f9a10',
  jobId: '3f1b6c1e-8a3c-4c1e-9d5e-2b7a4f0c9e11',
};
const other = {
  fileId: '7d9c2b1a-0000-4000-8000-0000000000ff',
  jobId: '9e8d7c6b-0000-4000-8000-0000000000ee',
};
const own = `results/${owner.fileId}/${owner.jobId}/result.json`;

describe('resultObjectBreach', () => {
  it("keeps an object under the job's prefix in the results bucket", () => {
    expect(resultKeyPrefix(owner)).toBe(`results/${owner.fileId}/${owner.jobId}/`);
    expect(resultObjectBreach({ bucket: 'arm-ka', key: own }, owner, RULE)).toBeNull();
    expect(
      resultObjectBreach({ bucket: 'arm-ka', key: `${resultKeyPrefix(owner)}a/b/c.csv` }, owner, RULE),
    ).toBeNull();
  });

  it.each([
    ['another bucket', { bucket: 'arm-ka-uploads', key: own }, 'bucket'],
    ['a bucket that only differs in case', { bucket: 'ARM-KA', key: own }, 'bucket'],
    [
      "the file's uploaded object",
      { bucket: 'arm-ka', key: `uploads/${owner.fileId}/statement.xlsx` },
      'prefix',
    ],
    [
      "another job's result",
      { bucket: 'arm-ka', key: `results/${other.fileId}/${other.jobId}/result.json` },
      'prefix',
    ],
    [
      'another job of the same file',
      { bucket: 'arm-ka', key: `results/${owner.fileId}/${other.jobId}/r.json` },
      'prefix',
    ],
    [
      "the job's id under another file",
      { bucket: 'arm-ka', key: `results/${other.fileId}/${owner.jobId}/r.json` },
      'prefix',
    ],
    ['the prefix itself', { bucket: 'arm-ka', key: resultKeyPrefix(owner) }, 'prefix'],
    [
      'the prefix without its slash',
      { bucket: 'arm-ka', key: `results/${owner.fileId}/${owner.jobId}` },
      'prefix',
    ],
    [
      'a longer job id',
      { bucket: 'arm-ka', key: `results/${owner.fileId}/${owner.jobId}0/r.json` },
      'prefix',
    ],
    [
      'an upper-case job id',
      { bucket: 'arm-ka', key: `results/${owner.fileId}/${owner.jobId.toUpperCase()}/r.json` },
      'prefix',
    ],
    ['a leading slash', { bucket: 'arm-ka', key: `/${own}` }, 'prefix'],
  ] as const)('refuses %s', (_name, object, breach) => {
    expect(resultObjectBreach(object, owner, RULE)).toBe(breach);
  });
});

describe('claimedFileId', () => {
  it('names the file of a key shaped as a result of the job, and nothing else', () => {
    expect(claimedFileId({ bucket: 'arm-ka', key: own }, owner.jobId, RULE)).toBe(owner.fileId);
    expect(
      claimedFileId({ bucket: 'arm-ka', key: `results/x/${owner.jobId}/r.json` }, owner.jobId, RULE),
    ).toBe('x');
    expect(claimedFileId({ bucket: 'elsewhere', key: own }, owner.jobId, RULE)).toBeNull();
    expect(claimedFileId({ bucket: 'arm-ka', key: own }, other.jobId, RULE)).toBeNull();
    expect(
      claimedFileId({ bucket: 'arm-ka', key: `results//${owner.jobId}/r.json` }, owner.jobId, RULE),
    ).toBeNull();
    expect(
      claimedFileId({ bucket: 'arm-ka', key: `results/${owner.fileId}/${owner.jobId}/` }, owner.jobId, RULE),
    ).toBeNull();
    // A job id as an envelope may write it but PostgreSQL never does: the row decides.
    const upper = owner.jobId.toUpperCase();
    expect(
      claimedFileId({ bucket: 'arm-ka', key: `results/${owner.fileId}/${upper}/r.json` }, upper, RULE),
    ).toBeNull();
  });

  it('agrees with resultObjectBreach on every object: the key names the file exactly when the rule keeps it', () => {
    const hex = fc.constantFrom(...'0123456789abcdef');
    const uuid = fc
      .tuple(...[8, 4, 4, 4, 12].map((n) => fc.array(hex, { minLength: n, maxLength: n })))
      .map((parts) => parts.map((p) => p.join('')).join('-'));
    const ids = fc.constantFrom(owner.fileId, owner.jobId, other.fileId, other.jobId);
    const segment = fc.oneof(ids, uuid, fc.constantFrom('results', 'uploads', '', 'x', 'result.json'));
    const key = fc.oneof(
      fc.array(segment, { minLength: 1, maxLength: 5 }).map((s) => s.join('/')),
      fc.array(segment, { minLength: 1, maxLength: 4 }).map((s) => `results/${s.join('/')}`),
      fc.string(),
    );
    fc.assert(
      fc.property(
        fc.constantFrom('arm-ka', 'other'),
        key,
        fc.oneof(ids, uuid),
        fc.oneof(ids, uuid),
        (bucket, k, fileId, jobId) => {
          const object = { bucket, key: k };
          const kept = resultObjectBreach(object, { fileId, jobId }, RULE) === null;
          expect(claimedFileId(object, jobId, RULE) === fileId).toBe(kept);
        },
      ),
      { numRuns: 5_000 },
    );
  });
});

describe('the quarantine details', () => {
  it('say what the result named, where its result belongs and why it is refused', () => {
    const got = { bucket: 'arm-ka', key: `uploads/${owner.fileId}/statement.xlsx` };
    expect(resultObjectDetails('prefix', got, owner, RULE)).toEqual({
      breach: 'prefix',
      got,
      expected: { bucket: 'arm-ka', key_prefix: resultKeyPrefix(owner) },
      message: `result_s3 "arm-ka/uploads/${owner.fileId}/statement.xlsx" is not under the job's prefix "${resultKeyPrefix(owner)}"`,
    });
    expect(resultObjectDetails('bucket', { bucket: 'b', key: own }, owner, RULE).message).toMatch(
      /not in the results bucket "arm-ka"/,
    );
    const registered = { bucket_role: 'uploads', created_by: 'cli' };
    expect(
      resultObjectDetails('registered', { bucket: 'arm-ka', key: own }, owner, RULE, registered),
    ).toMatchObject({
      breach: 'registered',
      registered,
      message: expect.stringMatching(/already registered \(uploads, by "cli"\)/),
    });
  });

  it('tell every bucket and key apart in the key that indexes them', () => {
    expect(objectKey({ bucket: 'a/b', key: 'c' })).not.toBe(objectKey({ bucket: 'a', key: 'b/c' }));
  });
});
