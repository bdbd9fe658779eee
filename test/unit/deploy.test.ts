/**
 * The deployment files agree with the code. No image can be built on this machine (no container
 * engine, no registry), so the container recipe and the compose file are checked structurally: the
 * variables they set are configuration variables, the commands are the CLI's, the ports are the
 * defaults, the runtime stage has production dependencies only and runs as a non-root user, and
 * everything the compiled daemon imports at run time is a production dependency. The systemd
 * units go through `systemd-analyze verify`. No secret is in any of the files: the units take them
 * as credentials, compose as secrets, both through `*_FILE` variables; the SQL of the database
 * roles in deploy/postgres/ is the SQL of docs/deployment.md.
 */
import { spawnSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import { cruise, type ICruiseResult } from 'dependency-cruiser';
import extractDepcruiseOptions from 'dependency-cruiser/config-utl/extract-depcruise-options';
import extractTSConfig from 'dependency-cruiser/config-utl/extract-ts-config';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { buildProgram } from '../../src/cli/program.js';
import { registerWorkshopCommands } from '../../workshop/cli/register.js';
import { CONFIG_VARIABLES, configVariableNames, FILE_VARIABLES, redactUrl } from '../../src/config.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const read = (path: string) => readFileSync(join(root, path), 'utf8');
const pkg = JSON.parse(read('package.json')) as {
  bin: Record<string, string>;
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
};
const defaults = Object.fromEntries(Object.entries(CONFIG_VARIABLES).map(([k, v]) => [k, v[1]]));
const configNames = Object.keys(CONFIG_VARIABLES);
const acceptedNames = configVariableNames();
const portOf = (url: string) => Number(new URL(url).port);
/** The package a bare specifier names: `@scope/name` or `name`. */
const packageOf = (specifier: string) =>
  specifier
    .split('/')
    .slice(0, specifier.startsWith('@') ? 2 : 1)
    .join('/');
const shutdownSeconds = Number(defaults.SHUTDOWN_TIMEOUT_MS) / 1000;

/** `Key=value` lines of one section of a systemd unit. */
function unitSection(text: string, section: string): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  let current = '';
  for (const line of text.split('\n')) {
    const header = /^\[(\w+)\]$/.exec(line.trim());
    if (header) current = header[1]!;
    else if (current === section && /^\w+=/.test(line)) {
      const i = line.indexOf('=');
      out.push([line.slice(0, i), line.slice(i + 1)]);
    }
  }
  return out;
}
const unitValue = (text: string, key: string) => unitSection(text, 'Service').find(([k]) => k === key)?.[1];
const unitValues = (text: string, key: string) =>
  unitSection(text, 'Service')
    .filter(([k]) => k === key)
    .map(([, v]) => v);
/** The `NAME=value` assignments of a unit's `Environment=` lines. */
const unitEnvironment = (text: string) =>
  Object.fromEntries(
    unitValues(text, 'Environment').flatMap((v) =>
      [...v.matchAll(/([A-Z_]+)=(\S+)/g)].map((m) => [m[1]!, m[2]!]),
    ),
  );
/** A unit's credentials: name → source path. */
const unitCredentials = (text: string) =>
  Object.fromEntries(unitValues(text, 'LoadCredential').map((v) => v.split(':') as [string, string]));

/** Seconds of a systemd time span such as `45s`, `2min`, `1min 30s`. */
function seconds(span: string): number {
  const units: Record<string, number> = { ms: 0.001, s: 1, sec: 1, m: 60, min: 60, h: 3600 };
  let total = 0;
  for (const m of span.matchAll(/(\d+)\s*([a-z]*)/g)) total += Number(m[1]) * (units[m[2] || 's'] ?? NaN);
  return total;
}

/** The commands of `program` as paths (`start`, `migrate`, `service tabular-parser`, …). */
function commandPaths(program: Command): Set<string> {
  const out = new Set<string>();
  const walk = (c: Command, prefix: string[]) => {
    for (const sub of c.commands) {
      const path = [...prefix, sub.name()];
      out.add(path.join(' '));
      walk(sub, path);
    }
  };
  walk(program, []);
  return out;
}

