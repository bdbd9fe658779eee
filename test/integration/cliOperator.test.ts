/**
 * The `recognition-core` command as an operator meets it (the built CLI, a clean environment, a
 * real database): misspelt variables are named, a closed output pipe ends a command quietly,
 * `quarantine replay` says what stayed quarantined, `--version`, `migrate --status`, and a
 * database migrated by a newer version.
 */
import { describe, expect, it } from 'vitest';
import { runCli, spawnCli } from '../helpers/cliProcess.js';
import { useTestDatabase } from '../helpers/withDatabase.js';

const t = useTestDatabase();

/** A port nothing listens on: commands that need NATS fail after their start-up lines. */
const NO_NATS = 'nats://127.0.0.1:1';

describe('misspelt variables', () => {
  it('a one-shot command names them in one line on stderr and runs on', async () => {
    const r = await runCli(['jobs', 'list', '--json'], { DATABASE_URL: t.url, DATABSE_URL: t.url });
    expect(r.code, r.output).toBe(0);
    expect(r.stderr).toEqual(['recognition-core: DATABSE_URL: did you mean DATABASE_URL?']);
  });

  it('migrate names them before it touches the database', async () => {
    const r = await runCli(['migrate'], { DATABASE_URL: t.url, NATS_PASWORD: 'x', LOG_LEVL: 'debug' });
    expect(r.code, r.output).toBe(0);
    expect(r.stderr).toEqual([
      'recognition-core: LOG_LEVL: did you mean LOG_LEVEL?; NATS_PASWORD: did you mean NATS_PASSWORD?',
    ]);
    expect(r.stdout).toEqual(['migrations are up to date']);
  });

  it('start names them in a warn log line, its first line', async () => {
    const cli = spawnCli(['start'], {
      DATABASE_URL: t.url,
      NATS_URL: NO_NATS,
      HTTP_PORT: '0',
      WATCHDOG_INTERVAL: '1000',
    });
    try {
      const line = await cli.waitForLog((l) => l['event'] === 'env_typos');
      expect(line).toMatchObject({
        level: 'warn',
        variables: ['WATCHDOG_INTERVAL'],
        msg: 'WATCHDOG_INTERVAL: did you mean WATCHDOG_INTERVAL_MS?',
      });
      expect(cli.logs()[0]).toEqual(line);
      expect(cli.lines.filter((l) => l.stream === 'stderr' && l.text.includes('did you mean'))).toEqual([]);
    } finally {
      cli.child.kill('SIGKILL');
      await cli.exited;
    }
  });

  it('start names them on stderr when the configuration is refused', async () => {
    const r = await runCli(['start'], { NATS_USR: 'core', NATS_PASSWORD: 'pw' });
    expect(r.code).toBe(2);
    expect(r.stderr).toEqual([
      'recognition-core: NATS_USR: did you mean NATS_USER?',
      'recognition-core: NATS_PASSWORD is set but NATS_USER is not',
    ]);
  });

  it('commands that read no configuration say nothing of them', async () => {
    const r = await runCli(['jobs', 'list', '--help'], { DATABSE_URL: 'x' });
    expect(r.code).toBe(0);
    expect(r.stderr).toEqual([]);
  });
});
