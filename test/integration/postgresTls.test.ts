/**
 * TLS to PostgreSQL with libpq's meaning of `sslmode`, against a real server that accepts TLS
 * connections only and asks for a client certificate: certificates made with openssl at test time
 * (a CA, a server certificate for `localhost` and 127.0.0.1, a client certificate), a private
 * cluster that also listens on 127.0.0.2, a name its certificate does not carry. Each mode connects
 * or refuses as libpq's would; `pg` never prints its own warning; the CLI refuses a wrong host
 * name with one line.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { loadConfig } from '../../src/config.js';
import { openDb, type Db } from '../../src/db/database.js';
import { pgConnection } from '../../src/db/pgTls.js';
import { ConfigError } from '../../src/errors.js';
import type { PgClusterHandle } from '../../workshop/localServers/pgCluster.js';
import { useHarness } from '../helpers/harness.js';
import { runCli } from '../helpers/cliProcess.js';
import { makeTestPki, type TestPki } from '../helpers/testPki.js';

const ROLE = 'rc_tls';
const PASSWORD = 'tls-Pw-5e7b';
const DB = 'tls_test';

const t = useHarness();
let pki: TestPki;
let cluster: PgClusterHandle;
const warnings: Error[] = [];
const onWarning = (w: Error) => warnings.push(w);

beforeAll(async () => {
  process.on('warning', onWarning);
  pki = await makeTestPki({ serverNames: ['DNS:localhost', 'IP:127.0.0.1'], clientName: ROLE });
  cluster = await t.startPgCluster({
    ssl: { cert: pki.server.cert, key: pki.server.key, ca: pki.ca },
    settings: { listen_addresses: '127.0.0.1,127.0.0.2' },
    // TLS only (no hostnossl line: a plain connection matches nothing), a password and a client
    // certificate signed by the CA; in the database cert_test, the certificate alone (its common
    // name is the role's name).
    hba: [
      'hostssl cert_test all 127.0.0.0/8 cert',
      'hostssl all all 127.0.0.0/8 scram-sha-256 clientcert=verify-ca',
    ],
  });
  const admin = new pg.Client(cluster.socket());
  await admin.connect();
  try {
    await admin.query(`CREATE ROLE ${ROLE} LOGIN PASSWORD '${PASSWORD}'`);
    await admin.query(`CREATE DATABASE ${DB} OWNER ${ROLE}`);
    await admin.query(`CREATE DATABASE cert_test OWNER ${ROLE}`);
  } finally {
    await admin.end();
  }
});

afterAll(async () => {
  process.off('warning', onWarning);
  await pki?.remove();
});

/** A URL to the cluster with the TLS parameters given (`ca`, `cert`, `key` name the test files). */
function url(host: string, params: Record<string, string> = {}): string {
  const u = new URL(`postgres://${ROLE}:${PASSWORD}@${host}:${cluster.port}/${DB}`);
  for (const [k, v] of Object.entries(params)) u.searchParams.set(k, v);
  return u.toString();
}
const clientCert = () => ({ sslcert: pki.client.cert, sslkey: pki.client.key });

/** Connect through openDb and ask the server whether this connection is TLS. */
async function connect(connectionUrl: string): Promise<{ ssl: boolean }> {
  const db: Db = openDb(connectionUrl, { max: 1, connectionTimeoutMillis: 5_000 });
  try {
    const { rows } = await db.pool.query<{ ssl: boolean }>(
      'SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()',
    );
    return rows[0]!;
  } finally {
    await db.close();
  }
}