/** The Dockerfile's stages: name → instructions (continuation lines joined). */
function dockerStages(text: string): Map<string, string[]> {
  const joined = text.replace(/\\\n/g, ' ');
  const stages = new Map<string, string[]>();
  let current: string[] | undefined;
  for (const raw of joined.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const from = /^FROM\s+\S+(?:\s+AS\s+(\S+))?/i.exec(line);
    if (from) {
      current = [];
      stages.set(from[1] ?? `stage${stages.size}`, current);
    }
    current?.push(line);
  }
  return stages;
}

const unit = read('deploy/recognition-core.service');
const migrateUnit = read('deploy/recognition-core-migrate.service');
const envExample = read('deploy/recognition-core.env.example');
const compose = parse(read('deploy/compose.yaml'), { merge: true }) as {
  services: Record<
    string,
    {
      image?: string;
      command?: string[];
      entrypoint?: string[];
      build?: { context: string; dockerfile: string; target?: string };
      user?: string;
      init?: boolean;
      environment?: Record<string, string>;
      secrets?: string[];
      volumes?: string[];
      ports?: string[];
      stop_grace_period?: string;
      depends_on?: Record<string, { condition: string }>;
    }
  >;
  secrets: Record<string, { file: string }>;
};
const natsConf = read('deploy/nats/recognition.conf');
/** What deploy/make-secrets.sh writes: file name → content (one trailing newline removed). */
const secretFiles = (() => {
  const dir = mkdtempSync(join(tmpdir(), 'compose-secrets-'));
  try {
    const r = spawnSync('sh', [join(root, 'deploy/make-secrets.sh'), join(dir, 'secrets')], {
      encoding: 'utf8',
    });
    if (r.status !== 0) throw new Error(`make-secrets.sh failed: ${r.stderr}`);
    return new Map(
      readdirSync(join(dir, 'secrets')).map((f) => [
        f,
        readFileSync(join(dir, 'secrets', f), 'utf8').replace(/\n$/, ''),
      ]),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
})();
const dockerfile = read('deploy/Dockerfile');
const stages = dockerStages(dockerfile);
const runtime = [...stages.values()].at(-1)!;
const ours = ['migrate', 'core', 'tabular-parser'] as const;

describe('environment names', () => {
  it('are all configuration variables, in the unit, the example file and the compose file', () => {
    const used = new Set<string>();
    for (const [k, v] of [...unitSection(unit, 'Service'), ...unitSection(migrateUnit, 'Service')])
      if (k === 'Environment') for (const m of v.matchAll(/([A-Z_]+)=/g)) used.add(m[1]!);
    for (const m of envExample.matchAll(/^#?\s*([A-Z][A-Z0-9_]*)=/gm)) used.add(m[1]!);
    for (const s of ours) for (const k of Object.keys(compose.services[s]!.environment ?? {})) used.add(k);
    expect(used.size).toBeGreaterThan(5);
    expect([...used].filter((n) => !acceptedNames.includes(n))).toEqual([]);
  });

  it('the example file lists every variable, commented ones at their default', () => {
    const lines = [...envExample.matchAll(/^(#\s*)?([A-Z][A-Z0-9_]*)=(.*)$/gm)];
    expect(lines.map((m) => m[2]).sort()).toEqual([...configNames].sort());
    for (const m of lines.filter((x) => x[1])) expect(m[3], m[2]).toBe(defaults[m[2]!]);
  });

  it('both units read the same environment file', () => {
    expect(unitValue(unit, 'EnvironmentFile')).toBe('/etc/recognition-core/recognition-core.env');
    expect(unitValue(migrateUnit, 'EnvironmentFile')).toBe(unitValue(unit, 'EnvironmentFile'));
  });
});

describe('commands', () => {
  /** The product's commands: those of the image. */
  const commands = commandPaths(buildProgram());
  /** The workshop's: those of a development checkout only. */
  const workshopCommands = (() => {
    const program = new Command('recognition-core');
    registerWorkshopCommands(program);
    return commandPaths(program);
  })();
  const bin = pkg.bin['recognition-core']!;

  it("the launcher names exactly the workshop's commands, none of them the product's", () => {
    // bin/recognition-core.js composes the product's program with the workshop's commands where
    // the checkout has them, and names those commands where an installation has not.
    const named = /const WORKSHOP_COMMANDS = \[([^\]]*)\]/.exec(read(bin))?.[1];
    expect(named).toBeDefined();
    const listed = [...named!.matchAll(/'([^']+)'/g)].map((m) => m[1]!);
    const workshop = new Command('recognition-core');
    registerWorkshopCommands(workshop);
    expect(listed.sort()).toEqual(workshop.commands.map((c) => c.name()).sort());
    const product = buildProgram().commands.map((c) => c.name());
    expect(listed.filter((c) => product.includes(c))).toEqual([]);
  });

  it('the units run the bin of package.json: start, and migrate as a one-shot', () => {
    expect(unitValue(unit, 'ExecStart')).toBe(`/usr/bin/node /opt/recognition-core/${bin} start`);
    expect(unitValue(migrateUnit, 'ExecStart')).toBe(`/usr/bin/node /opt/recognition-core/${bin} migrate`);
    expect(unitValue(migrateUnit, 'Type')).toBe('oneshot');
    expect(unitSection(unit, 'Unit')).toContainEqual([
      'Wants',
      expect.stringContaining('recognition-core-migrate.service'),
    ]);
    expect(unitSection(unit, 'Unit')).toContainEqual([
      'After',
      expect.stringContaining('recognition-core-migrate.service'),
    ]);
  });

  it('the image runs the bin under tini with start as the default command', () => {
    const entrypoint = runtime.find((l) => l.startsWith('ENTRYPOINT'))!;
    expect(JSON.parse(entrypoint.replace(/^ENTRYPOINT\s+/, ''))).toEqual([
      '/usr/bin/tini',
      '--',
      'node',
      `/app/${bin}`,
    ]);
    expect(runtime).toContain('CMD ["start"]');
    expect(runtime).toContain('COPY bin ./bin');
  });

  it('compose runs migrate once, then the core, then the reference service, all CLI commands', () => {
    expect(compose.services.migrate!.command).toEqual(['migrate']);
    expect(compose.services.core!.command).toEqual(['start']);
    expect(compose.services['tabular-parser']!.command).toEqual(['service', 'tabular-parser']);
    for (const s of ['migrate', 'core'])
      expect(commands, s).toContain(compose.services[s]!.command!.join(' '));
    expect(workshopCommands).toContain(compose.services['tabular-parser']!.command!.join(' '));
    expect(commands).toContain('start');
    expect(commands).toContain('migrate');
    expect(compose.services.core!.depends_on).toMatchObject({
      migrate: { condition: 'service_completed_successfully' },
      'runtime-grants': { condition: 'service_completed_successfully' },
      nats: { condition: 'service_healthy' },
    });
    expect(compose.services['runtime-grants']!.depends_on).toMatchObject({
      migrate: { condition: 'service_completed_successfully' },
    });
    expect(compose.services.migrate!.depends_on).toMatchObject({
      postgres: { condition: 'service_healthy' },
    });
  });
  it('compose runs the reference service, a workshop command, from the build stage: the compiled checkout', () => {
    const service = compose.services['tabular-parser']!;
    expect(service.build).toEqual({ context: '..', dockerfile: 'deploy/Dockerfile', target: 'build' });
    expect(stages.get('build')).toContain('WORKDIR /src');
    expect(service.entrypoint).toEqual(['node', `/src/${bin}`]);
    expect(service.image).not.toBe(compose.services.core!.image);
    expect(service.user?.split(':')[0]).not.toMatch(/^(root|0)$/);
    expect(service.init).toBe(true);
    for (const s of ['migrate', 'core']) expect(compose.services[s]!.build?.target, s).toBeUndefined();
  });
});

describe('ports', () => {
  const env = compose.services.core!.environment!;

  it('HTTP: the image exposes HTTP_PORT’s default and compose publishes it', () => {
    expect(runtime).toContain(`EXPOSE ${defaults.HTTP_PORT}`);
    expect(env.HTTP_PORT).toBe(defaults.HTTP_PORT);
    expect(compose.services.core!.ports).toEqual([`127.0.0.1:${defaults.HTTP_PORT}:${defaults.HTTP_PORT}`]);
    expect(read('monitoring/prometheus.example.yml')).toContain(`core:${defaults.HTTP_PORT}`);
  });

  it('PostgreSQL and NATS: the URLs point at the compose services on the default ports', () => {
    for (const name of ['database-url-migrator', 'database-url-runtime']) {
      const db = new URL(secretFiles.get(name)!);
      expect(db.hostname, name).toBe('postgres');
      expect(portOf(db.toString()), name).toBe(portOf(defaults.DATABASE_URL!));
      expect(compose.services.postgres!.ports).toEqual([`127.0.0.1:${db.port}:5432`]);
    }
    expect(new URL(env.NATS_URL!).hostname).toBe('nats');
    const natsPort = portOf(defaults.NATS_URL!);
    expect(portOf(env.NATS_URL!)).toBe(natsPort);
    expect(natsConf).toMatch(new RegExp(`^port: ${natsPort}$`, 'm'));
    expect(natsConf).toMatch(/^jetstream \{\n {2}store_dir: \/data\n\}$/m);
    expect(compose.services.nats!.command!.join(' ')).toContain('--config /etc/nats/recognition.conf');
    expect(compose.services.nats!.volumes).toContain('./nats/recognition.conf:/etc/nats/recognition.conf:ro');
    expect(compose.services.nats!.ports).toEqual([`127.0.0.1:${natsPort}:${natsPort}`]);
    expect(portOf(/^NATS_URL=(.*)$/m.exec(envExample)![1]!)).toBe(natsPort);
  });
});

describe('secrets', () => {
  /** The services' own variables (not the images' of PostgreSQL and NATS). */
  const ourEnv = ours.map((s) => [s, compose.services[s]!.environment ?? {}] as const);

  it('compose: every secret comes from a secret file through a *_FILE variable, none is in the file', () => {
    const declared = Object.keys(compose.secrets);
    for (const [name, { file }] of Object.entries(compose.secrets)) expect(file).toBe(`./secrets/${name}`);
    // make-secrets.sh makes exactly the files compose names.
    expect([...secretFiles.keys()].sort()).toEqual([...declared].sort());
    for (const [service, env] of ourEnv) {
      for (const [k, v] of Object.entries(env)) {
        expect(/PASSWORD|TOKEN/.test(k) && !k.endsWith('_FILE'), `${service} ${k}`).toBe(false);
        expect(redactUrl(v), `${service} ${k}`).toBe(v);
        if (k.endsWith('_FILE')) {
          expect(FILE_VARIABLES.has(k.replace(/_FILE$/, '') as never), `${service} ${k}`).toBe(true);
          const secret = /^\/run\/secrets\/([\w-]+)$/.exec(v)?.[1];
          expect(secret, `${service} ${k}=${v}`).toBeDefined();
          expect(compose.services[service]!.secrets, `${service} mounts ${secret}`).toContain(secret);
        }
      }
    }
    expect(compose.services.migrate!.environment!.DATABASE_URL_FILE).toBe(
      '/run/secrets/database-url-migrator',
    );
    expect(compose.services.core!.environment!.DATABASE_URL_FILE).toBe('/run/secrets/database-url-runtime');
    expect(compose.services.core!.secrets).not.toContain('database-url-migrator');
    expect(compose.services.core!.environment!.NATS_PASSWORD_FILE).toBe('/run/secrets/nats-core-password');
    expect(compose.services['tabular-parser']!.environment!.NATS_PASSWORD_FILE).toBe(
      '/run/secrets/nats-service-password',
    );
    expect(compose.services.postgres!.environment).toEqual({
      POSTGRES_PASSWORD_FILE: '/run/secrets/postgres-password',
    });
  });

  it('compose: the URLs carry the role passwords of the secrets, and each role has its own', () => {
    const migrator = new URL(secretFiles.get('database-url-migrator')!);
    const runtime = new URL(secretFiles.get('database-url-runtime')!);
    expect([migrator.username, runtime.username]).toEqual(['recognition_migrator', 'recognition_runtime']);
    expect(decodeURIComponent(migrator.password)).toBe(secretFiles.get('migrator-password'));
    expect(decodeURIComponent(runtime.password)).toBe(secretFiles.get('runtime-password'));
    const passwords = [...secretFiles].filter(([k]) => k.endsWith('-password')).map(([, v]) => v);
    expect(new Set(passwords).size).toBe(passwords.length);
    for (const p of passwords) expect(p).toMatch(/^[A-Za-z][A-Za-z0-9]{31}$/);
  });

  it('make-secrets.sh: every password starts with a letter, which nats-server reads as a string', () => {
    // nats-server parses a referenced variable's value as a configuration value: one starting with
    // a digit is read as a number and the server refuses its configuration. A digit comes first
    // in one random password of six; thirty runs make 150 passwords.
    const dir = mkdtempSync(join(tmpdir(), 'compose-secrets-many-'));
    try {
      for (let i = 0; i < 30; i++) {
        const out = join(dir, String(i));
        const r = spawnSync('sh', [join(root, 'deploy/make-secrets.sh'), out], { encoding: 'utf8' });
        expect(r.status, r.stderr).toBe(0);
        for (const f of readdirSync(out).filter((n) => n.endsWith('-password'))) {
          expect(readFileSync(join(out, f), 'utf8'), f).toMatch(/^[A-Za-z][A-Za-z0-9]{31}\n$/);
        }
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    // Thirty runs of the script take seconds alone, and longer beside the integration tests.
  }, 30_000);

  it('compose: PostgreSQL is set up with roles.sql once, and narrowed after each migrate', () => {
    const postgres = compose.services.postgres!;
    expect(postgres.volumes).toContain('./postgres/roles.sql:/etc/recognition-core/roles.sql:ro');
    expect(postgres.volumes).toContain(
      './postgres/init-roles.sh:/docker-entrypoint-initdb.d/10-recognition-roles.sh:ro',
    );
    const init = read('deploy/postgres/init-roles.sh');
    expect(init).toContain('-f /etc/recognition-core/roles.sql');
    // The script passes every variable roles.sql uses, from a secret mounted on the service.
    const used = [...read('deploy/postgres/roles.sql').matchAll(/:'(\w+)'/g)].map((m) => m[1]!);
    expect(used.sort()).toEqual(['migrator_password', 'runtime_password']);
    for (const v of used) {
      const secret = new RegExp(`-v ${v}="\\$\\(cat /run/secrets/([\\w-]+)\\)"`).exec(init)?.[1];
      expect(secret, v).toBeDefined();
      expect(postgres.secrets).toContain(secret);
    }
    const grants = compose.services['runtime-grants']!;
    expect(grants.volumes).toEqual([
      './postgres/narrow-runtime.sql:/etc/recognition-core/narrow-runtime.sql:ro',
    ]);
    expect(grants.entrypoint!.join(' ')).toMatch(
      /-U recognition_migrator -d recognition\s+-f \/etc\/recognition-core\/narrow-runtime\.sql/,
    );
    expect(grants.entrypoint!.join(' ')).toContain('/run/secrets/migrator-password');
    expect(grants.secrets).toEqual(['migrator-password']);
  });

  it('compose: NATS takes its users’ passwords from the secrets the services read', () => {
    const command = compose.services.nats!.command!.join(' ');
    const users = [...natsConf.matchAll(/\{ user: "([^"]+)", password: \$(\w+)\b/g)].map((m) => [
      m[1]!,
      m[2]!,
    ]);
    expect(users).toEqual([
      [compose.services.core!.environment!.NATS_USER, 'NATS_CORE_PASSWORD'],
      [compose.services['tabular-parser']!.environment!.NATS_USER, 'NATS_SERVICE_PASSWORD'],
    ]);
    for (const [variable, secret] of [
      ['NATS_CORE_PASSWORD', 'nats-core-password'],
      ['NATS_SERVICE_PASSWORD', 'nats-service-password'],
    ]) {
      expect(command).toContain(`${variable}="$$(cat /run/secrets/${secret})"`);
      expect(compose.services.nats!.secrets).toContain(secret);
    }
    expect(compose.services.core!.environment!.NATS_PASSWORD_FILE).toBe('/run/secrets/nats-core-password');
    expect(compose.services['tabular-parser']!.environment!.NATS_PASSWORD_FILE).toBe(
      '/run/secrets/nats-service-password',
    );
  });

  it('docs/nats-permissions.md shows the authorization block of deploy/nats/recognition.conf as it is', () => {
    const block = natsConf.slice(natsConf.indexOf('authorization {'));
    expect(block).toMatch(/^authorization \{\n[\s\S]*\n\}\n$/);
    expect(read('docs/nats-permissions.md')).toContain(`\`\`\`conf\n${block}\`\`\``);
    // Every user's publish permissions deny JetStream's events (docs/nats-permissions.md).
    const entries = block.split(/\n(?= {4}\{ user: )/).slice(1);
    expect(entries).toHaveLength(2);
    for (const entry of entries) expect(entry).toMatch(/publish: \{[\s\S]*deny: \[ "\$JS\.EVENT\.>" \]/);
  });

  it('systemd: the units read secrets from credentials, the migration role’s only in the migrate unit', () => {
    for (const [text, credential] of [
      [unit, '/etc/recognition-core/credentials/database-url'],
      [migrateUnit, '/etc/recognition-core/credentials/database-url-migrate'],
    ] as const) {
      const env = unitEnvironment(text);
      const credentials = unitCredentials(text);
      expect(env.DATABASE_URL_FILE).toBe('%d/database-url');
      expect(credentials['database-url']).toBe(credential);
      // Every *_FILE variable names a credential of the unit; no secret variable is set directly.
      for (const [k, v] of Object.entries(env)) {
        expect(
          k.endsWith('_FILE')
            ? FILE_VARIABLES.has(k.replace(/_FILE$/, '') as never)
            : !FILE_VARIABLES.has(k as never),
          k,
        ).toBe(true);
        if (k.endsWith('_FILE')) expect(Object.keys(credentials), k).toContain(/^%d\/(.+)$/.exec(v)?.[1]);
      }
    }
    expect(unitEnvironment(unit).NATS_PASSWORD_FILE).toBe('%d/nats-password');
    expect(Object.values(unitCredentials(unit))).not.toContain(
      '/etc/recognition-core/credentials/database-url-migrate',
    );
  });

  it('the example environment file sets no secret', () => {
    for (const name of FILE_VARIABLES) {
      if (name === 'NATS_URL') continue; // set, without credentials
      expect(envExample, name).not.toMatch(new RegExp(`^${name}=`, 'm'));
    }
    for (const m of envExample.matchAll(/^[A-Z_]+=(.*)$/gm)) expect(redactUrl(m[1]!)).toBe(m[1]);
  });

  it('docs/deployment.md shows the SQL of deploy/postgres/ as it is', () => {
    const docs = read('docs/deployment.md');
    for (const f of ['roles.sql', 'narrow-runtime.sql'])
      expect(docs, f).toContain(`\`\`\`sql\n${read(`deploy/postgres/${f}`)}\`\`\``);
  });
});

describe('container recipe', () => {
  it('builds in a stage with every dependency, and runs a stage with production dependencies only', () => {
    expect([...stages.keys()]).toEqual(['build', 'runtime']);
    const build = stages.get('build')!;
    expect(build).toContain('RUN npm ci --no-audit --no-fund');
    expect(build).toContain('RUN npm run build');
    expect(runtime.some((l) => /^RUN npm ci --omit=dev\b/.test(l))).toBe(true);
    expect(runtime.filter((l) => /^RUN npm (ci|install)\b/.test(l) && !l.includes('--omit=dev'))).toEqual([]);
    // Nothing of the build stage but the compiled tree: its node_modules holds the devDependencies.
    const fromBuild = runtime.filter((l) => l.includes('--from=build'));
    expect(fromBuild.length).toBeGreaterThan(0);
    for (const l of fromBuild) expect(l).toMatch(/^COPY --from=build \/src\/dist\/\S+ \.\/dist\/\S+$/);
  });

  it('carries the product only: the compiled src, machines and schemas, nothing of the workshop, the bench or the tests', () => {
    const fromBuild = runtime
      .filter((l) => l.includes('--from=build'))
      .map((l) => /\/src\/(dist\/\S+)/.exec(l)![1]);
    expect(fromBuild.sort()).toEqual(['dist/machines', 'dist/schemas', 'dist/src']);
    for (const l of runtime.filter((x) => /^(COPY|ADD)\b/.test(x)))
      expect(l).not.toMatch(/\b(dist\/)?(workshop|bench|test)\b/);
  });

  it('runs as a non-root user', () => {
    const user = runtime.filter((l) => l.startsWith('USER ')).at(-1);
    expect(user).toBeDefined();
    expect(user!.replace('USER ', '').split(':')[0]).not.toMatch(/^(root|0)$/);
  });

  it('copies what the build emits for the daemon (the compiled src, machines and schemas)', () => {
    const tsconfig = JSON.parse(read('tsconfig.build.json')) as { include: string[] };
    for (const l of runtime.filter((x) => x.includes('--from=build'))) {
      const dir = /\/src\/dist\/(\S+)/.exec(l)![1]!;
      expect(
        tsconfig.include.some((i) => i === dir || i.startsWith(`${dir}/`)),
        dir,
      ).toBe(true);
    }
  });

  it(
    'installs what the product imports at run time: its packages are the production dependencies',
    { timeout: 60_000 },
    async () => {
      // The product: src/, machines/ and the launcher (which loads the workshop only where it is),
      // its imports as dependency-cruiser reads them with the repository's configuration.
      const options = await extractDepcruiseOptions(join(root, '.dependency-cruiser.mjs'));
      const { output } = await cruise(
        ['src', 'machines', 'bin'],
        { ...options, baseDir: root, includeOnly: '^(src|machines|schemas|bin|node_modules)/' },
        {},
        { tsConfig: extractTSConfig(join(root, 'tsconfig.json')) },
      );
      const result = (typeof output === 'string' ? JSON.parse(output) : output) as ICruiseResult;
      const product = result.modules.filter((m) => /^(src|machines|bin)\//.test(m.source));
      const used = new Set<string>();
      const wrong: string[] = [];
      for (const m of product) {
        for (const d of m.dependencies) {
          if (d.coreModule || d.dependencyTypes.includes('local')) continue;
          const name = packageOf(d.module);
          // A type-only import is gone from the compiled code: a devDependency is enough for it.
          if (d.preCompilationOnly) {
            if (!(name in pkg.dependencies) && !(name in pkg.devDependencies))
              wrong.push(`${m.source}: ${d.module}`);
            continue;
          }
          used.add(name);
          if (!(name in pkg.dependencies)) wrong.push(`${m.source}: ${d.module}`);
        }
        // pino loads a transport by its package name, in a worker thread.
        for (const t of read(m.source).matchAll(/transport:\s*\{\s*target:\s*'([^']+)'/g))
          used.add(packageOf(t[1]!));
      }
      expect(product.length).toBeGreaterThan(20);
      expect(wrong).toEqual([]);
      // Nothing in the image is there for the workshop (the demo, the reference service), the tests
      // or the bench only.
      expect(Object.keys(pkg.dependencies).filter((d) => !used.has(d))).toEqual([]);
    },
  );

  it('keeps the build context small (.dockerignore), and the secrets of compose out of it', () => {
    const ignored = read('.dockerignore').split('\n');
    for (const p of ['node_modules', 'dist', '.git', 'deploy/secrets']) expect(ignored).toContain(p);
  });
});

describe('systemd unit', () => {
  it('restarts on failure but not on a configuration error, as a non-root user', () => {
    expect(unitValue(unit, 'Restart')).toBe('on-failure');
    expect(unitValue(unit, 'RestartPreventExitStatus')).toBe('2');
    expect(unitValue(unit, 'User')).toBe('recognition-core');
    expect(unitValue(migrateUnit, 'User')).toBe('recognition-core');
    expect(unitValue(unit, 'NoNewPrivileges')).toBe('yes');
    expect(unitValue(unit, 'ProtectSystem')).toBe('strict');
  });

  it('waits longer than the graceful shutdown before killing (unit and compose)', () => {
    expect(unitValue(unit, 'KillSignal')).toBe('SIGTERM');
    expect(seconds(unitValue(unit, 'TimeoutStopSec')!)).toBeGreaterThan(shutdownSeconds);
    for (const s of ['core', 'tabular-parser'])
      expect(seconds(compose.services[s]!.stop_grace_period!), s).toBeGreaterThan(shutdownSeconds);
  });

  it('passes `systemd-analyze verify` without a warning', () => {
    // verify requires ExecStart's binary to exist: the copies point at this Node when /usr/bin/node
    // is missing (a machine with Node elsewhere); the units are otherwise verified as written.
    const dir = mkdtempSync(join(tmpdir(), 'units-'));
    try {
      const names = ['recognition-core.service', 'recognition-core-migrate.service'];
      for (const n of names) {
        copyFileSync(join(root, 'deploy', n), join(dir, n));
        if (!existsSync('/usr/bin/node')) {
          const text = readFileSync(join(dir, n), 'utf8').replaceAll(
            '/usr/bin/node ',
            `${process.execPath} `,
          );
          writeFileSync(join(dir, n), text);
        }
      }
      const r = spawnSync('systemd-analyze', ['verify', ...names.map((n) => join(dir, n))], {
        encoding: 'utf8',
      });
      if (r.error)
        throw new Error(
          `systemd-analyze: ${r.error.message} (bash scripts/ensure-prometheus.sh installs it)`,
        );
      expect(`${r.stdout}${r.stderr}`).toBe('');
      expect(r.status).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
