/**
 * `npm run chaos`: the whole system under faults, then a check that it kept its promises.
 *
 * It starts its own PostgreSQL (a temporary cluster) and its own nats-server (or, with `--cluster`,
 * a three-node JetStream cluster with three-replica streams), migrates, runs three daemons and the
 * reference `tabular-parser` service (each the built CLI in its own process), and drives a seeded
 * load (see load.ts). Meanwhile it SIGKILLs a random daemon every few seconds and starts it again,
 * restarts nats-server once (with `--cluster`: SIGKILLs one node and starts it again) and
 * SIGKILLs PostgreSQL once and starts it again (crash recovery). Then it lets the system settle
 * (every daemon up, every deadline passed and swept, everything drained), stops everything
 * gracefully, and checks the invariants (check.ts), printing each with its figures.
 *
 * `--scenario NAME` runs one named fault instead, on the servers it needs (scenarios.ts: a
 * failover, a switchover or an asynchronous failover on Patroni behind HAProxy, hung commits,
 * NATS stopped or frozen, the inbox's consumer deleted, a rolling restart, a slow database link,
 * a NATS cluster restarted node by node), under the same load and invariants, plus its own; it
 * ends with a row of figures (`--scenario list` names them all).
 *
 * Options: `--seed N`, `--minutes M` (or CHAOS_MINUTES; the load phase), `--jobs N`, `--cluster`,
 * `--short` (about a minute in all: the configuration `npm test` runs), `--keep` (keep the
 * temporary directories and logs), `--scenario NAME`. Exit code 0 when every invariant holds,
 * 1 otherwise.
 *
 * The seed is printed first; the same seed repeats the run's choices (not its timing).
 */
import { randomInt } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { spawnSync } from 'node:child_process';
import { jetstreamManager, type ConsumerInfo } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { sql } from 'kysely';
import { QUARANTINE_REASONS, type QuarantineReason } from '../../machines/index.js';
import { openDb, type Db } from '../../src/db/database.js';
import { INBOX_CONSUMER, JOBS_STREAM, RESULTS_STREAM } from '../../src/nats/subjects.js';
import {
  startNatsCluster,
  startNatsServer,
  type NatsServerHandle,
} from '../../workshop/localServers/natsServer.js';
import { startPatroniCluster, type PatroniClusterHandle } from '../../workshop/localServers/patroni.js';
import { startPgCluster, type PgClusterHandle } from '../../workshop/localServers/pgCluster.js';
import {
  checkInvariants,
  countLogLine,
  createLedger,
  fmt,
  pathHistogram,
  readConsumer,
  readDb,
  readResultsStream,
  type DbState,
  type DecisionLedger,
  type Invariant,
} from './check.js';
import { startDelayProxy, type DelayProxy } from './delayProxy.js';
import {
  invalidMessage,
  JobMaker,
  Publisher,
  REFERENCE_SERVICE,
  Repeater,
  SCRIPTED_SERVICE,
  ScriptedService,
} from './load.js';
import { Supervised, type UnexpectedExit } from './processes.js';
import { createRng, type Rng } from './rng.js';
import {
  doubledEnvelopes,
  SCENARIOS,
  type Infra,
  type InfraKind,
  type Outage,
  type Scenario,
  type ScenarioContext,
  type ScenarioFigures,
} from './scenarios.js';
import { Watch } from './watch.js';

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

interface Options {
  seed: number;
  short: boolean;
  cluster: boolean;
  keep: boolean;
  /** Seconds of load (faults are injected during it). */
  loadSeconds: number;
  jobs: number;
  /** The named scenario, or undefined for the mixed run. */
  scenario: Scenario | undefined;
}

/** A wrong command line: one line, exit 2. */
class OptionError extends Error {}

/** `--scenario list`: the names and what each does, then exit 0. */
class ListScenarios extends Error {}

