/**
 * Security against real servers:
 * - authentication: a nats-server requiring a user/password, then a token: the daemon (the built
 *   CLI) starts with the right credentials and fails clearly with wrong ones (non-zero exit, one
 *   line, no secret printed);
 * - TLS: a self-signed certificate (the client trusts it through NATS_TLS_CA) and mutual TLS with
 *   a client certificate; without the CA, or without the client certificate, the start fails
 *   clearly;
 * - permissions: in natsPermissions.test.ts, on the shipped configuration;
 * - hostile input end to end: SQL metacharacters, unicode and very long strings in every string
 *   field, deeply nested and huge JSON, sent as real messages: each applied or quarantined,
 *   stored verbatim where stored, nothing executed.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection } from '@nats-io/nats-core';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RESULTS_STREAM } from '../../src/nats/subjects.js';
import { spawnCli, runCli } from '../helpers/cliProcess.js';
import { insertJob, loadAll } from '../helpers/fixtures.js';
import type { NatsServerHandle } from '../../workshop/localServers/natsServer.js';
import { createServiceClient } from '../helpers/serviceClient.js';
import { inboxDrained, waitFor } from '../helpers/testDaemon.js';
import { useHarness } from '../helpers/harness.js';

const t = useHarness({ database: true });
let certDir: string;

beforeAll(async () => {
  certDir = await mkdtemp(join(tmpdir(), 'rc-security-'));
});

afterAll(async () => {
  await rm(certDir, { recursive: true, force: true });
});

/** Environment of a CLI `start` against the test database and `natsUrl`. */
const startEnv = (natsUrl: string, extra: Record<string, string> = {}): Record<string, string> => ({
  DATABASE_URL: t.url,
  NATS_URL: natsUrl,
  HTTP_HOST: '127.0.0.1',
  HTTP_PORT: '0',
  LOG_LEVEL: 'debug',
  LOG_PRETTY: 'false',
  ...extra,
});

/** `start` must come up (ready) and stop with exit 0 on SIGTERM; returns every line it printed. */
async function expectStarts(env: Record<string, string>): Promise<string[]> {
  const cli = spawnCli(['start'], env);
  try {
    const started = await cli.waitForLog((l) => l.event === 'started');
    const ready = await fetch(`http://127.0.0.1:${Number(started.http_port)}/readyz`);
    expect(ready.status, cli.output()).toBe(200);
  } finally {
    cli.child.kill('SIGTERM');
  }
  expect(await cli.exited, cli.output()).toEqual({ code: 0, signal: null });
  return cli.lines.map((l) => l.text);
}

/** `start` must fail: exit 1, one line on stderr (matching `pattern`), no secret anywhere. */
async function expectFailsClearly(
  env: Record<string, string>,
  pattern: RegExp,
  secrets: string[],
): Promise<string> {
  const r = await runCli(['start'], env);
  expect(r.code, r.output).toBe(1);
  expect(r.stderr, r.output).toHaveLength(1);
  expect(r.stderr[0]).toMatch(/^recognition-core: /);
  expect(r.stderr[0]).toMatch(pattern);
  for (const secret of secrets) expect(r.output).not.toContain(secret);
  return r.stderr[0]!;
}

describe('authentication', () => {
  const PASSWORD = 'pa55-Wd-q7Xk';
  const WRONG = 'wrong-Pa55-r2';
  const TOKEN = 'tok-8mV3-zzQ1';
  const WRONG_TOKEN = 'tok-wrong-4Nd';

  it('user/password: starts with the right ones; wrong or missing credentials end the start with one line', async () => {
    const s = await t.startNats({ user: 'core', password: PASSWORD });
    const lines = await expectStarts(startEnv(s.url, { NATS_USER: 'core', NATS_PASSWORD: PASSWORD }));
    expect(lines.join('\n')).not.toContain(PASSWORD);
    await expectFailsClearly(startEnv(s.url, { NATS_USER: 'core', NATS_PASSWORD: WRONG }), /authoriz/i, [
      PASSWORD,
      WRONG,
    ]);
    await expectFailsClearly(
      startEnv(s.url, { NATS_USER: 'intruder', NATS_PASSWORD: PASSWORD }),
      /authoriz/i,
      [PASSWORD],
    );
    await expectFailsClearly(startEnv(s.url), /authoriz/i, [PASSWORD]);
  });

  it('token: starts with the right one; a wrong or missing token ends the start with one line', async () => {
    const s = await t.startNats({ token: TOKEN });
    const lines = await expectStarts(startEnv(s.url, { NATS_TOKEN: TOKEN }));
    expect(lines.join('\n')).not.toContain(TOKEN);
    await expectFailsClearly(startEnv(s.url, { NATS_TOKEN: WRONG_TOKEN }), /authoriz/i, [TOKEN, WRONG_TOKEN]);
    await expectFailsClearly(startEnv(s.url), /authoriz/i, [TOKEN]);
  });
});

