/**
 * The `nats` service of deploy/compose.yaml, run as compose would run it (no container engine on
 * this machine): the secrets made by deploy/make-secrets.sh, the shipped
 * deploy/nats/recognition.conf with a free port, a free monitoring port and a temporary store in
 * place of the container's, and the service's own shell command (which reads the users'
 * passwords from the secrets into the variables the configuration names), with the secrets'
 * directory and that file in place of the container's paths, on the real nats-server. Nothing
 * else of the file is changed.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import {
  createOutputTail,
  createTempDir,
  hasExited,
  spawnServer,
  stopChild,
} from '../../workshop/localServers/childProcesses.js';
import { freePort } from '../../workshop/localServers/freePort.js';
import { findNatsServerBinary } from '../../workshop/localServers/natsServer.js';
import { waitFor } from './testDaemon.js';

const root = fileURLToPath(new URL('../../', import.meta.url));

/** The shipped configuration's path. */
export const SHIPPED_NATS_CONF = join(root, 'deploy/nats/recognition.conf');

export interface ComposeNats {
  /** `nats://127.0.0.1:PORT`. */
  readonly url: string;
  readonly port: number;
  /** deploy/make-secrets.sh's output directory (the files compose mounts at /run/secrets/). */
  readonly secretsDir: string;
  /** The users of the shipped configuration, in its order. */
  readonly users: readonly string[];
  /** The password the server takes for `user`: the secret its variable is read from. */
  password(user: string): string;
  /** The server's output so far. */
  output(): string;
  /** SIGTERM, wait for the exit, remove the directory. */
  stop(): Promise<void>;
}

/** Start the compose `nats` service on this machine; see the file's comment. */
export async function startComposeNats(): Promise<ComposeNats> {
  const dir = await createTempDir('compose-nats-');
  const secretsDir = join(dir.path, 'secrets');
  const made = spawnSync('sh', [join(root, 'deploy/make-secrets.sh'), secretsDir], { encoding: 'utf8' });
  if (made.status !== 0) throw new Error(`make-secrets.sh failed: ${made.stderr}`);

  const port = await freePort();
  const shipped = await readFile(SHIPPED_NATS_CONF, 'utf8');
  const conf = shipped
    .replace(/^port: 4222$/m, `port: ${port}`)
    .replace(/^http_port: 8222$/m, `http_port: ${await freePort()}`)
    .replace(/store_dir: \/data/, `store_dir: ${JSON.stringify(join(dir.path, 'store'))}`);
  if (conf === shipped) throw new Error('deploy/nats/recognition.conf: no port or store to substitute');
  await writeFile(join(dir.path, 'recognition.conf'), conf);

  const compose = parse(await readFile(join(root, 'deploy/compose.yaml'), 'utf8'), { merge: true }) as {
    services: { nats: { command: string[] } };
  };
  const [shell, flag, script] = compose.services.nats.command;
  if (shell !== 'sh' || flag !== '-c' || !script)
    throw new Error(`the compose nats command is not sh -c …: ${compose.services.nats.command.join(' ')}`);
  const local = script
    .replaceAll('$$', '$') // compose's escape of $
    .replaceAll('/run/secrets/', `${secretsDir}/`)
    .replace('/etc/nats/recognition.conf', join(dir.path, 'recognition.conf'))
    .replace('exec nats-server', `exec ${findNatsServerBinary()}`);

  // user → the variable of its password (the configuration) → the secret compose reads it from.
  const secretOf = new Map(
    [...script.matchAll(/(\w+)="\$\$\(cat \/run\/secrets\/([\w-]+)\)"/g)].map((m) => [m[1]!, m[2]!]),
  );
  const passwordVariable = new Map(
    [...shipped.matchAll(/\{ user: "([^"]+)", password: \$(\w+)\b/g)].map((m) => [m[1]!, m[2]!]),
  );

  const output = createOutputTail();
  const child = spawnServer('sh', ['-c', local], { onOutput: output.append });
  const stop = async () => {
    await stopChild(child.proc, 'SIGTERM', 15_000);
    await dir.remove();
  };
  try {
    await waitFor(
      () => /Server is ready/.test(output.text()) || hasExited(child.proc),
      'nats-server ready',
      15_000,
    );
    if (hasExited(child.proc)) throw new Error(`nats-server exited:\n${output.text()}`);
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    secretsDir,
    users: [...passwordVariable.keys()],
    password(user) {
      const variable = passwordVariable.get(user);
      const secret = variable && secretOf.get(variable);
      if (!secret) throw new Error(`no password for ${user} in the shipped configuration and compose`);
      return readFileSync(join(secretsDir, secret), 'utf8').replace(/\n$/, '');
    },
    output: output.text,
    stop,
  };
}
