/**
 * Reading `schemas/asyncapi.yaml` and checking it against the JSON Schemas it references, for the
 * tests. The document references the schemas and never copies them; these checks make it follow
 * them: every example must be valid, every envelope status must have its message, the addresses
 * must be the schemas' subjects, and a recorded digest of each schema must match the schema.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import type { ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { parse as parseYaml } from 'yaml';

export const ASYNCAPI_PATH = new URL('../../schemas/asyncapi.yaml', import.meta.url);

/** The schema format the payloads declare: the dialect the referenced files are written in. */
export const JSON_SCHEMA_2020_12 = 'application/schema+json;version=2020-12';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

/** One example of a message: its headers (absent = none sent) and its payload. */
export interface MessageExample {
  message: string;
  name: string;
  headers: Record<string, string> | undefined;
  payload: JsonObject;
}

/** The document as written (YAML parsed, nothing resolved). */
export function readAsyncApi(): JsonObject {
  return parseYaml(readFileSync(ASYNCAPI_PATH, 'utf8')) as JsonObject;
}

/** Each referenced schema as its file holds it, by file name. */
export function readSchemaFiles(names: readonly string[]): Record<string, JsonObject> {
  return Object.fromEntries(
    names.map((name) => [
      name,
      JSON.parse(readFileSync(new URL(`../../schemas/${name}`, import.meta.url), 'utf8')) as JsonObject,
    ]),
  );
}

/** `sha256:<hex>` of `value` serialised as JSON with every object's keys sorted, no whitespace. */
export function schemaDigest(value: unknown): string {
  return `sha256:${createHash('sha256').update(canonicalJson(value)).digest('hex')}`;
}

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

function isObject(value: unknown): value is JsonObject {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function at(doc: JsonObject, path: readonly string[]): Json | undefined {
  let node: Json | undefined = doc;
  for (const key of path) node = isObject(node) ? node[key] : undefined;
  return node;
}

/** The value a local `#/a/b` reference points to. */
function resolveLocal(doc: JsonObject, ref: string): Json | undefined {
  if (!ref.startsWith('#/')) return undefined;
  return at(doc, ref.slice(2).split('/'));
}

/** Every `$ref` value anywhere in `value`. */
export function collectRefs(value: unknown, out: string[] = []): string[] {
  if (Array.isArray(value)) for (const v of value) collectRefs(v, out);
  else if (isObject(value))
    for (const [k, v] of Object.entries(value)) {
      if (k === '$ref' && typeof v === 'string') out.push(v);
      else collectRefs(v, out);
    }
  return out;
}

/**
 * `value` with every local `$ref` replaced by its target and `./<file>` by a reference to that
 * schema's `$id` (the schemas are added to the validator under their ids).
 */
function inline(
  doc: JsonObject,
  schemas: Record<string, JsonObject>,
  value: Json | undefined,
): Json | undefined {
  if (Array.isArray(value)) return value.map((v) => inline(doc, schemas, v) ?? null);
  if (!isObject(value)) return value;
  const ref = value['$ref'];
  if (typeof ref === 'string') {
    if (ref.startsWith('./')) return { $ref: String(schemas[ref.slice(2)]?.['$id']) };
    return inline(doc, schemas, resolveLocal(doc, ref));
  }
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, inline(doc, schemas, v) ?? null]));
}

/** A message of `components.messages`, with its name there. */
interface NamedMessage {
  key: string;
  message: JsonObject;
}

function componentMessages(doc: JsonObject): NamedMessage[] {
  const messages = at(doc, ['components', 'messages']);
  if (!isObject(messages)) return [];
  return Object.entries(messages).flatMap(([key, message]) => (isObject(message) ? [{ key, message }] : []));
}

