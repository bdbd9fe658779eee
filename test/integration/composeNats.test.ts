/**
 * The NATS part of deploy/compose.yaml, run here as compose would run it (no container engine on
 * this machine): the secrets made by deploy/make-secrets.sh, the nats service's own shell command
 * with the secrets' directory and a free port in place of the container's paths and port, the
 * real nats-server. Each side gets in with the password file compose gives it through
 * `NATS_PASSWORD_FILE`; a wrong password does not.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadConfig } from '../../src/config.js';
import { freePort } from '../../workshop/localServers/freePort.js';
import { findNatsServerBinary } from '../../workshop/localServers/natsServer.js';
import { waitFor } from '../helpers/testDaemon.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
let dir: string;
let server: ChildProcess | undefined;
let port: number;
let output = '';

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'compose-nats-'));
  const made = spawnSync('sh', [join(root, 'deploy/make-secrets.sh'), join(dir, 'secrets')], {
    encoding: 'utf8',
  });
  expect(made.status, made.stderr).toBe(0);

  port = await freePort();
  const conf = (await readFile(join(root, 'deploy/nats/recognition.conf'), 'utf8'))
    .replace(/^port: 4222$/m, `port: ${port}`)
    .replace(/^http_port: 8222$/m, `http_port: ${await freePort()}`)
    .replace(/store_dir: \/data/, `store_dir: ${JSON.stringify(join(dir, 'store'))}`);
  await writeFile(join(dir, 'recognition.conf'), conf);

  const compose = parse(await readFile(join(root, 'deploy/compose.yaml'), 'utf8'), { merge: true }) as {
    services: { nats: { command: string[] } };
  };
  const [shell, flag, script] = compose.services.nats.command;
  expect([shell, flag]).toEqual(['sh', '-c']);
  const local = script!
    .replaceAll('$$', '$') // compose's escape of $
    .replaceAll('/run/secrets/', `${dir}/secrets/`)
    .replace('/etc/nats/recognition.conf', join(dir, 'recognition.conf'))
    .replace('exec nats-server', `exec ${findNatsServerBinary()}`);
  server = spawn('sh', ['-c', local], { stdio: ['ignore', 'pipe', 'pipe'] });
  for (const s of [server.stdout!, server.stderr!]) s.on('data', (c: Buffer) => (output += c.toString()));
  await waitFor(
    () => /Server is ready/.test(output) || server!.exitCode !== null,
    'nats-server ready',
    15_000,
  );
  expect(server.exitCode, output).toBeNull();
});

afterAll(async () => {
  if (server && server.exitCode === null) {
    const exited = new Promise((r) => server!.once('exit', r));
    server.kill('SIGTERM');
    await exited;
  }
  await rm(dir, { recursive: true, force: true });
});

/** Connect as the configuration of a compose service would. */
async function connectAs(user: string, passwordFile: string): Promise<void> {
  const cfg = loadConfig({
    NATS_URL: `nats://127.0.0.1:${port}`,
    NATS_USER: user,
    NATS_PASSWORD_FILE: join(dir, 'secrets', passwordFile),
  });
  const nc = await connect({
    servers: cfg.NATS_URL,
    user: cfg.NATS_USER,
    pass: cfg.NATS_PASSWORD,
    timeout: 5_000,
  });
  await nc.flush();
  await nc.close();
}

describe('the compose nats service', () => {
  it('lets the core and the reference service in with their password files', async () => {
    await connectAs('recognition-core', 'nats-core-password');
    await connectAs('tabular-parser', 'nats-service-password');
  });

  it('refuses a wrong password, and the other side’s', async () => {
    await expect(connectAs('recognition-core', 'nats-service-password')).rejects.toThrow(/Authorization/i);
    await expect(connectAs('tabular-parser', 'postgres-password')).rejects.toThrow(/Authorization/i);
  });
});
