/**
 * The two message contracts with recognition services, as JSON Schema 2020-12 `as const` objects, so
 * the types derive from them (`FromSchema`). `schemas/*.schema.json` are the same objects serialised;
 * `test/unit/messages.schema.test.ts` fails when they differ (`UPDATE_SCHEMAS=1` rewrites them).
 */
import { Ajv2020 } from 'ajv/dist/2020.js';
import type { ErrorObject, ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import type { FromSchema, JSONSchema } from 'json-schema-to-ts';
import { ENVELOPE_STATUS } from '../../machines/statuses.js';

/**
 * Canonical hyphenated UUID. Added next to `format: uuid` because ajv-formats also accepts a
 * `urn:uuid:` prefix, which PostgreSQL's `uuid` type rejects: such a message would pass the schema
 * and then fail in the database on every redelivery.
 */
export const UUID_PATTERN = '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$';

/** Upper bounds keep one hostile field from filling a text column or a log line. */
const NAME_MAX = 200;
/** S3 itself limits bucket names to 63 and keys to 1024 bytes; the schema is a little looser on buckets. */
const BUCKET_MAX = 255;
const KEY_MAX = 1024;
const ERROR_MESSAGE_MAX = 10_000;

const uuid = { type: 'string', format: 'uuid', pattern: UUID_PATTERN } as const;
const dateTime = { type: 'string', format: 'date-time' } as const;
/** A non-empty string of at most `maxLength` characters. */
const text = <const N extends number>(maxLength: N) => ({ type: 'string', minLength: 1, maxLength }) as const;

/**
 * A closed object whose every property is required (in the order listed), as the nested parts of
 * an envelope are: the core reads them, and a misspelt or extra field there is an error, not
 * silently ignored. A new field in one is a change the core accepts first (see docs/contract.md).
 */
function closedObject<const P extends Record<string, JSONSchema>>(properties: P) {
  return {
    type: 'object',
    additionalProperties: false,
    required: Object.keys(properties) as Array<keyof P & string>,
    properties,
  } as const;
}

/**
 * An open object whose every listed property is required and strictly typed, and which allows
 * fields it does not list, as the parts of a job message are: a service reads them, and a field
 * the core adds later must not make a service that validates refuse the job (a tolerant reader).
 */
function openObject<const P extends Record<string, JSONSchema>>(properties: P) {
  return {
    type: 'object',
    required: Object.keys(properties) as Array<keyof P & string>,
    properties,
  } as const;
}

const bucket = text(BUCKET_MAX);
const s3Object = closedObject({ bucket, key: text(KEY_MAX) });

/**
 * `schemas/recognition-result-message.schema.json`: the envelope a service sends on
 * `recognition.result` (an ack with `status = processing`, or a result). Unknown extra top-level
 * fields are allowed; the listed ones are strictly typed. `error` is required exactly when
 * `status = error`; `result_s3` is allowed only with `done`/`needs_check`.
 */
export const resultEnvelopeSchema = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  $id: 'https://recognition-core/schemas/recognition-result-message.schema.json',
  title: 'Recognition result envelope (service → core, subject recognition.result)',
  type: 'object',
  required: ['job_id', 'status', 'service'],
  properties: {
    job_id: uuid,
    status: {
      type: 'string',
      enum: [
        ENVELOPE_STATUS.processing,
        ENVELOPE_STATUS.done,
        ENVELOPE_STATUS.needs_check,
        ENVELOPE_STATUS.error,
      ],
    },
    service: closedObject({ name: text(NAME_MAX), version: text(NAME_MAX) }),
    result_s3: s3Object,
    result_schema_version: { type: 'string', maxLength: NAME_MAX },
    metrics: { type: 'object' },
    error: closedObject({
      code: text(NAME_MAX),
      message: { type: 'string', maxLength: ERROR_MESSAGE_MAX },
    }),
    sent_at: dateTime,
  },
  allOf: [
    {
      if: { required: ['status'], properties: { status: { const: ENVELOPE_STATUS.error } } },
      then: { required: ['error'], properties: { result_s3: false } },
      else: { properties: { error: false } },
    },
    {
      if: { required: ['status'], properties: { status: { const: ENVELOPE_STATUS.processing } } },
      then: { properties: { result_s3: false } },
    },
  ],
} as const satisfies JSONSchema;

/**
 * `schemas/recognition-job-message.schema.json`: the job the core publishes on
 * `recognition.job.<target_service>`. Every listed field is required and strictly typed; fields
 * it does not list are allowed, at the top level and in `source_s3` and `result_s3_prefix`, so
 * that the core can add a field without breaking a service that validates job messages. The
 * core itself publishes only the listed fields (the publisher builds them one by one).
 */