/** Every example of every message in `components.messages`. */
export function messageExamples(doc: JsonObject): MessageExample[] {
  return componentMessages(doc).flatMap(({ key, message }) => {
    const examples = message['examples'];
    if (!Array.isArray(examples)) return [];
    return examples.filter(isObject).map((example, i) => ({
      message: key,
      name: typeof example['name'] === 'string' ? example['name'] : `${key}[${i}]`,
      headers: isObject(example['headers']) ? (example['headers'] as Record<string, string>) : undefined,
      payload: example['payload'] as JsonObject,
    }));
  });
}

/**
 * What a message's payload says beside the schema it references: `{ $ref }` alone, or
 * `allOf: [{ $ref }, { properties: { status: { const } } }]`. Anything else would be a second copy
 * of the contract, and is reported.
 */
interface PayloadShape {
  file: string;
  status?: string;
}

function payloadShape(payload: Json | undefined): PayloadShape | string {
  if (!isObject(payload)) return 'has no payload';
  if (payload['schemaFormat'] !== JSON_SCHEMA_2020_12)
    return `payload schemaFormat is not ${JSON_SCHEMA_2020_12}`;
  const schema = payload['schema'];
  const keys = isObject(schema) ? Object.keys(schema) : [];
  const fileOf = (ref: Json | undefined): string | undefined =>
    isObject(ref) &&
    Object.keys(ref).length === 1 &&
    typeof ref['$ref'] === 'string' &&
    ref['$ref'].startsWith('./')
      ? ref['$ref'].slice(2)
      : undefined;
  if (keys.length === 1 && keys[0] === '$ref') {
    const file = fileOf(schema);
    if (file !== undefined) return { file };
  }
  if (isObject(schema) && keys.length === 1 && keys[0] === 'allOf' && Array.isArray(schema['allOf'])) {
    const [ref, narrowing, ...rest] = schema['allOf'];
    const file = fileOf(ref);
    const status = at(isObject(narrowing) ? narrowing : {}, ['properties', 'status', 'const']);
    const onlyStatus =
      isObject(narrowing) &&
      Object.keys(narrowing).length === 1 &&
      Object.keys(at(narrowing, ['properties']) as JsonObject).length === 1 &&
      Object.keys(at(narrowing, ['properties', 'status']) as JsonObject).length === 1;
    if (file !== undefined && typeof status === 'string' && onlyStatus && rest.length === 0)
      return { file, status };
  }
  return 'payload must be { $ref: ./<schema file> } or allOf [that, { properties: { status: { const } } }]';
}

/** A message's validators: its payload (the referenced schema and its narrowing) and its headers. */
export interface MessageValidators {
  payload: ValidateFunction;
  headers: ValidateFunction;
  /** The `status` the message fixes, for an envelope message. */
  status: string | undefined;
}