function parseOptions(argv: string[]): Options {
  const get = (name: string): string | undefined => {
    const i = argv.indexOf(`--${name}`);
    if (i < 0) return undefined;
    const v = argv[i + 1];
    if (v === undefined || v.startsWith('--')) throw new OptionError(`--${name} needs a value`);
    return v;
  };
  const num = (name: string, v: string | undefined): number | undefined => {
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isFinite(n) || n <= 0)
      throw new OptionError(`--${name} must be a positive number, got ${JSON.stringify(v)}`);
    return n;
  };
  const known = new Set(['--seed', '--minutes', '--jobs', '--cluster', '--short', '--keep', '--scenario']);
  for (const a of argv)
    if (a.startsWith('--') && !known.has(a))
      throw new OptionError(`unknown option ${a} (known: ${[...known].join(' ')})`);
  const scenarioName = get('scenario');
  if (scenarioName === 'list') throw new ListScenarios();
  const scenario = scenarioName === undefined ? undefined : SCENARIOS.find((x) => x.name === scenarioName);
  if (scenarioName !== undefined && !scenario)
    throw new OptionError(
      `unknown scenario ${JSON.stringify(scenarioName)} (known: ${SCENARIOS.map((x) => x.name).join(', ')})`,
    );
  const short = argv.includes('--short');
  const seedArg = get('seed');
  const seed = seedArg === undefined ? randomInt(1, 2 ** 31 - 1) : Math.floor(Number(seedArg));
  if (!Number.isSafeInteger(seed) || seed < 0)
    throw new OptionError(`--seed must be a whole number, got ${JSON.stringify(seedArg)}`);
  const defaultMinutes = scenario
    ? (short ? scenario.seconds.short : scenario.seconds.long) / 60
    : short
      ? 0.5
      : 10;
  const minutes =
    num('minutes (or CHAOS_MINUTES)', get('minutes') ?? process.env['CHAOS_MINUTES']) ?? defaultMinutes;
  const loadSeconds = Math.round(minutes * 60);
  const jobs = Math.floor(
    num('jobs', get('jobs')) ?? (short ? Math.round(10 * loadSeconds) : Math.round(1000 * minutes)),
  );
  if (scenario && argv.includes('--cluster') && scenario.infra !== 'nats-cluster')
    throw new OptionError(`--cluster does not apply to the ${scenario.name} scenario`);
  return {
    seed,
    short,
    cluster: argv.includes('--cluster') || scenario?.infra === 'nats-cluster',
    keep: argv.includes('--keep'),
    loadSeconds,
    jobs,
    scenario,
  };
}

// ---------------------------------------------------------------------------------------------
// Tuning: why each value
// ---------------------------------------------------------------------------------------------

/** Short enough that timeouts happen during the run and the settle phase stays brief. */
const replyTimeoutMs = (o: Options) => o.scenario?.replyTimeoutMs?.(o.short) ?? (o.short ? 6_000 : 12_000);
/** JetStream's duplicate window: short, so repeats sent after it reach the inbox as real duplicates. */
const DUP_WINDOW_MS = 3_000;
/** Small, so PAYLOAD_TOO_LARGE messages are cheap to send. */
const MAX_ENVELOPE_BYTES = 8_192;
/** A killed daemon's unacked envelopes come back after this: short, so kills cost seconds, not minutes. */
const INBOX_ACK_WAIT_MS = 4_000;
/** Share of jobs for the reference service (the rest are scripted by the harness). */
const REFERENCE_SHARE = 0.55;
/** Invalid messages per created job (on average), on top of one of each reason at the start. */
const INVALID_PER_JOB = 0.25;
/** Share of files that get a second job (a new attempt) while the first one runs. */
const SUPERSEDE_SHARE = 0.03;
/** Share of the reference service's envelopes the harness repeats byte for byte. */
const REPEAT_SHARE = 0.1;

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

const T0 = Date.now();
const clock = (): number => (Date.now() - T0) / 1000;
const say = (text: string): void => {
  process.stdout.write(`[${clock().toFixed(1).padStart(6)}s] ${text}\n`);
};

const REPO = fileURLToPath(
  new URL(import.meta.url.includes('/dist/') ? '../../../' : '../../', import.meta.url),
);
const CLI = join(REPO, 'bin', 'recognition-core.js');

// ---------------------------------------------------------------------------------------------
// The servers
// ---------------------------------------------------------------------------------------------

/** The servers a run needs, with how to stop them (keeping their data) or remove them. */
interface Servers extends Infra {
  stop(): Promise<void>;
  cleanup(): Promise<void>;
  dataDirs(): string;
}

