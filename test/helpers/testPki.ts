/**
 * Certificates made at test time with `openssl`: a CA, a server certificate it signs for the
 * names given, a client certificate it signs, and a second CA that signed none of them. Keys are
 * EC P-256, unencrypted, valid for two days. Nothing is kept: the directory goes with the test.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Paths of the PEM files, and `remove()` for the directory holding them. */
export interface TestPki {
  dir: string;
  ca: string;
  server: { cert: string; key: string };
  client: { cert: string; key: string };
  /** A CA that signed nothing here: a client trusting only it must refuse the server. */
  otherCa: string;
  remove(): Promise<void>;
}

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

async function makeCa(dir: string, name: string): Promise<{ cert: string; key: string }> {
  const cert = join(dir, `${name}.crt`);
  const key = join(dir, `${name}.key`);
  await run('openssl', [
    'req',
    '-x509',
    ...EC,
    '-keyout',
    key,
    '-out',
    cert,
    '-days',
    '2',
    '-subj',
    `/CN=${name}`,
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
  ]);
  return { cert, key };
}

async function makeLeaf(
  dir: string,
  name: string,
  ca: { cert: string; key: string },
  subject: string,
  extensions: string,
): Promise<{ cert: string; key: string }> {
  const cert = join(dir, `${name}.crt`);
  const key = join(dir, `${name}.key`);
  const csr = join(dir, `${name}.csr`);
  const ext = join(dir, `${name}.ext`);
  await writeFile(ext, extensions);
  await run('openssl', ['req', '-new', ...EC, '-keyout', key, '-out', csr, '-subj', subject]);
  await run('openssl', [
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    ca.cert,
    '-CAkey',
    ca.key,
    '-CAcreateserial',
    '-out',
    cert,
    '-days',
    '2',
    '-extfile',
    ext,
  ]);
  return { cert, key };
}

/**
 * Make a CA, a server certificate for `serverNames` (subjectAltName entries such as
 * `DNS:localhost`, `IP:127.0.0.1`), a client certificate with common name `clientName`, and
 * another CA.
 */
export async function makeTestPki(opts: { serverNames: string[]; clientName: string }): Promise<TestPki> {
  const dir = await mkdtemp(join(tmpdir(), 'test-pki-'));
  try {
    const ca = await makeCa(dir, 'test-ca');
    const server = await makeLeaf(
      dir,
      'server',
      ca,
      '/CN=recognition-test-server',
      `basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=${opts.serverNames.join(',')}\n`,
    );
    const client = await makeLeaf(
      dir,
      'client',
      ca,
      `/CN=${opts.clientName}`,
      'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n',
    );
    const other = await makeCa(dir, 'other-ca');
    return {
      dir,
      ca: ca.cert,
      server,
      client,
      otherCa: other.cert,
      remove: () => rm(dir, { recursive: true, force: true }),
    };
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}
