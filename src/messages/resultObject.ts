/**
 * Which object a result may name (docs/contract.md, "Where a result belongs"): the job message
 * gives each job its place, `result_s3_prefix` = `results/<file_id>/<job_id>/` in the results
 * bucket (`RESULTS_BUCKET`), and a result's `result_s3` must be an object under it. The layout is
 * the contract's, fixed; only the bucket is configured. The pure half of the rule: whether an
 * object already exists in `s3_object` is decided in the transaction that registers it (the
 * step). Pure.
 */

import type { S3Pointer } from '../../machines/index.js';

export type { S3Pointer };

/** What a result's object is checked against: the results bucket (`RESULTS_BUCKET`). */
export interface ResultObjectRule {
  resultsBucket: string;
}

/** The job a result belongs to, as its row gives it (ids as PostgreSQL writes a uuid). */
export interface ResultOwner {
  fileId: string;
  jobId: string;
}

/** The first segment of every result key. */
const RESULTS_ROOT = 'results/';

/** Where a job's result belongs in the results bucket: `results/<file_id>/<job_id>/`. */
export function resultKeyPrefix(owner: ResultOwner): string {
  return `${RESULTS_ROOT}${owner.fileId}/${owner.jobId}/`;
}

/**
 * Which part of the rule an object breaks: `bucket` (not the results bucket), `prefix` (not a key
 * under the job's prefix; the prefix itself is not an object under it), `registered` (already in
 * `s3_object`, as an upload or as another result).
 */
export type ResultObjectBreach = 'bucket' | 'prefix' | 'registered';

/** The part of the rule `object` breaks as the result of `owner`'s job, or null when it keeps it. */
export function resultObjectBreach(
  object: S3Pointer,
  owner: ResultOwner,
  rule: ResultObjectRule,
): Exclude<ResultObjectBreach, 'registered'> | null {
  if (object.bucket !== rule.resultsBucket) return 'bucket';
  const prefix = resultKeyPrefix(owner);
  return object.key.length > prefix.length && object.key.startsWith(prefix) ? null : 'prefix';
}

/** A job id as PostgreSQL writes a uuid: lowercase hex, hyphenated. */
const CANONICAL_UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * The file id `object`'s key names for job `jobId`, for a decision made before the job's row is
 * read: `<file_id>` when the object is in the results bucket at `results/<file_id>/<jobId>/…`,
 * else null. {@link resultObjectBreach} passes exactly when this is the job's file id; null too
 * when `jobId` is not written as PostgreSQL writes it, since the row's id is compared then.
 */
export function claimedFileId(object: S3Pointer, jobId: string, rule: ResultObjectRule): string | null {
  if (object.bucket !== rule.resultsBucket || !CANONICAL_UUID.test(jobId)) return null;
  const { key } = object;
  if (!key.startsWith(RESULTS_ROOT)) return null;
  const end = key.indexOf('/', RESULTS_ROOT.length);
  if (end <= RESULTS_ROOT.length) return null;
  const fileId = key.slice(RESULTS_ROOT.length, end);
  const prefix = resultKeyPrefix({ fileId, jobId });
  return key.length > prefix.length && key.startsWith(prefix) ? fileId : null;
}

/** An object `s3_object` already holds: its role and who registered it. */
export interface RegisteredObject {
  bucket_role: string;
  created_by: string;
}

/** The `details` of a `RESULT_OBJECT_NOT_OWNED` quarantine row. */
export interface ResultObjectDetails {
  breach: ResultObjectBreach;
  /** The envelope's `result_s3`. */
  got: S3Pointer;
  /** Where the job's result belongs, as its job message said: `result_s3_prefix`. */
  expected: { bucket: string; key_prefix: string };
  /** With `registered`: the row that already holds the object. */
  registered?: RegisteredObject;
  message: string;
}

/** The quarantine details of a result whose object breaks the rule (pure). */
export function resultObjectDetails(
  breach: ResultObjectBreach,
  got: S3Pointer,
  owner: ResultOwner,
  rule: ResultObjectRule,
  registered?: RegisteredObject,
): ResultObjectDetails {
  const expected = { bucket: rule.resultsBucket, key_prefix: resultKeyPrefix(owner) };
  const named = `result_s3 ${JSON.stringify(`${got.bucket}/${got.key}`)}`;
  const message =
    breach === 'bucket'
      ? `${named} is not in the results bucket ${JSON.stringify(expected.bucket)}`
      : breach === 'prefix'
        ? `${named} is not under the job's prefix ${JSON.stringify(expected.key_prefix)}`
        : `${named} is already registered (${registered?.bucket_role ?? 'unknown role'}, by ${JSON.stringify(registered?.created_by ?? '')})`;
  return { breach, got, expected, ...(registered ? { registered } : {}), message };
}

/** One key for a bucket and key together, unambiguous whatever either holds. */
export function objectKey(object: S3Pointer): string {
  return `${object.bucket.length}:${object.bucket}/${object.key}`;
}