export const jobMessageSchema = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  $id: 'https://recognition-core/schemas/recognition-job-message.schema.json',
  title: 'Recognition job message (core → service, subject recognition.job.<target_service>)',
  type: 'object',
  required: [
    'job_id',
    'file_id',
    'attempt',
    'source_s3',
    'result_s3_prefix',
    'reply_subject',
    'reply_deadline',
    'published_at',
  ],
  properties: {
    job_id: uuid,
    file_id: uuid,
    attempt: { type: 'integer', minimum: 1 },
    source_s3: openObject({ bucket, key: text(KEY_MAX) }),
    result_s3_prefix: openObject({ bucket, key_prefix: text(KEY_MAX) }),
    reply_subject: { type: 'string', const: 'recognition.result' },
    reply_deadline: dateTime,
    published_at: dateTime,
  },
} as const satisfies JSONSchema;

/**
 * A result envelope that passed {@link resultEnvelopeSchema}: a union discriminated by `status`
 * (`error` carries `error`; `done`/`needs_check` may carry `result_s3`; `processing` carries
 * neither). Derived from the schema, so it cannot drift from it.
 */
export type ResultEnvelope = FromSchema<typeof resultEnvelopeSchema, { parseIfThenElseKeywords: true }>;

/** A job message that passed {@link jobMessageSchema}. Derived from the schema. */
export type JobMessage = FromSchema<typeof jobMessageSchema>;

/** One validator error, copied from Ajv as plain JSON-serialisable data (for quarantine details). */
export interface SchemaError {
  instancePath: string;
  schemaPath: string;
  keyword: string;
  params: Record<string, unknown>;
  message?: string;
}

/**
 * Outcome of a schema check: the value, typed, or the errors Ajv reports (`allErrors`) with
 * `errorCount`, how many there are in all. For a result envelope (a sender's input) only the first
 * {@link MAX_SCHEMA_ERRORS}; for a job message (the core's own) every one.
 */
export type SchemaCheck<T> =
  { valid: true; value: T } | { valid: false; errors: SchemaError[]; errorCount: number };

/**
 * The most errors a failed check carries. A hostile value can hold any number of errors (one per
 * extra key of a closed object): the quarantine row, its log line and the heap of the daemon hold
 * only these few and the count.
 */
export const MAX_SCHEMA_ERRORS = 10;

/**
 * Extra (unlisted) keys of one object the explaining validator sees, at most. The explaining
 * validator builds one error object per extra key of a closed object, so it runs on a copy of the
 * value cut to this many extra keys per object (and as many elements per array); the keys it does
 * not see are counted instead (see {@link explainBounded}).
 */
export const EXPLAIN_EXTRA_KEYS = 32;

// Strict mode makes a typo in a schema keyword fail at module load instead of being ignored.
// strictRequired is off only because it flags the standard idiom of `then: { required: [...] }`
// naming properties declared at the top level. Each schema is compiled twice: a validator that
// stops at the first error decides (most values are valid, and it does less work on them), and
// one that collects every error explains an invalid value. Every `format: uuid` sits beside
// UUID_PATTERN, which accepts only what the format accepts: the deciding validator leaves the
// format to the pattern, and the explaining one still names both in its errors.
function compiler(allErrors: boolean) {
  const ajv = new Ajv2020({ strict: true, strictRequired: false, allErrors });
  addFormatsModule.default(ajv, allErrors ? ['uuid', 'date-time'] : ['date-time']);
  if (!allErrors) ajv.addFormat('uuid', true);
  return ajv;
}
const [decides, explains] = [compiler(false), compiler(true)];
const validateResultEnvelope = decides.compile<ResultEnvelope>(resultEnvelopeSchema);
const explainResultEnvelope = explains.compile<ResultEnvelope>(resultEnvelopeSchema);
const validateJob = decides.compile<JobMessage>(jobMessageSchema);
const explainJob = explains.compile<JobMessage>(jobMessageSchema);