describe('sslmode with libpq’s meaning, against a server that takes TLS only', () => {
  it('verify-full connects when the host name is in the certificate (by name and by address)', async () => {
    for (const host of ['localhost', '127.0.0.1']) {
      expect(
        await connect(url(host, { sslmode: 'verify-full', sslrootcert: pki.ca, ...clientCert() })),
      ).toEqual({
        ssl: true,
      });
    }
  });

  it('verify-full refuses a host name the certificate does not carry', async () => {
    await expect(
      connect(url('127.0.0.2', { sslmode: 'verify-full', sslrootcert: pki.ca, ...clientCert() })),
    ).rejects.toThrow(/127\.0\.0\.2 is not in the cert's list/);
  });

  it('verify-full and verify-ca refuse a server whose certificate another CA signed', async () => {
    for (const sslmode of ['verify-full', 'verify-ca']) {
      await expect(
        connect(url('localhost', { sslmode, sslrootcert: pki.otherCa, ...clientCert() })),
      ).rejects.toThrow(/unable to (verify|get local issuer)|self.signed/i);
    }
  });

  it('verify-ca checks the chain only: the host name may differ', async () => {
    expect(
      await connect(url('127.0.0.2', { sslmode: 'verify-ca', sslrootcert: pki.ca, ...clientCert() })),
    ).toEqual({
      ssl: true,
    });
  });

  it('require encrypts without checking the certificate; with sslrootcert it checks the chain', async () => {
    expect(await connect(url('127.0.0.2', { sslmode: 'require', ...clientCert() }))).toEqual({ ssl: true });
    expect(
      await connect(url('127.0.0.2', { sslmode: 'require', sslrootcert: pki.ca, ...clientCert() })),
    ).toEqual({
      ssl: true,
    });
    await expect(
      connect(url('localhost', { sslmode: 'require', sslrootcert: pki.otherCa, ...clientCert() })),
    ).rejects.toThrow(/unable to (verify|get local issuer)|self.signed/i);
  });

  it('disable (and no sslmode) is plain text, which this server refuses; so is TLS without the client certificate', async () => {
    await expect(connect(url('localhost', { sslmode: 'disable' }))).rejects.toThrow(/no encryption/);
    await expect(connect(url('localhost'))).rejects.toThrow(/no encryption/);
    await expect(connect(url('localhost', { sslmode: 'verify-full', sslrootcert: pki.ca }))).rejects.toThrow(
      /certificate/i,
    );
  });

  it('the client certificate alone logs in where pg_hba.conf says cert', async () => {
    const u = new URL(url('localhost', { sslmode: 'verify-full', sslrootcert: pki.ca, ...clientCert() }));
    u.password = '';
    u.pathname = '/cert_test';
    expect(await connect(u.toString())).toEqual({ ssl: true });
  });

  it('the DATABASE_SSL* variables say the same as the URL parameters', async () => {
    const cfg = loadConfig({
      DATABASE_URL: url('localhost'),
      DATABASE_SSLMODE: 'verify-full',
      DATABASE_SSLROOTCERT: pki.ca,
      DATABASE_SSLCERT: pki.client.cert,
      DATABASE_SSLKEY: pki.client.key,
    });
    expect(await connect(cfg.DATABASE_URL)).toEqual({ ssl: true });
  });

  it('hands pg no sslmode, so pg prints no warning of its own', () => {
    const c = pgConnection(url('localhost', { sslmode: 'require', uselibpqcompat: 'true' }));
    expect(new URL(c.connectionString).search).toBe('');
    expect(c.ssl).toMatchObject({ rejectUnauthorized: false });
    // Every connection above went through require, verify-ca and verify-full.
    expect(warnings.map((w) => w.message)).toEqual([]);
  });

  it('a TLS file that cannot be read is a ConfigError naming the parameter and the path', () => {
    expect(() =>
      pgConnection(url('localhost', { sslmode: 'verify-full', sslrootcert: '/nonexistent/ca.crt' })),
    ).toThrow(new ConfigError('DATABASE_URL sslrootcert /nonexistent/ca.crt cannot be read (no such file)'));
  });
});

describe('the CLI', () => {
  it('start refuses a host name the certificate does not carry with one line, exit 1', async () => {
    const r = await runCli(['start'], {
      DATABASE_URL: url('127.0.0.2', { sslmode: 'verify-full', sslrootcert: pki.ca, ...clientCert() }),
      HTTP_PORT: '0',
    });
    expect(r.code, r.output).toBe(1);
    expect(r.stdout, r.output).toEqual([]);
    expect(r.stderr, r.output).toEqual([
      "recognition-core: PostgreSQL (DATABASE_URL) is not usable: Hostname/IP does not match certificate's altnames: IP: 127.0.0.2 is not in the cert's list: 127.0.0.1",
    ]);
  });

  it('a command refuses it the same way', async () => {
    const r = await runCli(['jobs', 'list', '--status', 'done'], {
      DATABASE_URL: url('127.0.0.2', { sslmode: 'verify-full', sslrootcert: pki.ca, ...clientCert() }),
    });
    expect(r.code, r.output).toBe(1);
    expect(r.stdout, r.output).toEqual([]);
    expect(r.stderr, r.output).toHaveLength(1);
    expect(r.stderr[0]).toMatch(/^recognition-core: .*127\.0\.0\.2 is not in the cert's list/);
    expect(r.stderr[0]).not.toContain(PASSWORD);
  });
});
