/**
 * `recognition-core start` with a bad configuration, as an operator meets it: the real CLI, a clean
 * environment. Every bad value ends the process with exit code 2 and exactly one line on stderr
 * naming the variable; a database whose migrations are behind is refused with a hint to migrate.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createDatabaseIfMissing, dropDatabase } from '../../src/db/database.js';
import { runCli } from '../helpers/cliProcess.js';
import { freePort } from '../../workshop/localServers/freePort.js';
import { dbUrl } from '../helpers/pgUrls.js';

/** Nothing listens there: if a case got past the configuration, it would fail differently. */
const unreachable = async () => ({
  DATABASE_URL: `postgres://postgres@127.0.0.1:${await freePort()}/nothing`,
  HTTP_PORT: '0',
});

// Each case is its own process: run them side by side.
describe.concurrent(
  'start refuses a bad configuration with exit code 2 and one line naming the variable',
  () => {
    it.for([
      ['DATABASE_URL', 'not a URL', { DATABASE_URL: 'localhost/recognition' }, /must be a URL/],
      [
        'DATABASE_URL',
        'another protocol',
        { DATABASE_URL: 'mysql://127.0.0.1/recognition' },
        /must be a URL \(postgres:/,
      ],
      [
        'DATABASE_URL',
        'missing its database',
        { DATABASE_URL: 'postgres://postgres@127.0.0.1:5432' },
        /must name a database/,
      ],
      ['DATABASE_URL', 'only spaces', { DATABASE_URL: '   ' }, /must be a URL/],
      ['NATS_URL', 'malformed', { NATS_URL: '127.0.0.1:4222' }, /nats:\/\/host:port/],
      ['WATCHDOG_INTERVAL_MS', 'negative', { WATCHDOG_INTERVAL_MS: '-500' }, /must be at least 1/],
      ['REPLY_TIMEOUT_MS', 'not a number', { REPLY_TIMEOUT_MS: 'ten minutes' }, /must be a whole number/],
      ['HTTP_PORT', 'out of range', { HTTP_PORT: '99999' }, /must be at most 65535/],
      ['LOG_LEVEL', 'unknown', { LOG_LEVEL: 'verbose' }, /must be one of/],
      [
        'NATS_PASSWORD',
        'set without its user (NATS_USER missing)',
        { NATS_PASSWORD: 'pw-123' },
        /NATS_USER is not/,
      ],
      [
        'NATS_TLS_CERT',
        'set without its key (NATS_TLS_KEY missing)',
        { NATS_TLS_CERT: '/tmp/cert.pem' },
        /go together/,
      ],
    ] as const)('%s %s', async ([name, _what, env, problem], { expect }) => {
      const r = await runCli(['start'], { ...(await unreachable()), ...env });
      expect(r.code, r.output).toBe(2);
      expect(r.stderr, r.output).toHaveLength(1);
      expect(r.stderr[0]).toMatch(new RegExp(`^recognition-core: ${name} `));
      expect(r.stderr[0]).toMatch(problem);
      expect(r.stdout).toEqual([]);
    });

    it('refuses a secret set both directly and as a file, or a file it cannot read, naming them', async ({
      expect,
    }) => {
      const dir = await mkdtemp(join(tmpdir(), 'config-cli-'));
      try {
        const file = join(dir, 'nats-password');
        await writeFile(file, 'File-Secret-77\n');
        for (const [env, line] of [
          [
            { NATS_USER: 'core', NATS_PASSWORD: 'Env-Secret-77', NATS_PASSWORD_FILE: file },
            'recognition-core: NATS_PASSWORD and NATS_PASSWORD_FILE are both set: set one',
          ],
          [
            { DATABASE_URL_FILE: join(dir, 'missing') },
            `recognition-core: DATABASE_URL_FILE=${join(dir, 'missing')} cannot be read (no such file)`,
          ],
          [
            { DATABASE_URL_FILE: file },
            `recognition-core: DATABASE_URL must be a URL (postgres:// or postgresql://…) (read from DATABASE_URL_FILE=${file})`,
          ],
        ] as const) {
          // The database from the file alone (unreachable() sets DATABASE_URL).
          const { DATABASE_URL, ...base } = await unreachable();
          const r = await runCli(['start'], {
            ...base,
            ...('DATABASE_URL_FILE' in env ? {} : { DATABASE_URL }),
            ...env,
          });
          expect(r.code, r.output).toBe(2);
          expect(r.stderr).toEqual([line]);
          expect(r.output).not.toMatch(/Secret-77/);
        }
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });

    it('does not repeat the password of a bad DATABASE_URL', async ({ expect }) => {
      const r = await runCli(['start'], { DATABASE_URL: 'postgres://app:Very-Secret-42@127.0.0.1:5432' });
      expect(r.code).toBe(2);
      expect(r.stderr).toHaveLength(1);
      expect(r.stderr[0]).toMatch(/DATABASE_URL must name a database/);
      expect(r.output).not.toContain('Very-Secret-42');
    });
  },
);

describe('start checks the database before anything else', () => {
  const emptyDb = dbUrl(`rc_test_${process.pid}_${Date.now()}_empty_${randomUUID().slice(0, 6)}`);
  afterAll(async () => {
    await dropDatabase(emptyDb);
  });

  it('refuses a database whose migrations are pending: exit 2, one line telling to run migrate', async () => {
    await createDatabaseIfMissing(emptyDb);
    const r = await runCli(['start'], {
      DATABASE_URL: emptyDb,
      NATS_URL: `nats://127.0.0.1:${await freePort()}`,
      HTTP_PORT: '0',
    });
    expect(r.code, r.output).toBe(2);
    expect(r.stderr, r.output).toHaveLength(1);
    expect(r.stderr[0]).toMatch(/pending migration/);
    expect(r.stderr[0]).toMatch(/recognition-core migrate/);
  });

  it('ends with one line (exit 1) when PostgreSQL is unreachable', async () => {
    const r = await runCli(['start'], await unreachable());
    expect(r.code, r.output).toBe(1);
    expect(r.stderr, r.output).toHaveLength(1);
    expect(r.stderr[0]).toMatch(/^recognition-core: .*ECONNREFUSED/);
  });
});