/** A schema as the bounded explanation reads it: its listed properties, closed or not. */
interface ShapeSchema {
  type?: unknown;
  properties?: Record<string, unknown>;
  additionalProperties?: unknown;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * `value` cut for the explaining validator: at the top level and in each listed property whose
 * schema is an object schema, every listed key is kept, and the first {@link EXPLAIN_EXTRA_KEYS}
 * extra keys (elements, for an array); deeper values are kept as they are (no schema constrains
 * them beyond their type). `dropped` counts the extra keys cut from closed objects
 * (`additionalProperties: false`): each is one `additionalProperties` error the full explanation
 * would report, and nothing else depends on them.
 */
function cutForExplain(
  value: unknown,
  schema: ShapeSchema,
  depth: number,
): { value: unknown; dropped: number } {
  if (Array.isArray(value)) {
    return {
      value: value.length > EXPLAIN_EXTRA_KEYS ? value.slice(0, EXPLAIN_EXTRA_KEYS) : value,
      dropped: 0,
    };
  }
  if (!isPlainObject(value)) return { value, dropped: 0 };
  const listed = schema.properties ?? {};
  const closed = schema.additionalProperties === false;
  const out: Record<string, unknown> = {};
  let extra = 0;
  let dropped = 0;
  for (const key in value) {
    if (!Object.prototype.hasOwnProperty.call(value, key)) continue;
    const sub = Object.prototype.hasOwnProperty.call(listed, key) ? listed[key] : undefined;
    if (sub === undefined) {
      extra += 1;
      if (extra > EXPLAIN_EXTRA_KEYS) {
        if (closed) dropped += 1;
        continue;
      }
      out[key] = value[key];
    } else if (depth === 0 && isPlainObject(sub) && sub['type'] === 'object') {
      const cut = cutForExplain(value[key], sub as ShapeSchema, depth + 1);
      out[key] = cut.value;
      dropped += cut.dropped;
    } else {
      out[key] = value[key];
    }
  }
  return { value: out, dropped };
}

/**
 * The first {@link MAX_SCHEMA_ERRORS} errors `explain` finds in `value` (which the deciding
 * validator refused) and their count. The explaining validator runs on `value` cut by
 * {@link cutForExplain}, so it builds at most a few hundred error objects whatever the value holds.
 */
function explainBounded(
  explain: ValidateFunction,
  schema: ShapeSchema,
  value: unknown,
): { errors: SchemaError[]; errorCount: number } {
  const cut = cutForExplain(value, schema, 0);
  explain(cut.value);
  const all = explain.errors ?? [];
  const errors = toSchemaErrors(all.slice(0, MAX_SCHEMA_ERRORS));
  const errorCount = all.length + cut.dropped;
  explain.errors = null;
  return { errors, errorCount };
}

function toSchemaErrors(errors: ErrorObject[] | null | undefined): SchemaError[] {
  return (errors ?? []).map(({ instancePath, schemaPath, keyword, params, message }) => ({
    instancePath,
    schemaPath,
    keyword,
    params: { ...params },
    ...(message === undefined ? {} : { message }),
  }));
}

/**
 * Checks any value against {@link resultEnvelopeSchema}. Pure and synchronous; never throws for
 * values produced by `JSON.parse`. Does not check the `Nats-Msg-Id` rule (see `decodeEnvelope`).
 *
 * `large`: the value comes from a large payload. It is then decided by the bounded explanation
 * alone: the deciding validator would walk every key of a hostile object once more. The cut value
 * is valid exactly when the value is, because the keys and elements {@link cutForExplain} leaves
 * out are constrained by nothing but the `additionalProperties: false` it counts (a unit test
 * compares both ways with the full validator).
 */
export function checkResultEnvelope(
  value: unknown,
  opts: { large?: boolean } = {},
): SchemaCheck<ResultEnvelope> {
  if (opts.large) {
    const explained = explainBounded(explainResultEnvelope, resultEnvelopeSchema, value);
    return explained.errorCount === 0
      ? { valid: true, value: value as ResultEnvelope }
      : { valid: false, ...explained };
  }
  return validateResultEnvelope(value)
    ? { valid: true, value }
    : { valid: false, ...explainBounded(explainResultEnvelope, resultEnvelopeSchema, value) };
}

/** Checks any value against {@link jobMessageSchema}; returns the typed value or all errors. Pure. */
export function checkJobMessage(value: unknown): SchemaCheck<JobMessage> {
  if (validateJob(value)) return { valid: true, value };
  explainJob(value);
  const errors = toSchemaErrors(explainJob.errors);
  return { valid: false, errors, errorCount: errors.length };
}

/** Type guard: `true` exactly when `value` is valid against {@link jobMessageSchema}. Pure. */
export function validateJobMessage(value: unknown): value is JobMessage {
  return validateJob(value);
}

/** Each schema by its file name under `schemas/` (its `$id` ends with that name). */
export const SCHEMA_FILES = {
  'recognition-result-message.schema.json': resultEnvelopeSchema,
  'recognition-job-message.schema.json': jobMessageSchema,
} as const;
