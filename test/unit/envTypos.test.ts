/**
 * Misspelt variables (`src/envTypos.ts`): a variable one or two edits from one recognition-core
 * reads is named with the one meant; nothing else is, whatever else the environment holds.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { configVariableNames } from '../../src/config.js';
import { editDistance, envTypoMessage, findEnvTypos, knownVariables } from '../../src/envTypos.js';
import { OTEL_VARIABLES } from '../../src/tracing/env.js';

const known = knownVariables(configVariableNames());
const typosOf = (names: string[]) => findEnvTypos(Object.fromEntries(names.map((n) => [n, 'x'])), known);

describe('editDistance', () => {
  it.each([
    ['DATABASE_URL', 'DATABASE_URL', 0],
    ['DATABSE_URL', 'DATABASE_URL', 1],
    ['DATAABSE_URL', 'DATABASE_URL', 1],
    ['NATS_UESR', 'NATS_USER', 1],
    ['ab', 'ba', 1],
    ['abc', 'ca', 3],
    ['kitten', 'sitting', 3],
    ['', 'abc', 3],
    ['HTTP_PROXY', 'HTTP_PORT', 3],
  ])('%s → %s: %i', (a, b, d) => {
    expect(editDistance(a, b)).toBe(d);
    expect(editDistance(b, a)).toBe(d);
  });

  it('is 0 only for equal strings, symmetric, and at most the longer length', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 12 }), fc.string({ maxLength: 12 }), (a, b) => {
        const d = editDistance(a, b);
        expect(d === 0).toBe(a === b);
        expect(editDistance(b, a)).toBe(d);
        expect(d).toBeLessThanOrEqual(Math.max(a.length, b.length));
        expect(d).toBeGreaterThanOrEqual(Math.abs(a.length - b.length));
      }),
    );
  });

  it('counts a swap of two adjacent characters as one edit', () => {
    fc.assert(
      fc.property(fc.string({ minLength: 2, maxLength: 12 }), fc.nat(), (s, at) => {
        const i = at % (s.length - 1);
        const swapped = s.slice(0, i) + s[i + 1] + s[i] + s.slice(i + 2);
        expect(editDistance(s, swapped)).toBe(s[i] === s[i + 1] ? 0 : 1);
      }),
    );
  });
});

describe('findEnvTypos', () => {
  it.each([
    ['DATABSE_URL', 'DATABASE_URL'],
    ['DATABASE_ULR', 'DATABASE_URL'],
    ['database_url', 'DATABASE_URL'],
    ['NATS_UESR', 'NATS_USER'],
    ['NATS_PASWORD', 'NATS_PASSWORD'],
    ['NATS_PASSWORD_FLIE', 'NATS_PASSWORD_FILE'],
    ['DATABASE_URL_FIEL', 'DATABASE_URL_FILE'],
    ['NATS_TLS_CRT', 'NATS_TLS_CERT'],
    ['LOGLEVEL', 'LOG_LEVEL'],
    ['HTTP_PROT', 'HTTP_PORT'],
    ['REPLY_TIMEOUT', 'REPLY_TIMEOUT_MS'],
    ['shutdown_timeout', 'SHUTDOWN_TIMEOUT_MS'],
    ['INBOX_BATCH_SIZ', 'INBOX_BATCH_SIZE'],
    ['OTEL_EXPORTER_OTLP_ENDPIONT', 'OTEL_EXPORTER_OTLP_ENDPOINT'],
    ['OTEL_SERVCE_NAME', 'OTEL_SERVICE_NAME'],
  ])('names %s with %s', (name, suggestion) => {
    expect(typosOf([name])).toEqual([{ name, suggestion }]);
  });

  it('never names a variable it reads', () => {
    const all = [...configVariableNames(), ...OTEL_VARIABLES];
    expect(typosOf(all)).toEqual([]);
  });

  it('never names the usual variables of a shell, a container, CI, npm or PostgreSQL clients', () => {
    expect(
      typosOf([
        'PATH',
        'HOME',
        'USER',
        'LANG',
        'TERM',
        'SHELL',
        'PWD',
        'HOSTNAME',
        'NODE_ENV',
        'NODE_OPTIONS',
        'NODE_EXTRA_CA_CERTS',
        'TZ',
        'CI',
        'DEBUG',
        'HTTP_PROXY',
        'HTTPS_PROXY',
        'NO_PROXY',
        'PGHOST',
        'PGPORT',
        'PGUSER',
        'PGPASSWORD',
        'PGDATABASE',
        'PGSSLMODE',
        'npm_config_cache',
        'npm_package_version',
        'npm_lifecycle_event',
        'INIT_CWD',
        'KUBERNETES_SERVICE_HOST',
        'KUBERNETES_PORT',
        'NATS_SERVICE_HOST',
        'NATS_SERVICE_PORT',
        'NATS_PORT',
        'NATS_PORT_4222_TCP_ADDR',
        'DB_SERVICE_HOST',
        'DB_PORT',
        'RECOGNITION_CORE_PORT_8080_TCP',
        'NATS_SERVER_BIN',
        'PG_BINDIR',
        'TRACEPARENT',
        'TRACESTATE',
        'TEST_PG_URL',
        'BENCH_PG_URL',
        'XDG_RUNTIME_DIR',
        'SYSTEMD_EXEC_PID',
        'INVOCATION_ID',
        'JOURNAL_STREAM',
      ]),
    ).toEqual([]);
  });

  it('never names the standard OpenTelemetry variables of other signals and settings', () => {
    const signals = ['', 'TRACES_', 'METRICS_', 'LOGS_'];
    const settings = ['ENDPOINT', 'PROTOCOL', 'HEADERS', 'TIMEOUT', 'COMPRESSION', 'INSECURE', 'CERTIFICATE'];
    expect(
      typosOf([
        ...signals.flatMap((s) => settings.map((x) => `OTEL_EXPORTER_OTLP_${s}${x}`)),
        'OTEL_BLRP_SCHEDULE_DELAY',
        'OTEL_BLRP_EXPORT_TIMEOUT',
        'OTEL_BLRP_MAX_QUEUE_SIZE',
        'OTEL_BLRP_MAX_EXPORT_BATCH_SIZE',
        'OTEL_METRICS_EXPORTER',
        'OTEL_LOGS_EXPORTER',
        'OTEL_PROPAGATORS',
        'OTEL_LOG_LEVEL',
        'OTEL_METRIC_EXPORT_INTERVAL',
        'OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT',
        'OTEL_NODE_RESOURCE_DETECTORS',
      ]),
    ).toEqual([]);
  });

  it('names several, sorted by name, each with the closest', () => {
    const typos = typosOf(['NATS_URLS', 'DATABSE_URL', 'PATH']);
    expect(typos).toEqual([
      { name: 'DATABSE_URL', suggestion: 'DATABASE_URL' },
      { name: 'NATS_URLS', suggestion: 'NATS_URL' },
    ]);
    expect(envTypoMessage(typos)).toBe(
      'DATABSE_URL: did you mean DATABASE_URL?; NATS_URLS: did you mean NATS_URL?',
    );
  });
});
