/**
 * `schemas/asyncapi.yaml`, the AsyncAPI 3.0 document of the exchange: the official parser accepts
 * it, its references are local files, every example is what the core accepts, and it follows the
 * JSON Schemas it references (a changed schema makes these tests fail until the document follows).
 */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { DiagnosticSeverity, Parser, fromFile } from '@asyncapi/parser';
import { beforeAll, describe, expect, it } from 'vitest';
import { stringify as stringifyYaml } from 'yaml';
import { RESULT_STATUSES } from '../../machines/statuses.js';
import { CONFIG_VARIABLES, loadConfig } from '../../src/config.js';
import { decodeEnvelope } from '../../src/messages/decodeEnvelope.js';
import { SCHEMA_FILES, checkJobMessage } from '../../src/messages/schemas.js';
import {
  INBOX_CONSUMER,
  JOBS_STREAM,
  JOB_SUBJECT_PREFIX,
  RESULTS_STREAM,
  RESULT_SUBJECT,
  jobMsgId,
} from '../../src/nats/subjects.js';
import {
  ASYNCAPI_PATH,
  collectRefs,
  contractProblems,
  messageExamples,
  readAsyncApi,
  readSchemaFiles,
  schemaDigest,
} from '../helpers/asyncapi.js';

const JOB_SCHEMA = 'recognition-job-message.schema.json';
const RESULT_SCHEMA = 'recognition-result-message.schema.json';
const SCHEMA_NAMES = Object.keys(SCHEMA_FILES);
const defaults = loadConfig({});

/** A deep copy of a JSON value, to change without touching the original. */
function copy<T>(value: T): T {
  return JSON.parse(JSON.stringify(value)) as T;
}

/** `value` without the `x-parser-*` keys the parser adds to every schema it reads. */
function withoutParserKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutParserKeys);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([k]) => !k.startsWith('x-parser-'))
      .map(([k, v]) => [k, withoutParserKeys(v)]),
  );
}

/** The parser's output for `text`, or for the file (read by the parser itself, with its references). */
async function parseDocument(text?: string) {
  const parser = new Parser();
  const path = fileURLToPath(ASYNCAPI_PATH);
  const output =
    text === undefined ? await fromFile(parser, path).parse() : await parser.parse(text, { source: path });
  const severe = output.diagnostics.filter(
    (d) => d.severity === DiagnosticSeverity.Error || d.severity === DiagnosticSeverity.Warning,
  );
  return { ...output, severe };
}

/** Loading the parser's rulesets takes seconds on a busy machine: parse the file once. */
const PARSE_TIMEOUT_MS = 60_000;
let parsed: Awaited<ReturnType<typeof parseDocument>>;
beforeAll(async () => {
  parsed = await parseDocument();
}, PARSE_TIMEOUT_MS);