async function startServers(kind: InfraKind, o: Options): Promise<Servers> {
  let pg: PgClusterHandle | undefined;
  let patroni: PatroniClusterHandle | undefined;
  let delay: DelayProxy | undefined;
  let natsNodes: NatsServerHandle[] = [];
  let cleanupNats: () => Promise<void> = async () => undefined;
  if (kind === 'patroni-sync' || kind === 'patroni-async') {
    const ensure = spawnSync('bash', [join(REPO, 'scripts', 'ensure-patroni.sh')], { stdio: 'inherit' });
    if (ensure.status !== 0)
      throw new Error('Patroni, etcd or HAProxy is missing (scripts/ensure-patroni.sh)');
    patroni = await startPatroniCluster(
      kind === 'patroni-sync'
        ? { members: o.short ? 2 : 3, synchronousMode: true }
        : { members: 2, synchronousMode: false, maximumLagOnFailover: 1024 ** 3 },
    );
  } else {
    pg = await startPgCluster({ settings: { max_connections: 150 } });
    if (kind === 'pg-slow') delay = await startDelayProxy(pg.port);
  }
  if (kind === 'nats-cluster') {
    const cluster = await startNatsCluster(3);
    natsNodes = cluster.servers;
    cleanupNats = () => cluster.cleanup();
  } else {
    const server = await startNatsServer();
    natsNodes = [server];
    cleanupNats = () => server.cleanup();
  }
  const harnessDatabaseUrl = patroni ? patroni.url('recognition') : pg!.url('recognition');
  const daemonDatabaseUrl = delay
    ? `postgres://postgres@127.0.0.1:${delay.port}/recognition`
    : harnessDatabaseUrl;
  const describe = patroni
    ? `Patroni cluster ${patroni.members.map((m) => `${m.name} :${m.pgPort}`).join(', ')} (${patroni.synchronousMode ? 'synchronous' : 'asynchronous'} replication), HAProxy :${patroni.haproxy.port}, etcd ${patroni.etcd.hostPort}`
    : `PostgreSQL on port ${pg!.port}${delay ? ` (daemons through a delay proxy on port ${delay.port})` : ''}`;
  return {
    kind,
    daemonDatabaseUrl,
    harnessDatabaseUrl,
    natsNodes,
    pg,
    patroni,
    delay,
    describe: `${describe}; NATS at ${natsNodes.map((n) => n.url).join(',')}`,
    async stop() {
      await delay?.close();
      await pg?.stop().catch(() => undefined);
      await patroni?.stop().catch(() => undefined);
      for (const n of natsNodes) await n.stop().catch(() => undefined);
    },
    async cleanup() {
      await delay?.close();
      await pg?.cleanup().catch(() => undefined);
      await patroni?.cleanup().catch(() => undefined);
      await cleanupNats().catch(() => undefined);
    },
    dataDirs: () =>
      pg
        ? `PostgreSQL data in ${pg.dataDir}`
        : patroni
          ? `Patroni members in ${patroni.members.map((m) => m.dataDir).join(', ')}`
          : '',
  };
}

// ---------------------------------------------------------------------------------------------
// The mixed run's faults
// ---------------------------------------------------------------------------------------------

/** Random daemon SIGKILLs, one NATS restart (or node kill), one PostgreSQL crash. */
async function mixedFaults(ctx: ScenarioContext, o: Options, faultRng: Rng): Promise<void> {
  const natsNodes = ctx.infra.natsNodes;
  const pg = ctx.infra.pg!;
  const killer = (async () => {
    const [min, max] = o.short ? [3, 5] : [5, 12];
    await sleep(faultRng.int(2_000, 4_000));
    while (Date.now() < ctx.loadEnd) {
      const d = faultRng.pick(ctx.daemons);
      if (d.isRunning()) {
        const pid = d.pid;
        await d.kill();
        ctx.kills++;
        const down = faultRng.int(300, 2_500);
        say(`SIGKILL ${d.name} (pid ${pid}); back in ${down} ms`);
        ctx.track(sleep(down).then(() => d.start()));
      }
      await sleep(faultRng.between(min, max) * 1000);
    }
  })();

  const natsFault = (async () => {
    await sleep(o.loadSeconds * 1000 * 0.35);
    const from = clock();
    if (o.cluster) {
      const node = faultRng.pick(natsNodes);
      await node.kill();
      const down = faultRng.int(3_000, 6_000);
      say(`SIGKILL NATS node ${node.serverName}; back in ${down} ms`);
      await sleep(down);
      await node.restart();
      say(`NATS node ${node.serverName} is back`);
    } else {
      const down = faultRng.int(2_000, 4_000);
      await natsNodes[0]!.stop();
      say(`nats-server stopped (SIGTERM); starting it again on the same port and store in ${down} ms`);
      await sleep(down);
      await natsNodes[0]!.restart();
      say('nats-server is back');
    }
    ctx.outages.push({ what: 'NATS', from, to: clock() });
  })();

  const pgFault = (async () => {
    await sleep(o.loadSeconds * 1000 * 0.65);
    const from = clock();
    await pg.kill();
    const down = faultRng.int(2_000, 4_000);
    say(`SIGKILL PostgreSQL (crash, recovery at start); back in ${down} ms`);
    await sleep(down);
    await pg.start();
    say('PostgreSQL is back');
    ctx.outages.push({ what: 'PostgreSQL', from, to: clock() });
  })();

  await Promise.all([killer, natsFault, pgFault]);
  ctx.faults.push(
    `${ctx.kills} daemon SIGKILLs (+ restarts)`,
    o.cluster ? '1 NATS node SIGKILL + restart' : '1 nats-server restart',
    '1 PostgreSQL SIGKILL + restart',
  );
}

// ---------------------------------------------------------------------------------------------
// Figures
// ---------------------------------------------------------------------------------------------