// ---------------------------------------------------------------------------------------------
// TLS
// ---------------------------------------------------------------------------------------------

function openssl(args: string[]): void {
  execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

const SAN = 'subjectAltName=DNS:localhost,IP:127.0.0.1';
const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

/** A self-signed server certificate for localhost and 127.0.0.1. */
function selfSigned(dir: string): { cert: string; key: string } {
  const cert = join(dir, 'self.pem');
  const key = join(dir, 'self.key');
  openssl([
    'req',
    '-x509',
    ...EC,
    '-days',
    '1',
    '-subj',
    '/CN=localhost',
    '-addext',
    SAN,
    '-keyout',
    key,
    '-out',
    cert,
  ]);
  return { cert, key };
}

/** A CA, and a server and a client certificate signed by it. */
async function withCa(dir: string) {
  const f = (name: string) => join(dir, name);
  openssl([
    'req',
    '-x509',
    ...EC,
    '-days',
    '1',
    '-subj',
    '/CN=recognition-test-ca',
    '-keyout',
    f('ca.key'),
    '-out',
    f('ca.pem'),
  ]);
  await writeFile(f('server.ext'), `${SAN}\nextendedKeyUsage=serverAuth\n`);
  await writeFile(f('client.ext'), 'extendedKeyUsage=clientAuth\n');
  for (const who of ['server', 'client']) {
    openssl([
      'req',
      ...EC,
      '-subj',
      `/CN=${who === 'server' ? 'localhost' : 'recognition-core'}`,
      '-keyout',
      f(`${who}.key`),
      '-out',
      f(`${who}.csr`),
    ]);
    openssl([
      'x509',
      '-req',
      '-in',
      f(`${who}.csr`),
      '-CA',
      f('ca.pem'),
      '-CAkey',
      f('ca.key'),
      '-CAcreateserial',
      '-days',
      '1',
      '-extfile',
      f(`${who}.ext`),
      '-out',
      f(`${who}.pem`),
    ]);
  }
  return {
    ca: f('ca.pem'),
    serverCert: f('server.pem'),
    serverKey: f('server.key'),
    clientCert: f('client.pem'),
    clientKey: f('client.key'),
  };
}

describe('TLS', () => {
  it('self-signed certificate: the daemon connects through TLS with NATS_TLS_CA and applies an envelope; without the CA it fails clearly', async () => {
    const { cert, key } = selfSigned(certDir);
    const s = await t.startNats({ tls: { cert, key } });
    // The end-to-end part in process (the CLI's start is checked below): an envelope over TLS.
    const daemon = await t.startDaemon({ natsUrl: s.url, env: { NATS_TLS_CA: cert } });
    expect(daemon.nats.nc.info?.tls_required).toBe(true);
    const nc = await t.connect({ servers: s.url, tls: { caFile: cert } });
    const job = await insertJob(t.db, { status: 'published' });
    await createServiceClient(nc).ack(job);
    await waitFor(
      async () => (await loadAll(t.db, job.jobId)).job.status === 'processing',
      'the ack applied over TLS',
    );
    await daemon.stop();

    await expectStarts(startEnv(s.url, { NATS_TLS_CA: cert }));
    await expectFailsClearly(startEnv(s.url), /NATS \(NATS_URL\).*self-signed certificate/, []);
  });

  it('mutual TLS: a client certificate is required; with it the daemon starts, without it the start fails clearly', async () => {
    const c = await withCa(certDir);
    const s = await t.startNats({
      configText: [
        'tls {',
        `  cert_file: ${JSON.stringify(c.serverCert)}`,
        `  key_file: ${JSON.stringify(c.serverKey)}`,
        `  ca_file: ${JSON.stringify(c.ca)}`,
        '  verify: true',
        '}',
      ].join('\n'),
    });
    await expectStarts(
      startEnv(s.url, { NATS_TLS_CA: c.ca, NATS_TLS_CERT: c.clientCert, NATS_TLS_KEY: c.clientKey }),
    );
    // The server refuses the handshake after it completed on the client's side (TLS 1.3), so the
    // client only notices when its connect times out (about 20 s): the line says what to set.
    await expectFailsClearly(
      startEnv(s.url, { NATS_TLS_CA: c.ca }),
      /NATS \(NATS_URL\) is not usable: .*timeout.*without a client certificate.*set NATS_TLS_CERT and NATS_TLS_KEY/i,
      [],
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Hostile input, end to end
// ---------------------------------------------------------------------------------------------

describe('hostile input through real NATS into the real database', () => {
  const MAX = 1024 * 1024;
  let s: NatsServerHandle;
  let nc: NatsConnection;
  let send: ReturnType<typeof createServiceClient>;
  const enc = new TextEncoder();
  /**
   * The daemon's results bucket, the only one a result's object may be in: SQL metacharacters, and
   * as long as the schema allows a bucket (255 characters).
   */
  const BUCKET = `'; DROP TABLE s3_object; -- "q" \\ $1 %_`.padEnd(255, 'b');

  beforeAll(async () => {
    // Room above MAX_ENVELOPE_BYTES (1 MiB, the default), so an oversized envelope reaches the inbox.
    s = await t.startNats({ configText: 'max_payload: 4194304' });
    await t.startDaemon({ natsUrl: s.url, env: { RESULTS_BUCKET: BUCKET } });
    nc = await t.connect({ servers: s.url });
    send = createServiceClient(nc);
  });

  /** Wait until core-inbox has acked everything published so far. */
  const drained = () => inboxDrained(nc, 60_000);

  /** Publish raw bytes with a msg id; returns the stream sequence. */
  async function publish(
    data: string | Uint8Array,
    msgId: string | null,
    headers: Record<string, string> = {},
  ): Promise<number> {
    const ack = await send.raw(data, { ...headers, ...(msgId ? { 'Nats-Msg-Id': msgId } : {}) });
    return ack.seq;
  }

  async function quarantined(seq: number) {
    return t.db
      .selectFrom('inbox_quarantine')
      .selectAll()
      .where('stream', '=', RESULTS_STREAM)
      .where('stream_seq', '=', String(seq))
      .execute();
  }

  const SQL = [
    "'; DROP TABLE recognition_job; --",
    "\"; DELETE FROM s3_object WHERE ''=''; --",
    "1' OR '1'='1",
    '$1 $2 $$ $body$',
    'back\\slash \\\\ \\x00 \\u0000 \\n',
    'quote \' double " back ` semi ; percent % under _',
    '\u202Eevil\u202C zero\u200Bwidth e\u0301 表格 🧾👩‍👩‍👧',
    "Robert'); DROP TABLE stored_file;--",
  ];
  const hostile = (i: number) => SQL[i % SQL.length]!;

  it('SQL metacharacters and unicode in every string field: applied and stored verbatim, nothing executed', async () => {
    const a = await insertJob(t.db, { status: 'published' });
    const b = await insertJob(t.db, { status: 'published' });
    const c = await insertJob(t.db, { status: 'published' });
    // service.name must be the job's target_service (letters, digits, _ and -); every other
    // string field may hold anything, and a hostile service.name is quarantined verbatim.
    const service = { name: 'tabular-parser', version: hostile(3) };
    const metrics = {
      [hostile(1)]: hostile(2),
      nested: { [hostile(4)]: [hostile(5), hostile(6), 42, 1.5, null, true] },
      [hostile(7)]: {},
    };
    const done = {
      job_id: a.jobId,
      status: 'done',
      service,
      // Under the job's own prefix in the results bucket; hostile below it.
      result_s3: {
        bucket: BUCKET,
        key: `results/${a.fileId}/${a.jobId}/${hostile(0)}/${hostile(6)}/${hostile(4)}`,
      },
      result_schema_version: hostile(7),
      metrics,
      sent_at: '2025-03-01T10:00:00Z',
      [hostile(2)]: hostile(0),
    };
    const doneMsgId = `result:${hostile(0)}:${hostile(5)}`.replace(/[\r\n]/g, ' ');
    await publish(JSON.stringify(done), doneMsgId, { 'X-Evil': hostile(7) });
    const error = {
      job_id: b.jobId,
      status: 'error',
      service: { name: 'tabular-parser', version: hostile(1) },
      error: { code: hostile(0), message: SQL.join('\n') },
    };
    await publish(JSON.stringify(error), `result:${b.jobId}:${hostile(2)}`);
    await publish(
      JSON.stringify({
        job_id: c.jobId,
        status: 'processing',
        service: { name: hostile(7), version: hostile(4) },
      }),
      `ack:${hostile(3)}`,
    );
    await publish(
      JSON.stringify({
        job_id: c.jobId,
        status: 'processing',
        service: { name: 'tabular-parser', version: hostile(4) },
      }),
      `ack:${hostile(3)}:own`,
    );
    // A hostile job_id cannot even reach a query: it is not a uuid.
    const badSeq = await publish(JSON.stringify({ ...done, job_id: hostile(0) }), `bad:${randomUUID()}`);
    await drained();

    const ra = await loadAll(t.db, a.jobId);
    expect(ra.job).toMatchObject({
      status: 'done',
      service_name: service.name,
      service_version: service.version,
      result_schema_version: hostile(7),
      result_msg_id: doneMsgId,
    });
    expect(ra.job.metrics).toEqual(metrics);
    const obj = await t.db
      .selectFrom('s3_object')
      .selectAll()
      .where('id', '=', ra.job.result_s3_object_id!)
      .executeTakeFirstOrThrow();
    expect(obj).toMatchObject({
      bucket: done.result_s3.bucket,
      key: done.result_s3.key,
      bucket_role: 'results',
      created_by: service.name,
    });
    const rb = await loadAll(t.db, b.jobId);
    expect(rb.job).toMatchObject({
      status: 'error',
      error_code: hostile(0),
      error_message: SQL.join('\n'),
      service_name: 'tabular-parser',
      service_version: hostile(1),
    });
    expect(rb.file).toMatchObject({ status: 'ERROR', error_code: hostile(0) });
    const rc = await loadAll(t.db, c.jobId);
    expect(rc.job).toMatchObject({
      status: 'processing',
      service_name: 'tabular-parser',
      service_version: hostile(4),
    });
    const mismatch = await t.db
      .selectFrom('inbox_quarantine')
      .selectAll()
      .where('job_id', '=', c.jobId)
      .execute();
    expect(mismatch).toMatchObject([
      {
        reason: 'SERVICE_MISMATCH',
        details: expect.objectContaining({ expected: 'tabular-parser', got: hostile(7) }),
      },
    ]);
    const [q] = await quarantined(badSeq);
    expect(q).toMatchObject({ reason: 'SCHEMA_INVALID', job_id: hostile(0) });

    // Nothing executed: every table and the legal-edge trigger are still there.
    const tables = await sql<{ name: string | null }>`
      SELECT to_regclass(n)::text AS name FROM unnest(ARRAY['s3_object','stored_file','recognition_job',
        'recognition_job_transition','inbox_quarantine','recognition_job_edge']) AS n`.execute(t.db);
    expect(tables.rows.map((r) => r.name)).toEqual([
      's3_object',
      'stored_file',
      'recognition_job',
      'recognition_job_transition',
      'inbox_quarantine',
      'recognition_job_edge',
    ]);
    const trigger = await sql<{
      n: string;
    }>`SELECT count(*) AS n FROM pg_trigger WHERE tgname = 'recognition_job_legal_edge'`.execute(t.db);
    expect(Number(trigger.rows[0]!.n)).toBe(1);
  });

  it('the longest strings the schema allows in every field: applied and stored verbatim', async () => {
    // The longest service.name is a target_service of 200 characters (letters, digits, _ and -).
    const longName = Array.from({ length: 200 }, (_, i) => 'aZ09_-'[i % 6]).join('');
    const job = await insertJob(t.db, { status: 'published', target_service: longName });
    const errJob = await insertJob(t.db, { status: 'published', target_service: longName });
    // Mixed widths: 1- to 4-byte UTF-8 characters, SQL metacharacters among them.
    const longText = (codePoints: number, seed: number) => {
      const alphabet = [...'aZ\'"\\$;%_-é表🧾'];
      return Array.from({ length: codePoints }, (_, i) => alphabet[(i * 7 + seed) % alphabet.length]!).join(
        '',
      );
    };
    // S3 itself keeps keys to 1 024 bytes: here 1 024 ASCII characters (quotes, backslashes, $ …),
    // under the job's own prefix, in the results bucket (255 characters long).
    const ascii = (n: number, seed: number) =>
      [...longText(n, seed)].map((ch) => (ch.length === 1 && ch < '\x7f' ? ch : 'x')).join('');
    const prefix = `results/${job.fileId}/${job.jobId}/`;
    const s3 = { bucket: BUCKET, key: prefix + ascii(1024 - prefix.length, 2) };
    const done = {
      job_id: job.jobId,
      status: 'needs_check',
      service: { name: longName, version: longText(200, 4) },
      result_s3: s3,
      result_schema_version: longText(200, 5),
      metrics: {
        [longText(5_000, 6)]: longText(200_000, 7),
        many: Array.from({ length: 2_000 }, (_, i) => longText(50, i)),
      },
      extra_unknown_field: longText(100_000, 8),
    };
    // The longest Nats-Msg-Id accepted: 256 characters.
    const msgId = `result:${ascii(249, 9).slice(0, 249).padEnd(249, 'm')}`;
    await publish(JSON.stringify(done), msgId);
    const error = {
      job_id: errJob.jobId,
      status: 'error',
      service: done.service,
      error: { code: longText(200, 10), message: longText(10_000, 11) },
    };
    await publish(JSON.stringify(error), `result:${errJob.jobId}:1`);
    await drained();

    const r = await loadAll(t.db, job.jobId);
    expect(r.job).toMatchObject({
      status: 'needs_check',
      service_name: done.service.name,
      service_version: done.service.version,
      result_schema_version: done.result_schema_version,
      result_msg_id: msgId,
    });
    expect(r.job.metrics).toEqual(done.metrics);
    const obj = await t.db
      .selectFrom('s3_object')
      .selectAll()
      .where('id', '=', r.job.result_s3_object_id!)
      .executeTakeFirstOrThrow();
    expect(obj).toMatchObject({ bucket: s3.bucket, key: s3.key, created_by: done.service.name });
    const e = await loadAll(t.db, errJob.jobId);
    expect(e.job).toMatchObject({
      status: 'error',
      error_code: error.error.code,
      error_message: error.error.message,
    });
  });

  it('strings longer than the schema allows, deep nesting, oversized payloads: quarantined once each with the payload (its first 64 KiB); the job untouched', async () => {
    const job = await insertJob(t.db, { status: 'published' });
    const base = { job_id: job.jobId, status: 'done', service: { name: 'tabular-parser', version: '1' } };
    const cases: Array<[string, string, string]> = [
      [
        'a 100 000-character service name',
        JSON.stringify({ ...base, service: { name: 'n'.repeat(100_000), version: '1' } }),
        'SCHEMA_INVALID',
      ],
      [
        'a 20 000-character error message',
        JSON.stringify({
          job_id: job.jobId,
          status: 'error',
          service: base.service,
          error: { code: 'E', message: "'".repeat(20_000) },
        }),
        'SCHEMA_INVALID',
      ],
      [
        'a 5 000-character key',
        JSON.stringify({ ...base, result_s3: { bucket: 'b', key: 'k'.repeat(5_000) } }),
        'SCHEMA_INVALID',
      ],
      [
        'metrics nested 100 000 levels',
        `{"job_id":"${job.jobId}","status":"done","service":{"name":"a","version":"1"},"metrics":{"x":${'['.repeat(100_000)}${']'.repeat(100_000)}}}`,
        'INVALID_JSON',
      ],
      ['objects nested 65 levels', JSON.stringify({ ...base, metrics: nest(65) }), 'INVALID_JSON'],
      ['one byte over MAX_ENVELOPE_BYTES', padTo({ ...base, metrics: {} }, MAX + 1), 'PAYLOAD_TOO_LARGE'],
    ];
    // Far over MAX_ENVELOPE_BYTES: the results stream's max_msg_size refuses it at publish.
    await expect(publish(padTo({ ...base, metrics: {} }, 3 * MAX), `bad:${randomUUID()}`)).rejects.toThrow(
      /maximum/i,
    );
    const seqs: number[] = [];
    for (const [, payload] of cases)
      seqs.push(
        await publish(payload, `bad:${randomUUID()}`, { 'X-Evil': "'; DROP TABLE inbox_quarantine; --" }),
      );
    await drained();
    for (const [i, [name, payload, reason]] of cases.entries()) {
      const rows = await quarantined(seqs[i]!);
      expect(rows, name).toHaveLength(1);
      expect(rows[0]!.reason, name).toBe(reason);
      // A payload over QUARANTINE_PAYLOAD_MAX_BYTES (64 KiB) is kept as its prefix, with its length.
      const bytes = Buffer.from(enc.encode(payload));
      const kept = bytes.subarray(0, 65_536);
      expect(Buffer.from(rows[0]!.payload).equals(kept), name).toBe(true);
      if (bytes.byteLength > kept.byteLength)
        expect(rows[0]!.details, name).toMatchObject({
          payload_truncated: true,
          payload_bytes: bytes.byteLength,
        });
      expect(rows[0]!.headers['X-Evil'], name).toEqual(["'; DROP TABLE inbox_quarantine; --"]);
    }
    const r = await loadAll(t.db, job.jobId);
    expect(r.job.status).toBe('published');
    expect(r.transitions).toHaveLength(0);
  });

  it('huge JSON just under MAX_ENVELOPE_BYTES, nested to the deepest level allowed: applied, metrics stored verbatim', async () => {
    const job = await insertJob(t.db, { status: 'published' });
    const rows = Array.from({ length: 12_000 }, (_, i) => ({
      row: i,
      cells: [i * 1.5, `c'${i}"\\`, i % 2 === 0],
      note: '表🧾',
    }));
    const metrics: Record<string, unknown> = { rows, deepest: nest(60) };
    let payload = JSON.stringify({
      job_id: job.jobId,
      status: 'done',
      service: { name: 'tabular-parser', version: '1' },
      metrics,
    });
    // Fill up to exactly MAX_ENVELOPE_BYTES with an extra metric.
    const fill = MAX - enc.encode(payload).byteLength - ',"fill":""'.length;
    expect(fill).toBeGreaterThan(0);
    metrics['fill'] = 'f'.repeat(fill);
    payload = JSON.stringify({
      job_id: job.jobId,
      status: 'done',
      service: { name: 'tabular-parser', version: '1' },
      metrics,
    });
    expect(enc.encode(payload).byteLength).toBe(MAX);
    await publish(payload, `result:${job.jobId}:1`);
    await drained();
    const r = await loadAll(t.db, job.jobId);
    expect(r.job.status).toBe('done');
    expect(r.job.metrics).toEqual(metrics);
  });

  it('a key within the schema but over what a btree index entry holds (1 024 four-byte characters): quarantined, never retried forever', async () => {
    // S3 limits keys to 1 024 bytes; the schema counts characters, so such a key passes the
    // schema. The (bucket, key) unique index cannot hold it (over 2 704 bytes): the database
    // refuses the row; the inbox quarantines the message instead of retrying it forever.
    const job = await insertJob(t.db, { status: 'published' });
    const key = Array.from({ length: 1_024 }, (_, i) =>
      String.fromCodePoint(0x1f300 + ((i * 37) % 700)),
    ).join('');
    const seq = await publish(
      JSON.stringify({
        job_id: job.jobId,
        status: 'done',
        service: { name: 'tabular-parser', version: '1' },
        result_s3: { bucket: 'arm-ka', key },
      }),
      `result:${job.jobId}:1`,
    );
    await drained();
    const rows = await quarantined(seq);
    expect(rows).toHaveLength(1);
    expect(rows[0]!.reason).toBe('SCHEMA_INVALID');
    expect((await loadAll(t.db, job.jobId)).job.status).toBe('published');
    // The inbox goes on: the next envelope of that job is applied.
    await send.ack(job);
    await drained();
    expect((await loadAll(t.db, job.jobId)).job.status).toBe('processing');
  });
});

/** `{a:{a:…{}}}` with `levels` objects. */
function nest(levels: number): Record<string, unknown> {
  let v: Record<string, unknown> = {};
  for (let i = 1; i < levels; i++) v = { a: v };
  return v;
}

/** The envelope as JSON, padded with an extra field to exactly `bytes` bytes. */
function padTo(envelope: Record<string, unknown>, bytes: number): string {
  const empty = JSON.stringify({ ...envelope, pad: '' });
  return JSON.stringify({ ...envelope, pad: 'p'.repeat(bytes - Buffer.byteLength(empty)) });
}