describe('schemas/asyncapi.yaml for the official parser (@asyncapi/parser)', () => {
  it('is a valid AsyncAPI 3.0.0 document: no error, no warning', () => {
    const { document, severe } = parsed;
    expect(severe.map((d) => `${d.code}: ${d.message} at ${d.path.join('.')}`)).toEqual([]);
    expect(document?.version()).toBe('3.0.0');
  });

  it('has the two channels and, per side, the operations of the exchange', () => {
    const { document } = parsed;
    const channels = Object.fromEntries(
      document!
        .channels()
        .all()
        .map((c) => [c.id(), c.address()]),
    );
    expect(channels).toEqual({
      recognitionJob: `${JOB_SUBJECT_PREFIX}{service}`,
      recognitionResult: RESULT_SUBJECT,
    });
    expect(document!.channels().get('recognitionJob')!.parameters().get('service')).toBeDefined();
    const operations = document!
      .operations()
      .all()
      .map((op) => ({
        id: op.id(),
        action: op.action(),
        side: op.tags().all()[0]!.name(),
        channel: op.channels().all()[0]!.id(),
        messages: op
          .messages()
          .all()
          .map((m) => m.name())
          .sort(),
      }));
    const envelopes = ['ack', 'done', 'error', 'needs_check'];
    expect(operations).toEqual([
      { id: 'publishJob', action: 'send', side: 'core', channel: 'recognitionJob', messages: ['job'] },
      { id: 'receiveJob', action: 'receive', side: 'service', channel: 'recognitionJob', messages: ['job'] },
      {
        id: 'sendEnvelope',
        action: 'send',
        side: 'service',
        channel: 'recognitionResult',
        messages: envelopes,
      },
      {
        id: 'receiveEnvelope',
        action: 'receive',
        side: 'core',
        channel: 'recognitionResult',
        messages: envelopes,
      },
    ]);
    for (const op of document!.operations().all()) expect(op.bindings().get('nats')).toBeDefined();
  });

  it('has a local server and a production server templated by host and port, each with a default', () => {
    const { document } = parsed;
    const servers = Object.fromEntries(
      document!
        .servers()
        .all()
        .map((s) => [s.id(), { host: s.host(), protocol: s.protocol() }]),
    );
    expect(servers).toEqual({
      local: { host: defaults.NATS_URL.replace(/^nats:\/\//, ''), protocol: 'nats' },
      production: { host: '{host}:{port}', protocol: 'nats' },
    });
    const production = document!.servers().get('production')!;
    const variables = Object.fromEntries(
      production
        .variables()
        .all()
        .map((v) => [v.id(), { default: v.defaultValue(), examples: v.examples().length }]),
    );
    expect(Object.keys(variables).sort()).toEqual(['host', 'port']);
    for (const v of Object.values(variables)) {
      expect(v.default).toBeTruthy();
      expect(v.examples).toBeGreaterThan(0);
    }
    expect(Number(variables['port']!.default)).toBeGreaterThan(0);
    // The local server is the default NATS_URL of the core, without authentication.
    expect(document!.servers().get('local')!.security()).toEqual([]);
  });

  it('the production server takes the ways the core authenticates to NATS, as alternatives', () => {
    const { document } = parsed;
    const schemes = Object.fromEntries(
      document!
        .components()
        .securitySchemes()
        .all()
        .map((s) => [
          s.id(),
          {
            type: s.type(),
            env: s
              .extensions()
              .all()
              .filter((e) => e.id().endsWith('_env'))
              .map((e) => e.value() as string)
              .sort(),
          },
        ]),
    );
    expect(schemes).toEqual({
      userPassword: { type: 'userPassword', env: ['NATS_PASSWORD', 'NATS_USER'] },
      credentialsFile: { type: 'asymmetricEncryption', env: ['NATS_CREDS'] },
      clientCertificate: { type: 'X509', env: ['NATS_TLS_CA', 'NATS_TLS_CERT', 'NATS_TLS_KEY'] },
    });
    for (const s of document!.components().securitySchemes().all())
      expect(s.description()?.length ?? 0, s.id()).toBeGreaterThan(0);
    // Each entry of `security` is one alternative: any one of them authorizes a connection.
    const production = document!.servers().get('production')!;
    expect(production.security().map((req) => req.all().map((r) => r.scheme().type()))).toEqual([
      ['userPassword'],
      ['asymmetricEncryption'],
      ['X509'],
    ]);
  });

  it(
    'refuses a server whose security names a scheme the document does not define',
    async () => {
      const broken = readAsyncApi();
      const servers = broken['servers'] as Record<string, { security: unknown[] }>;
      servers['production']!.security = [{ $ref: '#/components/securitySchemes/kerberos' }];
      const { severe } = await parseDocument(stringifyYaml(broken));
      expect(severe.some((d) => d.severity === DiagnosticSeverity.Error)).toBe(true);
    },
    PARSE_TIMEOUT_MS,
  );

  it(
    'reports an error for a broken copy of the document (the validation is real)',
    async () => {
      const broken = readAsyncApi();
      (broken['operations'] as Record<string, Record<string, unknown>>)['publishJob']!['action'] = 'publish';
      const { severe } = await parseDocument(stringifyYaml(broken));
      expect(severe.some((d) => d.severity === DiagnosticSeverity.Error)).toBe(true);
    },
    PARSE_TIMEOUT_MS,
  );

  it('refers only to itself and to the schema files beside it, which the parser reads from disk', () => {
    const doc = readAsyncApi();
    const refs = collectRefs(doc);
    const external = refs.filter((r) => !r.startsWith('#/'));
    expect(external.every((r) => /^\.\/[a-z-]+\.schema\.json$/.test(r))).toBe(true);
    expect([...new Set(external)].sort()).toEqual(SCHEMA_NAMES.map((n) => `./${n}`).sort());
    for (const r of external) expect(existsSync(new URL(r, ASYNCAPI_PATH))).toBe(true);
    // The schemas themselves reference nothing: nothing is fetched from anywhere.
    for (const schema of Object.values(readSchemaFiles(SCHEMA_NAMES)))
      expect(collectRefs(schema)).toEqual([]);

    const { document } = parsed;
    const resolved = document!.json() as unknown as {
      components: { messages: Record<string, { payload: { schema: { $ref?: string; allOf?: unknown[] } } }> };
    };
    const files = readSchemaFiles(SCHEMA_NAMES);
    expect(withoutParserKeys(resolved.components.messages['job']!.payload.schema)).toEqual(files[JOB_SCHEMA]);
    expect(withoutParserKeys(resolved.components.messages['done']!.payload.schema.allOf![0])).toEqual(
      files[RESULT_SCHEMA],
    );
  });
});

describe('schemas/asyncapi.yaml follows the JSON Schemas', () => {
  it('has no problem against the schema files as they are', () => {
    const problems = contractProblems({
      doc: readAsyncApi(),
      schemas: readSchemaFiles(SCHEMA_NAMES),
      jobSchema: JOB_SCHEMA,
      resultSchema: RESULT_SCHEMA,
    });
    expect(problems).toEqual([]);
  });

  it('records the digest of each schema file it references', () => {
    const digests = readAsyncApi()['x-schema-digests'];
    const files = readSchemaFiles(SCHEMA_NAMES);
    expect(digests).toEqual(Object.fromEntries(SCHEMA_NAMES.map((n) => [n, schemaDigest(files[n])])));
  });

  describe('a changed schema that the document does not follow is reported', () => {
    const doc = readAsyncApi();
    const check = (change: (schemas: Record<string, Record<string, unknown>>) => void) => {
      const schemas = copy(readSchemaFiles(SCHEMA_NAMES)) as Record<string, Record<string, unknown>>;
      change(schemas);
      return contractProblems({
        doc,
        schemas: schemas as never,
        jobSchema: JOB_SCHEMA,
        resultSchema: RESULT_SCHEMA,
      });
    };
    type Props = Record<string, unknown>;

    it('a new required field of the job message: the job example fails, and the digest', () => {
      const problems = check((s) => {
        const job = s[JOB_SCHEMA] as { required: string[]; properties: Props };
        job.required.push('priority');
        job.properties['priority'] = { type: 'integer' };
      });
      expect(problems.some((p) => p.startsWith('example job: payload') && p.includes('priority'))).toBe(true);
      expect(problems.some((p) => p.startsWith(`${JOB_SCHEMA} is not the schema`))).toBe(true);
    });

    it('a new envelope status: it has no message', () => {
      const problems = check((s) => {
        (s[RESULT_SCHEMA] as { properties: { status: { enum: string[] } } }).properties.status.enum.push(
          'cancelled',
        );
      });
      expect(problems).toContain('envelope status cancelled must have exactly one message (it has 0)');
    });

    it('a removed envelope status: its message and examples no longer fit', () => {
      const problems = check((s) => {
        const status = (s[RESULT_SCHEMA] as { properties: { status: { enum: string[] } } }).properties.status;
        status.enum = status.enum.filter((v) => v !== 'needs_check');
      });
      expect(problems).toContain('a message fixes status needs_check, which the schema does not allow');
      expect(problems.some((p) => p.startsWith('example needs_check: payload'))).toBe(true);
    });

    it('a changed reply subject: the envelope channel no longer matches it', () => {
      const problems = check((s) => {
        ((s[JOB_SCHEMA] as { properties: Props }).properties['reply_subject'] as Props)['const'] =
          'recognition.results';
      });
      expect(problems.some((p) => p.startsWith("the envelope channel's address"))).toBe(true);
    });

    it('a change no example shows (a tighter bound): the digest', () => {
      const problems = check((s) => {
        const service = (s[RESULT_SCHEMA] as { properties: { service: { properties: Props } } }).properties
          .service;
        (service.properties['name'] as Props)['maxLength'] = 100;
      });
      expect(problems).toHaveLength(1);
      expect(problems[0]).toMatch(
        new RegExp(`^${RESULT_SCHEMA.replace(/\./g, '\\.')} is not the schema .* set x-schema-digests`),
      );
    });

    it('a payload that restates the schema instead of referencing it', () => {
      const changed = copy(doc) as { components: { messages: Record<string, { payload: unknown }> } };
      changed.components.messages['job']!.payload = {
        schemaFormat: 'application/schema+json;version=2020-12',
        schema: { type: 'object', properties: { job_id: { type: 'string' } } },
      };
      const problems = contractProblems({
        doc: changed as never,
        schemas: readSchemaFiles(SCHEMA_NAMES),
        jobSchema: JOB_SCHEMA,
        resultSchema: RESULT_SCHEMA,
      });
      expect(problems.some((p) => p.startsWith('message job: payload must be'))).toBe(true);
      expect(problems).toContain(`no message references ${JOB_SCHEMA}`);
    });
  });

  it('the schemas use only keywords that mean the same in JSON Schema draft-07 (for older tools)', () => {
    // Keywords of 2020-12 that draft-07 lacks or reads differently ($defs, prefixItems,
    // unevaluated*, dependentRequired, array-valued items, ...) would make a draft-07 validator
    // accept what the core refuses.
    const common = new Set([
      '$schema',
      '$id',
      'title',
      'description',
      'type',
      'enum',
      'const',
      'format',
      'pattern',
      'minLength',
      'maxLength',
      'minimum',
      'maximum',
      'required',
      'properties',
      'additionalProperties',
      'allOf',
      'if',
      'then',
      'else',
    ]);
    const used = new Set<string>();
    const walk = (schema: unknown): void => {
      if (schema === null || typeof schema !== 'object' || Array.isArray(schema)) return;
      for (const [keyword, value] of Object.entries(schema)) {
        used.add(keyword);
        if (keyword === 'properties') for (const sub of Object.values(value as object)) walk(sub);
        else if (keyword === 'allOf') for (const sub of value as unknown[]) walk(sub);
        else if (['if', 'then', 'else', 'additionalProperties'].includes(keyword)) walk(value);
      }
    };
    for (const schema of Object.values(readSchemaFiles(SCHEMA_NAMES))) walk(schema);
    expect([...used].filter((k) => !common.has(k))).toEqual([]);
  });
});

describe('every example of schemas/asyncapi.yaml is accepted by the core', () => {
  const doc = readAsyncApi();
  const examples = messageExamples(doc);
  const jobExample = examples.find((e) => e.message === 'job')!;
  const statusOf: Record<string, string> = {
    ack: 'processing',
    done: 'done',
    needsCheck: 'needs_check',
    error: 'error',
  };

  it('there is an example of each message', () => {
    expect([...new Set(examples.map((e) => e.message))].sort()).toEqual(
      ['ack', 'done', 'error', 'job', 'needsCheck'].sort(),
    );
  });

  it('the job example is a valid job message with the Nats-Msg-Id the publisher sets', () => {
    for (const example of examples.filter((e) => e.message === 'job')) {
      const check = checkJobMessage(example.payload);
      expect(check.valid).toBe(true);
      if (!check.valid) continue;
      expect(example.headers?.['Nats-Msg-Id']).toBe(jobMsgId(check.value.job_id, check.value.attempt));
      expect(check.value.reply_subject).toBe(RESULT_SUBJECT);
    }
  });

  const envelopeExamples = examples.filter((e) => e.message !== 'job');
  it.each(envelopeExamples.map((e) => [e.name, e] as const))(
    '%s: the decoder accepts it with its headers, as the status of its message',
    (_name, example) => {
      const msgId = example.headers?.['Nats-Msg-Id'];
      const decoded = decodeEnvelope({
        data: new TextEncoder().encode(JSON.stringify(example.payload)),
        msgId,
        maxBytes: defaults.MAX_ENVELOPE_BYTES,
      });
      expect(decoded).toMatchObject({ ok: true, msgId: msgId ?? null });
      if (!decoded.ok) return;
      expect(decoded.envelope.status).toBe(statusOf[example.message]);
      // One story: the envelopes answer the job example, with the recommended msg-id forms.
      expect(decoded.envelope.job_id).toBe(jobExample.payload['job_id']);
      const attempt = String(jobExample.payload['attempt']);
      if (msgId !== undefined) {
        const prefix = example.message === 'ack' ? 'ack' : 'result';
        expect(msgId).toBe(`${prefix}:${decoded.envelope.job_id}:${attempt}`);
      }
    },
  );

  it('the headers the document requires are the ones the decoder requires', () => {
    const schemas = (doc['components'] as { schemas: Record<string, { required?: string[] }> }).schemas;
    expect(schemas['resultHeaders']!.required).toEqual(['Nats-Msg-Id']);
    expect(schemas['ackHeaders']!.required).toBeUndefined();
    for (const example of envelopeExamples) {
      const decoded = decodeEnvelope({
        data: new TextEncoder().encode(JSON.stringify(example.payload)),
        msgId: undefined,
        maxBytes: defaults.MAX_ENVELOPE_BYTES,
      });
      if ((RESULT_STATUSES as readonly string[]).includes(String(example.payload['status'])))
        expect(decoded).toMatchObject({ ok: false, reason: 'MISSING_MSG_ID' });
      else expect(decoded.ok).toBe(true);
    }
  });

  it('the trace context of the examples is one trace: the service continues the job’s', () => {
    const traceId = (tp: string) => tp.split('-')[1];
    const jobTrace = traceId(jobExample.headers!['traceparent']!);
    const traced = envelopeExamples.filter((e) => e.headers?.['traceparent'] !== undefined);
    expect(traced.length).toBeGreaterThan(0);
    for (const e of traced) expect(traceId(e.headers!['traceparent']!)).toBe(jobTrace);
    // And some examples carry none: a service without tracing is just as valid.
    expect(envelopeExamples.some((e) => e.headers?.['traceparent'] === undefined)).toBe(true);
  });
});

describe('the facts in schemas/asyncapi.yaml are the code’s', () => {
  const doc = readAsyncApi() as Record<string, unknown>;
  const channels = doc['channels'] as Record<string, Record<string, Record<string, unknown>>>;
  const operations = doc['operations'] as Record<
    string,
    { bindings: { nats: { 'x-jetstream-consumer'?: Record<string, unknown> } } }
  >;

  it('streams, consumer and limits use the core’s names and its configuration defaults', () => {
    const jobs = channels['recognitionJob']!['x-jetstream-stream']!;
    const results = channels['recognitionResult']!['x-jetstream-stream']!;
    expect(jobs['name']).toBe(JOBS_STREAM);
    expect(results['name']).toBe(RESULTS_STREAM);
    for (const stream of [jobs, results]) {
      expect(stream['duplicate_window_ms']).toBe(defaults.NATS_DUPLICATE_WINDOW_MS);
      expect(stream['num_replicas']).toBe(defaults.NATS_STREAM_REPLICAS);
    }
    const inbox = operations['receiveEnvelope']!.bindings.nats['x-jetstream-consumer']!;
    expect(inbox['durable_name']).toBe(INBOX_CONSUMER);
    expect(inbox['ack_wait_ms']).toBe(defaults.INBOX_ACK_WAIT_MS);
    expect(inbox['max_ack_pending']).toBe(defaults.INBOX_MAX_ACK_PENDING);
    expect(channels['recognitionResult']!['x-max-envelope-bytes']).toBe(defaults.MAX_ENVELOPE_BYTES);
  });

  it('every configuration variable it names (the *_env fields) exists', () => {
    const named: string[] = [];
    const walk = (value: unknown): void => {
      if (value === null || typeof value !== 'object') return;
      for (const [k, v] of Object.entries(value)) {
        if (k.endsWith('_env') && typeof v === 'string') named.push(v);
        else walk(v);
      }
    };
    walk(doc);
    expect(named.length).toBeGreaterThan(0);
    expect(named.filter((n) => !(n in CONFIG_VARIABLES))).toEqual([]);
  });

  it('info.version is the package version', () => {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
      version: string;
    };
    expect((doc['info'] as { version: string }).version).toBe(pkg.version);
  });
});
