/**
 * `loadConfig`: defaults, parsing, one clear error per bad variable; and the documentation that is
 * generated from the same table (configuration) or must name the same things (metrics).
 */
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  CONFIG_VARIABLES,
  configVariableNames,
  FILE_VARIABLES,
  loadConfig,
  redactUrl,
  secretsOf,
} from '../../src/config.js';
import { CONFIG_TABLE_BEGIN, CONFIG_TABLE_END, configTableBlock } from '../../workshop/docs/configTable.js';
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

describe('secrets from files (NAME_FILE)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'config-files-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  let n = 0;
  /** A file holding `content`; its path. */
  const file = (content: string) => {
    const path = join(dir, `secret-${n++}`);
    writeFileSync(path, content, { mode: 0o600 });
    return path;
  };

  it('read every secret-bearing variable from a file, one trailing newline removed', () => {
    const cfg = loadConfig({
      DATABASE_URL_FILE: file('postgres://app:pw-from-file@db:5432/recognition\n'),
      NATS_URL_FILE: file('nats://n1:4222,nats://n2:4222'),
      NATS_USER: 'core',
      NATS_PASSWORD_FILE: file('  spaced pw\n\n'),
    });
    expect(cfg.DATABASE_URL).toBe('postgres://app:pw-from-file@db:5432/recognition');
    expect(cfg.NATS_URL).toBe('nats://n1:4222,nats://n2:4222');
    // Only one newline goes, and nothing else: the value is the file's.
    expect(cfg.NATS_PASSWORD).toBe('  spaced pw\n');
    expect(loadConfig({ NATS_TOKEN_FILE: file('tok-123\r\n') }).NATS_TOKEN).toBe('tok-123');
    expect([...FILE_VARIABLES].sort()).toEqual([
      'DATABASE_LISTEN_URL',
      'DATABASE_URL',
      'NATS_PASSWORD',
      'NATS_TOKEN',
      'NATS_URL',
    ]);
    expect(configVariableNames()).toEqual(expect.arrayContaining(['DATABASE_URL', 'DATABASE_URL_FILE']));
    expect(configVariableNames()).not.toContain('LOG_LEVEL_FILE');
  });

  it('scrubs values read from files like values from the environment', () => {
    const cfg = loadConfig({
      DATABASE_URL_FILE: file('postgres://app:db%2Fsecret@db/x\n'),
      NATS_USER: 'core',
      NATS_PASSWORD_FILE: file('nats-file-secret\n'),
    });
    expect(secretsOf(cfg)).toEqual(expect.arrayContaining(['db%2Fsecret', 'db/secret', 'nats-file-secret']));
  });

  it('refuses a variable and its file both set, naming both', () => {
    const err = configError({ NATS_USER: 'u', NATS_PASSWORD: 'a', NATS_PASSWORD_FILE: file('b') });
    expect(err.message).toBe('NATS_PASSWORD and NATS_PASSWORD_FILE are both set: set one');
  });

  it('an empty NAME_FILE counts as unset, like an empty NAME', () => {
    expect(loadConfig({ DATABASE_URL_FILE: '' }).DATABASE_URL).toBe(CONFIG_VARIABLES.DATABASE_URL[1]);
  });

  it.each([
    [
      'a missing file',
      () => join(dir, 'missing'),
      /^DATABASE_URL_FILE=\S+\/missing cannot be read \(no such file\)$/,
    ],
    ['a directory', () => dir, /^DATABASE_URL_FILE=\S+ cannot be read \(it is a directory\)$/],
    ['an empty file', () => file(''), /^DATABASE_URL_FILE=\S+ is empty$/],
    ['a file of one newline', () => file('\n'), /^DATABASE_URL_FILE=\S+ is empty$/],
  ])('refuses %s with one line naming the variable and the path', (_what, path, problem) => {
    const p = path();
    const err = configError({ DATABASE_URL_FILE: p });
    expect(err.message).toMatch(problem);
    expect(err.message).toContain(p);
    expect(err.message).not.toContain('\n');
  });

  it.skipIf(process.getuid?.() === 0)('refuses a file it may not read', () => {
    const p = file('secret');
    chmodSync(p, 0o000);
    expect(configError({ NATS_TOKEN_FILE: p }).message).toBe(
      `NATS_TOKEN_FILE=${p} cannot be read (permission denied)`,
    );
  });

  it('never shows the content of a file whose value is invalid', () => {
    // A password put where the URL file belongs.
    const err = configError({ DATABASE_URL_FILE: file('hunter2-not-a-url\n') });
    expect(err.message).toMatch(/^DATABASE_URL must be a URL .*\(read from DATABASE_URL_FILE=/);
    expect(err.message).not.toContain('hunter2');
  });
});

