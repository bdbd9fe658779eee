/**
 * `loadConfig`: defaults, parsing, one clear error per bad variable; and the documentation that is
 * generated from the same table (configuration) or must name the same things (metrics).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CONFIG_VARIABLES, loadConfig, redactUrl, secretsOf } from '../../src/config.js';
import { CONFIG_TABLE_BEGIN, CONFIG_TABLE_END, configTableBlock } from '../../src/docs/configTable.js';
import { formatSpan, parseSpanMs } from '../../src/duration.js';
import { ConfigError } from '../../src/errors.js';
import { createMetrics } from '../../src/metrics.js';

/** The ConfigError `loadConfig(env)` throws (fails the test when it throws none). */
function configError(env: NodeJS.ProcessEnv): ConfigError {
  try {
    loadConfig(env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error(`loadConfig accepted ${JSON.stringify(env)}`);
}

describe('loadConfig', () => {
  it('gives every variable its documented default when the environment is empty', () => {
    const cfg = loadConfig({});
    expect(cfg).toMatchObject({
      DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/recognition',
      NATS_URL: 'nats://127.0.0.1:4222',
      LOG_LEVEL: 'info',
      WATCHDOG_INTERVAL_MS: 30_000,
      REPLY_TIMEOUT_MS: 600_000,
      MAX_PUBLISH_ATTEMPTS: 5,
      MAX_ENVELOPE_BYTES: 1_048_576,
      HTTP_PORT: 8080,
      NATS_PROVISION: true,
    });
    expect(Object.keys(cfg).sort()).toEqual(Object.keys(CONFIG_VARIABLES).sort());
  });

  it('treats an empty string as unset', () => {
    expect(loadConfig({ LOG_LEVEL: '', WATCHDOG_INTERVAL_MS: '' })).toMatchObject({
      LOG_LEVEL: 'info',
      WATCHDOG_INTERVAL_MS: 30_000,
    });
  });

  it('parses numbers, booleans, URLs and clusters', () => {
    const cfg = loadConfig({
      DATABASE_URL: 'postgresql://app:pw@db.internal:6432/recognition?sslmode=require',
      NATS_URL: 'nats://a:4222, nats://b:4222,tls://c:4222',
      WATCHDOG_INTERVAL_MS: ' 500 ',
      REPLY_TIMEOUT_MS: '3000',
      HTTP_PORT: '0',
      NATS_PROVISION: 'no',
      LOG_LEVEL: 'debug',
    });
    expect(cfg).toMatchObject({
      WATCHDOG_INTERVAL_MS: 500,
      REPLY_TIMEOUT_MS: 3000,
      HTTP_PORT: 0,
      NATS_PROVISION: false,
      LOG_LEVEL: 'debug',
    });
  });

  it.each([
    [{ DATABASE_URL: 'not a url' }, 'DATABASE_URL', /must be a URL/],
    [{ DATABASE_URL: 'mysql://db/recognition' }, 'DATABASE_URL', /must be a URL \(postgres:/],
    [{ DATABASE_URL: 'postgres://127.0.0.1:5432' }, 'DATABASE_URL', /must name a database/],
    [{ DATABASE_URL: 'postgres://127.0.0.1:5432/' }, 'DATABASE_URL', /must name a database/],
    [{ NATS_URL: 'localhost:4222' }, 'NATS_URL', /nats:\/\/host:port/],
    [{ NATS_URL: 'nats://a:4222,http://b' }, 'NATS_URL', /nats:\/\/host:port/],
    [{ WATCHDOG_INTERVAL_MS: '-5' }, 'WATCHDOG_INTERVAL_MS', /at least 1/],
    [{ WATCHDOG_INTERVAL_MS: '0' }, 'WATCHDOG_INTERVAL_MS', /at least 1/],
    [{ REPLY_TIMEOUT_MS: 'abc' }, 'REPLY_TIMEOUT_MS', /whole number/],
    [{ REPLY_TIMEOUT_MS: '1.5' }, 'REPLY_TIMEOUT_MS', /whole number/],
    [{ HTTP_PORT: '70000' }, 'HTTP_PORT', /at most 65535/],
    [{ LOG_LEVEL: 'verbose' }, 'LOG_LEVEL', /must be one of/],
    [{ NATS_PROVISION: 'maybe' }, 'NATS_PROVISION', /true or false/],
    [{ NATS_PASSWORD: 'pw' }, 'NATS_PASSWORD', /NATS_USER is not/],
    [{ NATS_TOKEN: 't', NATS_USER: 'u' }, 'NATS_TOKEN', /exclusive/],
    [{ NATS_TLS_CERT: '/c.pem' }, 'NATS_TLS_CERT', /go together/],
    [
      { PUBLISH_BACKOFF_BASE_MS: '5000', PUBLISH_BACKOFF_MAX_MS: '1000' },
      'PUBLISH_BACKOFF_MAX_MS',
      /at least/,
    ],
  ])('rejects %j with one line naming %s', (env, name, problem) => {
    const err = configError(env);
    expect(err.message.startsWith(name)).toBe(true);
    expect(err.message).toMatch(problem);
    expect(err.message).not.toContain('\n');
  });

  it('never repeats a password of a bad URL in its message', () => {
    const err = configError({ DATABASE_URL: 'postgres://app:hunter2-secret@db:5432' });
    expect(err.message).toMatch(/^DATABASE_URL must name a database/);
    expect(err.message).not.toContain('hunter2-secret');
  });
});

describe('redactUrl and secretsOf', () => {
  it('replaces the password in URLs, wherever they are in a text', () => {
    expect(redactUrl('connect postgres://app:s3cr3t@db:5432/x failed')).toBe(
      'connect postgres://app:[REDACTED]@db:5432/x failed',
    );
    expect(redactUrl('nats://u:p%40ss@n:4222')).toBe('nats://u:[REDACTED]@n:4222');
    expect(redactUrl('no url here')).toBe('no url here');
  });

  it('lists the NATS password, token and the passwords inside the URLs', () => {
    const cfg = loadConfig({
      DATABASE_URL: 'postgres://app:p%40ssw0rd@db/x',
      NATS_USER: 'core',
      NATS_PASSWORD: 'nats-pw-1',
      NATS_URL: 'nats://u:urlpass@n:4222',
    });
    expect(secretsOf(cfg).sort()).toEqual(['nats-pw-1', 'p%40ssw0rd', 'p@ssw0rd', 'urlpass'].sort());
  });
});

describe('documentation', () => {
  const read = (file: string) => [file, readFileSync(file, 'utf8')] as const;
  /** The README and every manual under docs/: together they must name every metric. */
  const docs = ['README.md', ...readdirSync('docs').map((f) => join('docs', f))]
    .filter((f) => f.endsWith('.md') && existsSync(f))
    .map(read);

  it('has the generated configuration table in docs/configuration.md, current (npm run docs:config)', () => {
    const [file, text] = read(join('docs', 'configuration.md'));
    const start = text.indexOf(CONFIG_TABLE_BEGIN);
    expect(start, `${file}: BEGIN marker`).toBeGreaterThanOrEqual(0);
    const end = text.indexOf(CONFIG_TABLE_END, start);
    expect(end, `${file}: END marker`).toBeGreaterThan(start);
    expect(text.slice(start, end + CONFIG_TABLE_END.length), `${file}: run npm run docs:config`).toBe(
      configTableBlock(),
    );
    // One copy only: another copy elsewhere would go stale unchecked.
    expect(docs.filter(([, t]) => t.includes(CONFIG_TABLE_BEGIN)).map(([f]) => f)).toEqual([file]);
  });

  it('names every metric the daemon exports', async () => {
    const text = docs.map(([, t]) => t).join('\n');
    const names = (await createMetrics({}, { defaultMetrics: false }).registry.getMetricsAsJSON()).map(
      (m) => m.name,
    );
    expect(names.length).toBeGreaterThan(5);
    expect(names.filter((n) => !text.includes(`\`${n}\``))).toEqual([]);
    expect(text).toContain('recognition_core_');
  });
});

describe('retention variables', () => {
  const DAY = 86_400_000;

  it('default to 30 days for succeeded jobs and quarantine, 90 for failed jobs, a pass every 10 minutes', () => {
    expect(loadConfig({})).toMatchObject({
      RETENTION_SUCCEEDED: 30 * DAY,
      RETENTION_FAILED: 90 * DAY,
      RETENTION_QUARANTINE: 30 * DAY,
      RETENTION_INTERVAL_MS: 600_000,
      RETENTION_BATCH_SIZE: 1000,
    });
  });

  it('read spans in the command line forms, and 0 as keep forever', () => {
    expect(
      loadConfig({
        RETENTION_SUCCEEDED: '30m',
        RETENTION_FAILED: ' 12h ',
        RETENTION_QUARANTINE: '2w',
        RETENTION_INTERVAL_MS: '0',
      }),
    ).toMatchObject({
      RETENTION_SUCCEEDED: 30 * 60_000,
      RETENTION_FAILED: 12 * 3_600_000,
      RETENTION_QUARANTINE: 14 * DAY,
      RETENTION_INTERVAL_MS: 0,
    });
    expect(loadConfig({ RETENTION_SUCCEEDED: '0', RETENTION_FAILED: '90s' })).toMatchObject({
      RETENTION_SUCCEEDED: 0,
      RETENTION_FAILED: 90_000,
    });
  });

  it.each([
    ['RETENTION_SUCCEEDED', '30'],
    ['RETENTION_SUCCEEDED', '0d'],
    ['RETENTION_FAILED', '1y'],
    ['RETENTION_FAILED', '-5d'],
    ['RETENTION_FAILED', '1.5d'],
    ['RETENTION_QUARANTINE', 'forever'],
    ['RETENTION_QUARANTINE', '99999999999999999999d'],
  ])('rejects %s=%j with one line naming it', (name, value) => {
    const err = configError({ [name]: value });
    expect(err.message).toBe(
      `${name} must be a span (90s, 30m, 12h, 90d, 2w) or 0 to keep forever (got ${JSON.stringify(value)})`,
    );
  });

  it('share their forms with the command line', () => {
    expect(parseSpanMs('90d')).toBe(90 * DAY);
    expect(parseSpanMs('5 minutes')).toBeUndefined();
    expect(formatSpan(90 * DAY)).toBe('90d');
    expect(formatSpan(14 * DAY)).toBe('2w');
    expect(formatSpan(90_000)).toBe('90s');
    expect(formatSpan(1_500)).toBe('1500ms');
  });
});
