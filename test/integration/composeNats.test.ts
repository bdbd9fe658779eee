/**
 * The NATS part of deploy/compose.yaml, run here as compose would run it (no container engine on
 * this machine; test/helpers/composeNats.ts): the secrets made by deploy/make-secrets.sh, the nats
 * service's own shell command, the shipped configuration, the real nats-server. Each side gets in
 * with the password file compose gives it through `NATS_PASSWORD_FILE`; a wrong password does not.
 * What each user may do there is in natsPermissions.test.ts.
 */
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { startComposeNats, type ComposeNats } from '../helpers/composeNats.js';

let server: ComposeNats;

beforeAll(async () => {
  server = await startComposeNats();
});

afterAll(async () => {
  await server?.stop();
});

/** Connect as the configuration of a compose service would. */
async function connectAs(user: string, passwordFile: string): Promise<void> {
  const cfg = loadConfig({
    NATS_URL: server.url,
    NATS_USER: user,
    NATS_PASSWORD_FILE: join(server.secretsDir, passwordFile),
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
    expect(server.users).toEqual(['recognition-core', 'tabular-parser']);
    await connectAs('recognition-core', 'nats-core-password');
    await connectAs('tabular-parser', 'nats-service-password');
  });

  it('refuses a wrong password, and the other side’s', async () => {
    await expect(connectAs('recognition-core', 'nats-service-password')).rejects.toThrow(/Authorization/i);
    await expect(connectAs('tabular-parser', 'postgres-password')).rejects.toThrow(/Authorization/i);
  });
});