describe('PostgreSQL TLS settings', () => {
  const dir = mkdtempSync(join(tmpdir(), 'config-tls-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const ca = join(dir, 'ca.crt');
  const cert = join(dir, 'client.crt');
  const key = join(dir, 'client.key');
  for (const f of [ca, cert, key]) writeFileSync(f, '-----BEGIN CERTIFICATE-----\n');
  const base = 'postgres://app@db:5432/recognition';

  it('accepts the four modes in the URL, and the DATABASE_SSL* variables, written into the URL', () => {
    for (const mode of ['disable', 'require', 'verify-full'])
      expect(loadConfig({ DATABASE_URL: `${base}?sslmode=${mode}` }).DATABASE_URL).toBe(
        `${base}?sslmode=${mode}`,
      );
    expect(
      loadConfig({ DATABASE_URL: `${base}?sslmode=verify-ca&sslrootcert=${ca}` }).DATABASE_URL,
    ).toContain('sslmode=verify-ca');
    const cfg = loadConfig({
      DATABASE_URL: base,
      DATABASE_SSLMODE: 'verify-full',
      DATABASE_SSLROOTCERT: ca,
      DATABASE_SSLCERT: cert,
      DATABASE_SSLKEY: key,
    });
    const params = new URL(cfg.DATABASE_URL).searchParams;
    expect(Object.fromEntries(params)).toEqual({
      sslmode: 'verify-full',
      sslrootcert: ca,
      sslcert: cert,
      sslkey: key,
    });
  });

  it.each([
    [
      { DATABASE_URL: `${base}?sslmode=prefer` },
      /^DATABASE_URL sslmode must be disable, require, verify-ca or verify-full \(got "prefer"\): prefer falls back/,
    ],
    [{ DATABASE_URL: `${base}?sslmode=no-verify` }, /^DATABASE_URL sslmode must be disable, require/],
    [
      { DATABASE_URL: base, DATABASE_SSLMODE: 'allow' },
      /^DATABASE_SSLMODE must be disable, require, verify-ca or verify-full \(got "allow"\)/,
    ],
    [
      { DATABASE_URL: `${base}?sslmode=require`, DATABASE_SSLMODE: 'require' },
      /^DATABASE_SSLMODE and the sslmode parameter of DATABASE_URL are both set/,
    ],
    [
      { DATABASE_URL: `${base}?sslmode=verify-ca` },
      /^DATABASE_URL sslmode verify-ca needs DATABASE_URL sslrootcert/,
    ],
    [
      { DATABASE_URL: base, DATABASE_SSLMODE: 'verify-ca' },
      /^DATABASE_SSLMODE verify-ca needs DATABASE_URL sslrootcert/,
    ],
    [
      { DATABASE_URL: `${base}?sslrootcert=${ca}` },
      /^DATABASE_URL sslrootcert is set without DATABASE_URL sslmode/,
    ],
    [
      { DATABASE_URL: base, DATABASE_SSLROOTCERT: ca },
      /^DATABASE_SSLROOTCERT is set without DATABASE_URL sslmode/,
    ],
    [
      { DATABASE_URL: `${base}?sslmode=require&sslrootcert=system` },
      /sslrootcert system needs DATABASE_URL sslmode verify-full/,
    ],
    [
      { DATABASE_URL: `${base}?sslmode=verify-full`, DATABASE_SSLCERT: cert },
      /^DATABASE_SSLCERT and DATABASE_URL sslkey go together/,
    ],
    [
      { DATABASE_URL: `${base}?ssl=true` },
      /^DATABASE_URL has the ssl parameter, which is pg’s own: use sslmode=verify-full/,
    ],
    [
      { DATABASE_URL: `${base}?sslmode=verify-full`, DATABASE_SSLROOTCERT: join(dir, 'nope.crt') },
      /^DATABASE_SSLROOTCERT \S+nope\.crt cannot be read \(no such file\)$/,
    ],
    [
      { DATABASE_URL: `${base}?sslmode=verify-full&sslrootcert=${dir}` },
      /^DATABASE_URL sslrootcert \S+ cannot be read \(it is a directory\)$/,
    ],
  ])('refuses %j with one line', (env, problem) => {
    const err = configError(env);
    expect(err.message).toMatch(problem);
    expect(err.message).not.toContain('\n');
  });

  it('takes sslrootcert=system with verify-full (Node’s public CAs), and ignores the files under disable', () => {
    expect(() =>
      loadConfig({ DATABASE_URL: `${base}?sslmode=verify-full&sslrootcert=system` }),
    ).not.toThrow();
    expect(() =>
      loadConfig({ DATABASE_URL: `${base}?sslmode=disable&sslrootcert=/nonexistent` }),
    ).not.toThrow();
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

  it.each([
    ['a password holding / and @', 'postgres://u:p/a@ss@host/db', 'postgres://u:[REDACTED]@host/db'],
    ['a password holding ? and #', 'postgres://u:p?a#s@host:5432/db', 'postgres://u:[REDACTED]@host:5432/db'],
    ['an empty user', 'postgres://:pw@host/db', 'postgres://:[REDACTED]@host/db'],
    ['a NATS token', 'nats://s3cr3tT0ken@127.0.0.1:4222', 'nats://[REDACTED]@127.0.0.1:4222'],
    ['a token holding @', 'nats://to@k@en@host:4222', 'nats://[REDACTED]@host:4222'],
    ['a token over TLS', 'tls://t0k%40n@host:4222', 'tls://[REDACTED]@host:4222'],
    ['a token over websocket', 'wss://tok@host/ws', 'wss://[REDACTED]@host/ws'],
    ['a token in any other URL', 'https://ghp_t0ken@example.com/x', 'https://[REDACTED]@example.com/x'],
    ['a user with an empty password (a token to NATS)', 'nats://u:@host', 'nats://u:[REDACTED]@host'],
    [
      'a list of NATS URLs, each with its own userinfo',
      'nats://a:pw1@h1:4222,nats://tok2@h2:4222,nats://h3:4222',
      'nats://a:[REDACTED]@h1:4222,nats://[REDACTED]@h2:4222,nats://h3:4222',
    ],
    [
      'a password parameter',
      'postgres://app@db/x?sslmode=require&password=p%2Fw',
      'postgres://app@db/x?sslmode=require&password=[REDACTED]',
    ],
    [
      'URLs inside a message, quoted and not',
      'connect "postgres://u:p/a@ss@db/x" then nats://tok@n:4222: refused',
      'connect "postgres://u:[REDACTED]@db/x" then nats://[REDACTED]@n:4222: refused',
    ],
  ])('redacts %s', (_, text, redacted) => {
    expect(redactUrl(text)).toBe(redacted);
  });

  it.each([
    ['a PostgreSQL user without a password', 'postgres://app@db:5432/x'],
    ['a URL without userinfo', 'nats://127.0.0.1:4222'],
    ['a stack line through a scoped package', 'at file:///srv/node_modules/@nats-io/nats-core/lib/x.js:1:2'],
    ['an e-mail address', 'mail ops@example.com'],
    ['an @ in the path of a URL', 'https://registry.npmjs.org/@nats-io/jetstream'],
  ])('keeps %s as it is', (_, text) => {
    expect(redactUrl(text)).toBe(text);
  });

  it('shows a refused URL without its secrets', () => {
    const db = configError({ DATABASE_URL: 'mysql://u:p/a@ss@host/db' }).message;
    expect(db).toContain('mysql://u:[REDACTED]@host/db');
    expect(db).not.toContain('p/a@ss');
    const nats = configError({ NATS_URL: 'http://s3cr3tT0ken@host:4222' }).message;
    expect(nats).not.toContain('s3cr3tT0ken');
    expect(configError({ NATS_URL: 'nats://h1:4222,ftp://s3cr3tT0ken@h2' }).message).not.toContain(
      's3cr3tT0ken',
    );
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

  it('lists a token written as the userinfo of a NATS URL', () => {
    const cfg = loadConfig({ NATS_URL: 'nats://h1:4222,nats://t0k%2Fen@h2:4222' });
    expect(secretsOf(cfg).sort()).toEqual(['t0k%2Fen', 't0k/en'].sort());
  });

  it('lists a password given as the password parameter of DATABASE_URL', () => {
    const cfg = loadConfig({ DATABASE_URL: 'postgres://app@db/x?password=param%2Fpw' });
    expect(secretsOf(cfg).sort()).toEqual(['param%2Fpw', 'param/pw'].sort());
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
      RETENTION_MAX_BUSY_PERCENT: 25,
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