function errorsText(errors: ValidateFunction['errors']): string {
  return (errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? e.keyword}`).join('; ');
}

/**
 * A validator of each message of `components.messages` whose payload has the expected shape, by
 * its key there, from the document's own schemas and the referenced files in `schemas`.
 */
export function messageValidators(
  doc: JsonObject,
  schemas: Record<string, JsonObject>,
): Record<string, MessageValidators> {
  const ajv = new Ajv2020({
    strict: true,
    strictRequired: false,
    // The narrowing `{ properties: { status: { const } } }` names no type; the schema it narrows does.
    strictTypes: false,
    allErrors: true,
  });
  addFormatsModule.default(ajv, ['uuid', 'date-time']);
  for (const schema of Object.values(schemas)) ajv.addSchema(schema);
  const out: Record<string, MessageValidators> = {};
  for (const { key, message } of componentMessages(doc)) {
    const shape = payloadShape(message['payload']);
    if (typeof shape === 'string' || !(shape.file in schemas)) continue;
    const headers = inline(doc, schemas, message['headers']);
    out[key] = {
      payload: ajv.compile(inline(doc, schemas, at(message, ['payload', 'schema'])) as object),
      headers: ajv.compile(isObject(headers) ? headers : { type: 'object' }),
      status: shape.status,
    };
  }
  return out;
}

export interface ContractCheckOptions {
  doc: JsonObject;
  /** The referenced schemas by file name (as the files hold them, or changed, to test this check). */
  schemas: Record<string, JsonObject>;
  /** The job schema's file name and the result schema's. */
  jobSchema: string;
  resultSchema: string;
}

/**
 * Everything by which the document does not follow the schemas; empty when it does. Pure: the
 * caller reads the files.
 */
export function contractProblems(opts: ContractCheckOptions): string[] {
  const { doc, schemas, jobSchema, resultSchema } = opts;
  const problems: string[] = [];

  const digests = doc['x-schema-digests'];
  for (const [name, schema] of Object.entries(schemas)) {
    const recorded = isObject(digests) ? digests[name] : undefined;
    const actual = schemaDigest(schema);
    if (recorded !== actual) {
      problems.push(
        `${name} is not the schema this document was written against (x-schema-digests has ` +
          `${String(recorded)}, the schema is ${actual}): review the document against it, then set ` +
          `x-schema-digests.${name}: ${actual}`,
      );
    }
  }
  for (const name of Object.keys(isObject(digests) ? digests : {}))
    if (!(name in schemas)) problems.push(`x-schema-digests names ${name}, which is not a referenced schema`);

  const validators = messageValidators(doc, schemas);
  const referenced = new Set<string>();
  const statuses: string[] = [];
  for (const { key, message } of componentMessages(doc)) {
    const shape = payloadShape(message['payload']);
    if (typeof shape === 'string') {
      problems.push(`message ${key}: ${shape}`);
      continue;
    }
    if (!(shape.file in schemas)) {
      problems.push(`message ${key}: references ${shape.file}, which is not a known schema`);
      continue;
    }
    referenced.add(shape.file);
    if (shape.file === resultSchema) {
      if (shape.status === undefined)
        problems.push(`message ${key}: an envelope message must fix its status`);
      else statuses.push(shape.status);
    }

    const { payload: payloadOk, headers: headersOk } = validators[key]!;
    const examples = messageExamples(doc).filter((e) => e.message === key);
    if (examples.length === 0) problems.push(`message ${key}: has no example`);
    for (const example of examples) {
      if (!payloadOk(example.payload))
        problems.push(`example ${example.name}: payload ${errorsText(payloadOk.errors)}`);
      if (!headersOk(example.headers ?? {}))
        problems.push(`example ${example.name}: headers ${errorsText(headersOk.errors)}`);
    }
  }
  for (const name of Object.keys(schemas))
    if (!referenced.has(name)) problems.push(`no message references ${name}`);

  const statusEnum = at(schemas[resultSchema] ?? {}, ['properties', 'status', 'enum']);
  const declared = Array.isArray(statusEnum) ? statusEnum.map(String) : [];
  for (const status of declared)
    if (statuses.filter((s) => s === status).length !== 1)
      problems.push(
        `envelope status ${status} must have exactly one message (it has ${statuses.filter((s) => s === status).length})`,
      );
  for (const status of statuses)
    if (!declared.includes(status))
      problems.push(`a message fixes status ${status}, which the schema does not allow`);

  const replySubject = at(schemas[jobSchema] ?? {}, ['properties', 'reply_subject', 'const']);
  const fileOfMessage = (ref: string): string | undefined => {
    const target = resolveLocal(doc, ref);
    const shape = isObject(target) ? payloadShape(target['payload']) : 'not a message';
    return typeof shape === 'string' ? undefined : shape.file;
  };
  const channels = Object.values(isObject(doc['channels']) ? doc['channels'] : {}).filter(isObject);
  const resultAddresses = channels
    .filter((channel) => collectRefs(channel['messages']).some((ref) => fileOfMessage(ref) === resultSchema))
    .map((channel) => channel['address']);
  if (resultAddresses.length !== 1 || resultAddresses[0] !== replySubject)
    problems.push(
      `the envelope channel's address must be the job schema's reply_subject (${String(replySubject)})`,
    );

  return problems;
}
