/**
 * The kit's validators: the contract's schemas (generated into `generated/messages.ts` from the
 * core's `schemas/`), compiled once with Ajv and its formats, every error collected.
 */
import { Ajv2020 } from 'ajv/dist/2020.js';
import type { ErrorObject } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import {
  jobMessageSchema,
  resultEnvelopeSchema,
  type JobMessage,
  type ResultEnvelope,
} from './generated/messages.js';

/** One validator error. */
export interface SchemaError {
  instancePath: string;
  keyword: string;
  message?: string;
}

/** A value checked against a schema: typed, or every error Ajv found. */
export type Checked<T> = { valid: true; value: T } | { valid: false; errors: SchemaError[] };

// Strict mode makes a schema keyword the kit does not know fail at load; strictRequired is off
// because the result schema names top-level properties in `then: { required }`.
const ajv = new Ajv2020({ strict: true, strictRequired: false, allErrors: true });
addFormatsModule.default(ajv, ['uuid', 'date-time']);
const jobValidator = ajv.compile(jobMessageSchema);
const envelopeValidator = ajv.compile(resultEnvelopeSchema);

function errorsOf(errors: ErrorObject[] | null | undefined): SchemaError[] {
  return (errors ?? []).map(({ instancePath, keyword, message }) =>
    message === undefined ? { instancePath, keyword } : { instancePath, keyword, message },
  );
}

/** Check a parsed job message (fields the schema does not list are allowed). */
export function checkJobMessage(value: unknown): Checked<JobMessage> {
  return jobValidator(value)
    ? { valid: true, value: value as JobMessage }
    : { valid: false, errors: errorsOf(jobValidator.errors) };
}

/** Check an envelope before it is sent: the core quarantines one that fails. */
export function checkResultEnvelope(value: unknown): Checked<ResultEnvelope> {
  return envelopeValidator(value)
    ? { valid: true, value: value as ResultEnvelope }
    : { valid: false, errors: errorsOf(envelopeValidator.errors) };
}

/** The `error.message` of an invalid job's answer holds at most this much of the errors. */
const INVALID_MESSAGE_MAX = 2_000;

/** Validator errors in one line: `<path> <message>; …`. Pure. */
export function describeErrors(errors: readonly SchemaError[]): string {
  return errors.map((e) => `${e.instancePath || '/'} ${e.message ?? e.keyword}`).join('; ');
}

/** The validator's errors in one bounded line, for the error result and the log. Pure. */
export function describeInvalidJob(errors: readonly SchemaError[]): string {
  return bounded(
    `the job message does not match recognition-job-message.schema.json: ${describeErrors(errors)}`,
    INVALID_MESSAGE_MAX,
  );
}

/** Shorten a text to at most `max` characters, marking the cut. Pure. */
export function bounded(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