/**
 * Applied envelopes (logged after their commit) whose transition the database lacks. With
 * `acksSuperseded`, an ack whose job has an applied result is not counted: after a failover that
 * lost commits, the replay meets a result before an ack that instances had applied the other way
 * round, and the ack then changes nothing.
 */
function lostApplied(ledger: DecisionLedger, state: DbState, acksSuperseded: boolean): string[] {
  const have = new Set<string>();
  const withResult = new Set<string>();
  for (const [jobId, steps] of state.transitions)
    for (const s of steps) {
      if (s.event.startsWith('ENVELOPE_')) have.add(`${jobId}|${s.msg_id ?? ''}`);
      if (s.event === 'ENVELOPE_RESULT') withResult.add(jobId);
    }
  return [
    ...new Set(
      ledger.applied
        .filter((a) => !(acksSuperseded && !a.result && withResult.has(a.jobId)))
        .map((a) => a.key),
    ),
  ].filter((k) => !have.has(k));
}

const secs = (ms: number | undefined): string =>
  ms === undefined || !Number.isFinite(ms) ? '–' : `${(ms / 1000).toFixed(1)} s`;

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

async function main(): Promise<number> {
  const o = parseOptions(process.argv.slice(2));
  const name = o.scenario?.name ?? 'mixed';
  // 0. The seed first, so a failure can be replayed.
  process.stdout.write(
    `chaos seed ${o.seed} (replay: npm run chaos -- --seed ${o.seed}${o.scenario ? ` --scenario ${name}` : ''}${o.short ? ' --short' : ` --minutes ${o.loadSeconds / 60}`}${o.cluster && !o.scenario ? ' --cluster' : ''} --jobs ${o.jobs})\n`,
  );
  if (!existsSync(join(REPO, 'dist', 'src', 'cli.js')))
    throw new Error('not built: run `npm run build` first');
  const rng = createRng(o.seed);
  const faultRng = rng.fork();
  const loadRng = rng.fork();
  const scriptRng = rng.fork();
  const repeatRng = rng.fork();
  const invalidRng = rng.fork();
  const runDir = await mkdtemp(join(tmpdir(), `chaos-${o.seed}-`));
  say(
    `${o.short ? 'short' : 'long'} ${o.scenario ? `${name} scenario` : 'run'}: ${o.jobs} jobs over ${o.loadSeconds} s, 3 daemons, logs in ${runDir}`,
  );
  if (o.scenario) say(`${name}: ${o.scenario.summary}`);

  let servers: Servers | undefined;
  let nc: NatsConnection | undefined;
  let db: Db | undefined;
  const procs: Supervised[] = [];
  process.on('exit', () => procs.forEach((p) => p.abandon()));
  // Bounded whatever happens: load, the longest settle, and room for starting and stopping.
  const hardLimitS = o.loadSeconds + (o.short ? 120 : 420) + (o.scenario ? 480 : 300);
  setTimeout(() => {
    process.stdout.write(
      `chaos: FAIL: still running after the hard limit of ${hardLimitS} s (seed ${o.seed})\n`,
    );
    process.exit(1);
  }, hardLimitS * 1000).unref();
  let passed = false;
  try {
    // 1. PostgreSQL and NATS of our own.
    servers = await startServers(o.scenario?.infra ?? (o.cluster ? 'nats-cluster' : 'pg'), o);
    const natsNodes = servers.natsNodes;
    const natsUrl = natsNodes.map((n) => n.url).join(',');
    say(servers.describe);

    // 2. migrate, as an operator would.
    const baseEnv = {
      PATH: process.env['PATH'] ?? '/usr/bin:/bin',
      HOME: process.env['HOME'] ?? '/tmp',
      NATS_URL: natsUrl,
      LOG_PRETTY: 'false',
    };
    const migrate = spawnSync(process.execPath, [CLI, 'migrate'], {
      env: { ...baseEnv, DATABASE_URL: servers.harnessDatabaseUrl },
      encoding: 'utf8',
    });
    if (migrate.status !== 0) throw new Error(`migrate failed: ${migrate.stderr}${migrate.stdout}`);

    // 3. Three daemons and the reference service, supervised.
    const ledger = createLedger();
    const unexpected: UnexpectedExit[] = [];
    const daemonEnv = {
      ...baseEnv,
      DATABASE_URL: servers.daemonDatabaseUrl,
      NATS_STREAM_REPLICAS: o.cluster ? '3' : '1',
      HTTP_HOST: '127.0.0.1',
      HTTP_PORT: '0',
      LOG_LEVEL: 'debug',
      REPLY_TIMEOUT_MS: String(replyTimeoutMs(o)),
      WATCHDOG_INTERVAL_MS: '1000',
      PUBLISHER_POLL_INTERVAL_MS: '1000',
      NATS_DUPLICATE_WINDOW_MS: String(DUP_WINDOW_MS),
      MAX_ENVELOPE_BYTES: String(MAX_ENVELOPE_BYTES),
      INBOX_ACK_WAIT_MS: String(INBOX_ACK_WAIT_MS),
      SHUTDOWN_TIMEOUT_MS: '20000',
      ...o.scenario?.daemonEnv,
    };
    const daemons: Supervised[] = [];
    const watch = new Watch(daemons);
    const made = [0, 1, 2].map(
      (i) =>
        new Supervised({
          name: `daemon-${i}`,
          args: [CLI, 'start'],
          env: daemonEnv,
          logFile: join(runDir, `daemon-${i}.log`),
          clock,
          wants: (raw) => raw.includes('"loop":"inbox"'),
          onLog: (line) => {
            countLogLine(ledger, line);
            watch.onLog(line);
          },
          countLines: { readOnly: /"code":"25006"|read-only transaction/ },
          onUnexpectedExit: (e) => {
            unexpected.push(e);
            say(
              `${e.name} exited by itself (code ${e.code}, signal ${e.signal}, ${e.wasStarted ? 'while running' : 'while starting'}): ${e.stderr.slice(0, 200)}`,
            );
          },
        }),
    );
    daemons.push(...made);
    procs.push(...daemons);
    daemons[0]!.start();
    if (!(await daemons[0]!.waitStarted(60_000)))
      throw new Error('the first daemon did not start within 60 s (see its log)');
    for (const d of daemons.slice(1)) d.start();
    const service = new Supervised({
      name: REFERENCE_SERVICE,
      args: [CLI, 'service', REFERENCE_SERVICE, '--seed', String(o.seed), '--delay', '300'],
      env: { ...baseEnv, LOG_LEVEL: 'info' },
      logFile: join(runDir, 'tabular-parser.log'),
      clock,
      isStartedLine: (l) => l['event'] === 'ready' || l['event'] === 'service_started',
      onUnexpectedExit: (e) => {
        unexpected.push(e);
        say(`${e.name} exited by itself (code ${e.code}, signal ${e.signal}): ${e.stderr.slice(0, 200)}`);
      },
    });
    procs.push(service);
    service.start();
    for (const d of daemons)
      if (!(await d.waitStarted(60_000))) throw new Error(`${d.name} did not start within 60 s`);
    if (!(await service.waitStarted(60_000)))
      throw new Error('the reference service did not start within 60 s');
    say('3 daemons and the reference service are up');
    watch.start();

    // 4. The harness's own connections and the scripted service.
    nc = await connect({
      servers: natsNodes.map((n) => n.url),
      maxReconnectAttempts: -1,
      reconnectTimeWait: 250,
      name: 'chaos-harness',
    });
    db = openDb(servers.harnessDatabaseUrl, { max: 4, onIdleError: () => undefined });
    const pub = new Publisher(nc);
    const scripted = new ScriptedService(nc, pub, scriptRng, DUP_WINDOW_MS);
    await scripted.start();
    const repeater = new Repeater(nc, pub, repeatRng, DUP_WINDOW_MS, REPEAT_SHARE);
    repeater.start();
    const maker = new JobMaker(db.db, o.seed);

    // 5. Load and faults, side by side.
    const loadStart = Date.now();
    const loadEnd = loadStart + o.loadSeconds * 1000;
    const inflight = new Set<Promise<unknown>>();
    const track = (p: Promise<unknown>): void => {
      inflight.add(p);
      void p.finally(() => inflight.delete(p));
    };
    const invalidSent: Record<string, number> = {};
    const sendInvalid = (reason: QuarantineReason): void => {
      const m = invalidMessage(reason, invalidRng, {
        realJobId: maker.jobIds.length > 0 ? invalidRng.pick(maker.jobIds) : undefined,
        maxEnvelopeBytes: MAX_ENVELOPE_BYTES,
      });
      invalidSent[reason] = (invalidSent[reason] ?? 0) + 1;
      track(pub.publish(m.data, m.headers, m.msgId));
    };
    /** While set, no job is created (a scenario paused the load); resolves when resumed. */
    let paused: { promise: Promise<void>; resume: () => void } | undefined;
    const unpaused = async (): Promise<void> => {
      while (paused) await paused.promise;
    };

    const load = (async () => {
      for (const reason of QUARANTINE_REASONS) sendInvalid(reason);
      let index = 0;
      while (index < o.jobs) {
        const due = Math.min(o.jobs, Math.ceil((o.jobs * (Date.now() - loadStart)) / (o.loadSeconds * 1000)));
        while (index < due) {
          await unpaused();
          const target = loadRng.chance(REFERENCE_SHARE) ? REFERENCE_SERVICE : SCRIPTED_SERVICE;
          const i = index++;
          const { fileId } = await maker.create(i, target, (f) => {
            if (target === SCRIPTED_SERVICE) scripted.plan(f, 1);
          });
          if (loadRng.chance(INVALID_PER_JOB)) sendInvalid(loadRng.pick(QUARANTINE_REASONS));
          if (loadRng.chance(SUPERSEDE_SHARE)) {
            const delay = loadRng.int(200, 3_000);
            track(
              sleep(delay)
                .then(unpaused)
                .then(() => {
                  if (target === SCRIPTED_SERVICE) scripted.plan(fileId, 2);
                  return maker.supersede(fileId, target);
                }),
            );
          }
        }
        await sleep(100);
      }
    })();

    const progress = setInterval(
      () => {
        void (async () => {
          try {
            const r = await sql<{
              status: string;
              n: string;
            }>`SELECT status, count(*) AS n FROM recognition_job GROUP BY status`.execute(db!.db);
            const jsm = await jetstreamManager(nc!);
            const s = await jsm.streams.info(RESULTS_STREAM);
            say(
              `progress: ${maker.created} jobs created (${fmt(Object.fromEntries(r.rows.map((x) => [x.status, Number(x.n)])))}); ${s.state.last_seq} envelopes in the stream`,
            );
          } catch (err) {
            say(`progress: (unavailable: ${(err as Error).message.slice(0, 80)})`);
          }
        })();
      },
      o.short ? 10_000 : 30_000,
    );

    const figures: ScenarioFigures = { gapWindows: [], targets: [], notes: [] };
    const ctx: ScenarioContext = {
      short: o.short,
      seed: o.seed,
      say,
      clock,
      rng: faultRng,
      infra: servers,
      daemons,
      service,
      db,
      nc,
      ledger,
      watch,
      loadStart,
      loadEnd,
      pauseLoad() {
        if (paused) return;
        let resume!: () => void;
        const promise = new Promise<void>((r) => (resume = r));
        paused = { promise, resume };
      },
      resumeLoad() {
        const p = paused;
        paused = undefined;
        p?.resume();
      },
      outages: [] as Outage[],
      faults: [],
      kills: 0,
      figures,
      invariants: [],
      cliEnv: { ...baseEnv, DATABASE_URL: servers.harnessDatabaseUrl },
      cli: CLI,
      track,
    };
    const faults = o.scenario ? o.scenario.faults(ctx) : mixedFaults(ctx, o, faultRng);
    // A fault script that fails is a failed run, but the load goes on and the checks still run.
    const faultError = await faults.then(
      () => undefined,
      (err: unknown) => err,
    );
    ctx.resumeLoad();
    if (faultError) say(`the ${name} fault script failed: ${String(faultError)}`);
    await load;
    const loadSecondsActual = (Date.now() - loadStart) / 1000;
    say(`load done: ${maker.created} jobs created; ${ctx.kills} daemon SIGKILLs; settling`);

    // 6. Settle: every daemon up, every send made, every deadline passed and swept, all drained.
    const settleStart = Date.now();
    for (const d of daemons) d.start();
    for (const d of daemons)
      if (!(await d.waitStarted(60_000))) throw new Error(`${d.name} did not come back within 60 s`);
    await Promise.all([...inflight]);
    const jsm = await jetstreamManager(nc);
    const settleLimitMs = (o.short ? 120 : 420) * 1000;
    let lastSeq = -1;
    let settled = false;
    let lastState = '';
    while (Date.now() - settleStart < settleLimitMs) {
      try {
        const open = await sql<{
          n: string;
        }>`SELECT count(*) AS n FROM recognition_job WHERE status IN ('pending','published','processing')`.execute(
          db.db,
        );
        const inbox = await jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER);
        const svc = await jsm.consumers.info(JOBS_STREAM, REFERENCE_SERVICE);
        const scr = await jsm.consumers.info(JOBS_STREAM, SCRIPTED_SERVICE);
        const s = await jsm.streams.info(RESULTS_STREAM);
        const openJobs = Number(open.rows[0]!.n);
        lastState = `${openJobs} open jobs, core-inbox pending ${inbox.num_pending}/unacked ${inbox.num_ack_pending}, job consumers unacked ${svc.num_ack_pending + scr.num_ack_pending}/pending ${svc.num_pending + scr.num_pending}, sends scheduled ${scripted.pending() + repeater.pending()}`;
        const quiet =
          openJobs === 0 &&
          inbox.num_pending === 0 &&
          inbox.num_ack_pending === 0 &&
          svc.num_pending + svc.num_ack_pending + scr.num_pending + scr.num_ack_pending === 0 &&
          scripted.pending() + repeater.pending() === 0 &&
          s.state.last_seq === lastSeq;
        lastSeq = s.state.last_seq;
        if (quiet) {
          settled = true;
          break;
        }
      } catch (err) {
        lastState = `(checking failed: ${(err as Error).message.slice(0, 100)})`;
      }
      await sleep(1_000);
    }
    clearInterval(progress);
    watch.stop();
    const settleSeconds = (Date.now() - settleStart) / 1000;
    say(
      settled
        ? `settled in ${settleSeconds.toFixed(1)} s`
        : `did NOT settle within ${settleLimitMs / 1000} s: ${lastState}`,
    );

    // 7. Stop gracefully: the service, the harness's senders, then the daemons (each must exit 0).
    const serviceExit = await service.stop(20_000);
    await scripted.stop();
    repeater.stop();
    for (let i = 0; i < 30; i++) {
      const inbox = await jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER).catch(() => undefined);
      if (!inbox || (inbox.num_pending === 0 && inbox.num_ack_pending === 0)) break;
      await sleep(500);
    }
    const daemonExits = await Promise.all(daemons.map((d) => d.stop(30_000)));

    // 8. Read back and check.
    const stream = await readResultsStream(nc);
    // A consumer that is gone (deleted and never provisioned again) fails the drained check.
    const consumer = await readConsumer(nc).catch(
      () =>
        ({
          num_pending: NaN,
          num_ack_pending: NaN,
          ack_floor: { stream_seq: -1 },
        }) as unknown as ConsumerInfo,
    );
    const state = await readDb(db.db);
    const invariants: Invariant[] = checkInvariants({
      stream,
      consumer,
      db: state,
      ledger,
      kills: ctx.kills,
    });
    const tolerated = unexpected.filter(
      (e) =>
        e.name.startsWith('daemon') &&
        !e.wasStarted &&
        ctx.outages.some((w) => e.at >= w.from - 1 && e.at <= w.to + 15),
    );
    const crashes = unexpected.filter((e) => !tolerated.includes(e));
    const badStops = daemonExits.filter((e) => e.code !== 0 || e.forced);
    invariants.push({
      name: 'processes: no crash; graceful stop exits 0',
      ok: crashes.length === 0 && badStops.length === 0 && serviceExit.code === 0 && settled,
      figures:
        `${crashes.length} unexpected exits, ${tolerated.length} failed starts during an outage (restarted, as a supervisor would); ` +
        `SIGTERM at the end: daemons exit ${daemonExits.map((e) => (e.forced ? 'forced' : String(e.code ?? e.signal))).join('/')}, service exit ${serviceExit.code ?? serviceExit.signal}; settled: ${settled ? 'yes' : `no (${lastState})`}`,
      notes: crashes.map(
        (e) =>
          `${e.name} at ${e.at.toFixed(1)} s: code ${e.code} signal ${e.signal}: ${e.stderr.slice(0, 200)}`,
      ),
    });
    const lost = lostApplied(ledger, state, o.scenario?.name === 'async-loss');
    const doubled = await doubledEnvelopes(db);
    if (o.scenario) {
      invariants.push({
        name: `${name}: the fault script ran to its end`,
        ok: faultError === undefined,
        figures: faultError === undefined ? 'yes' : `no: ${String(faultError).slice(0, 300)}`,
        notes: [],
      });
      invariants.push({
        name: `${name}: no applied envelope lost, none applied twice`,
        ok: lost.length === 0 && doubled.length === 0,
        figures: `${ledger.applied.length} applied decisions logged; ${lost.length} missing from the database at the end, ${doubled.length} (job, msg id) applied twice`,
        notes: [...lost.slice(0, 5), ...doubled.slice(0, 5)],
      });
      if (o.scenario.name === 'nats-outage') {
        const dlq = state.jobs.filter((j) => j.status === 'dlq');
        invariants.push({
          name: 'nats-outage: no job dead-lettered by the outage',
          ok: dlq.length === 0,
          figures: `${dlq.length} jobs in dlq (${fmt(Object.fromEntries(dlq.map((j) => [j.error_code ?? '?', dlq.filter((x) => x.error_code === j.error_code).length])))})`,
          notes: dlq.slice(0, 5).map((j) => `${j.id}: ${j.error_code}`),
        });
      }
      invariants.push(...ctx.invariants);
    }

    // 9. The summary.
    const valid = stream.messages.filter((m) => m.expect === null);
    const invalid = stream.messages.length - valid.length;
    const lines: string[] = [];
    lines.push(
      '',
      `summary (seed ${o.seed}, ${o.short ? 'short' : 'long'}, ${o.scenario ? `${name} scenario, ` : ''}${o.cluster ? '3-node NATS cluster, R3 streams' : 'single nats-server'})`,
    );
    lines.push(
      `  time: load ${loadSecondsActual.toFixed(0)} s, settle ${settleSeconds.toFixed(1)} s, total ${clock().toFixed(0)} s`,
    );
    lines.push(
      `  faults: ${ctx.faults.join(', ')}; outages ${ctx.outages.map((w) => `${w.what} ${w.from.toFixed(1)}–${w.to.toFixed(1)} s`).join(', ')}`,
    );
    lines.push(
      `  jobs: ${maker.created} (${fmt(maker.byTarget)}; ${maker.superseded} second attempts on a file); scripted scenarios: ${fmt(scripted.played)}`,
    );
    lines.push(
      `  envelopes: ${stream.messages.length} in RECOGNITION_RESULTS (${valid.length} valid, ${invalid} invalid); the harness published ${pub.stored + pub.droppedAsDuplicate} (${pub.droppedAsDuplicate} dropped by JetStream as duplicates, ${pub.gaveUp} given up), repeated ${repeater.scheduled} of the service's`,
    );
    lines.push(`  invalid sent: ${fmt(invalidSent)}`);
    lines.push(`  decisions logged by the inboxes: ${fmt(ledger.byDecision)}`);
    const readOnly = daemons.reduce((n, d) => n + (d.counts['readOnly'] ?? 0), 0);
    if (readOnly > 0) lines.push(`  read-only (25006) errors logged by the daemons: ${readOnly}`);
    for (const n of figures.notes) lines.push(`  ${n}`);
    lines.push('  paths:');
    for (const [path, n] of pathHistogram(state)) lines.push(`    ${String(n).padStart(6)}  ${path}`);
    lines.push('invariants');
    for (const inv of invariants) {
      lines.push(`${inv.ok ? 'PASS' : 'FAIL'} ${inv.name}: ${inv.figures}`);
      for (const n of inv.notes) lines.push(`       ${n}`);
    }
    if (figures.targets.length > 0) {
      lines.push('targets (reported, not invariants)');
      for (const t of figures.targets) lines.push(`${t.met ? 'MET' : 'MISSED'} ${t.name}: ${t.figures}`);
    }
    passed = invariants.every((i) => i.ok);
    if (o.scenario) {
      const gaps =
        figures.gapWindows.length > 0
          ? figures.gapWindows.map((w) => watch.longestGap(w.from, w.to))
          : [watch.longestGap(loadStart + 5_000, loadEnd)];
      const widest = gaps.reduce((a, b) => (b.ms > a.ms ? b : a));
      const gap = widest.ms;
      lines.push(
        `  write gap: ${secs(gap)}, from the applied envelope logged at ${((widest.at - T0) / 1000).toFixed(1)} s to the next (${figures.gapWindows.length > 0 ? 'around the fault' : 'the longest during the load'})`,
      );
      const lostFigure =
        figures.lostBeforeRepair !== undefined
          ? `${figures.lostBeforeRepair} → ${lost.length} after replay`
          : String(lost.length);
      lines.push(
        'figures',
        "| scenario | faults | envelopes | lost | doubled | write gap | core's share | recovery | peak RSS |",
        '| --- | --- | --- | --- | --- | --- | --- | --- | --- |',
        `| ${name}${o.short ? ' (short)' : ''} | ${ctx.faults.join('; ')} | ${valid.length} | ${lostFigure} | ${doubled.length} | ${secs(gap)} | ${secs(figures.coreShareMs)} | ${secs(figures.recoveryMs)} | ${(watch.maxRss() / 2 ** 20).toFixed(0)} MiB |`,
      );
    }
    lines.push(
      `result: ${passed ? 'PASS' : 'FAIL'} (${invariants.filter((i) => i.ok).length}/${invariants.length} invariants hold), seed ${o.seed}`,
    );
    process.stdout.write(lines.join('\n') + '\n');
  } finally {
    for (const p of procs) p.abandon();
    await Promise.all(procs.map((p) => p.closeLog()));
    await nc?.close().catch(() => undefined);
    await db?.close().catch(() => undefined);
    if (!passed || o.keep) {
      process.stdout.write(
        `kept for inspection: logs in ${runDir}${servers ? `, ${servers.dataDirs()}` : ''}\n`,
      );
      await servers?.stop();
    } else {
      await servers?.cleanup();
      await rm(runDir, { recursive: true, force: true });
    }
  }
  return passed ? 0 : 1;
}

// Whatever ends the harness, its children go with it: the helpers kill PostgreSQL and nats-server
// on 'exit', and a signal must become an exit for that to run.
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    process.stdout.write(`chaos: ${signal}: stopping everything\n`);
    process.exit(130);
  });
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    if (err instanceof ListScenarios) {
      for (const x of SCENARIOS) process.stdout.write(`${x.name.padEnd(14)} ${x.summary}\n`);
      process.exit(0);
    }
    if (err instanceof OptionError) {
      process.stderr.write(`chaos: ${err.message}\n`);
      process.exit(2);
    }
    process.stderr.write(`chaos: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
