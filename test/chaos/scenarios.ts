/**
 * The named chaos scenarios (`npm run chaos -- --scenario NAME`): each one fault, or one kind of
 * fault, under the same continuous load and checked by the same invariants as the mixed run
 * (run.ts), plus its own checks and figures. The servers each needs (a plain PostgreSQL, one
 * behind a slow link, a Patroni cluster behind HAProxy, a NATS cluster) are its `infra`.
 */
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { sql } from 'kysely';
import pg from 'pg';
import type { Db } from '../../src/db/database.js';
import type { NatsServerHandle } from '../../workshop/localServers/natsServer.js';
import type { PatroniClusterHandle } from '../../workshop/localServers/patroni.js';
import type { PgClusterHandle } from '../../workshop/localServers/pgCluster.js';
import { INBOX_CONSUMER, JOBS_STREAM, RESULTS_STREAM } from '../../src/nats/subjects.js';
import type { DecisionLedger, Invariant } from './check.js';
import type { DelayProxy } from './delayProxy.js';
import type { Supervised } from './processes.js';
import type { Rng } from './rng.js';
import type { Watch } from './watch.js';

/** The servers a scenario runs on. */
export type InfraKind = 'pg' | 'pg-slow' | 'nats-cluster' | 'patroni-sync' | 'patroni-async';

/** The servers, started. */
export interface Infra {
  kind: InfraKind;
  /** What the daemons' DATABASE_URL is. */
  daemonDatabaseUrl: string;
  /** What the harness itself writes and reads through (follows the primary). */
  harnessDatabaseUrl: string;
  natsNodes: NatsServerHandle[];
  pg?: PgClusterHandle | undefined;
  patroni?: PatroniClusterHandle | undefined;
  delay?: DelayProxy | undefined;
  /** One line: what runs. */
  describe: string;
}

/** A stretch of time a server was down or faulty (seconds since the harness started). */
export interface Outage {
  what: string;
  from: number;
  to: number;
}

/** What a scenario reports beside the invariants. */
export interface ScenarioFigures {
  /**
   * Where the write gaps are read (ms since the epoch): the longest time between two applied
   * envelopes inside each window, the largest of them. Without a window, over the whole load.
   */
  gapWindows: Array<{ from: number; to: number }>;
  /** The core's share of the write gap (ms). */
  coreShareMs?: number;
  /** From the fault to the core committing again with every instance ready (ms). */
  recoveryMs?: number | undefined;
  /** Envelopes the database lost (acked, then gone) before any repair. */
  lostBeforeRepair?: number;
  /** Targets that are reported (met or missed), not invariants. */
  targets: Array<{ name: string; met: boolean; figures: string }>;
  /** Extra lines for the summary. */
  notes: string[];
}

/** Everything a scenario's fault script can use. */
export interface ScenarioContext {
  short: boolean;
  seed: number;
  say(text: string): void;
  /** Seconds since the harness started. */
  clock(): number;
  rng: Rng;
  infra: Infra;
  daemons: Supervised[];
  service: Supervised;
  db: Db;
  nc: NatsConnection;
  ledger: DecisionLedger;
  watch: Watch;
  loadStart: number;
  loadEnd: number;
  /** Stop creating jobs (the job maker waits); {@link ScenarioContext.resumeLoad} goes on. */
  pauseLoad(): void;
  resumeLoad(): void;
  outages: Outage[];
  /** The faults injected, one phrase each, for the summary and the figures row. */
  faults: string[];
  /** Daemon SIGKILLs (each may swallow the last log lines of its process). */
  kills: number;
  figures: ScenarioFigures;
  /** Invariants of the scenario, checked with the common ones. */
  invariants: Invariant[];
  /** Environment for running the CLI against the run's servers (e.g. `inbox replay`). */
  cliEnv: NodeJS.ProcessEnv;
  /** The CLI script. */
  cli: string;
  track(p: Promise<unknown>): void;
}

/** One scenario. */
export interface Scenario {
  name: string;
  /** One line: the fault and what must hold. */
  summary: string;
  infra: InfraKind;
  /** Seconds of load: short (`--short`) and long (default). */
  seconds: { short: number; long: number };
  /** REPLY_TIMEOUT_MS of the daemons, when the mixed run's does not suit. */
  replyTimeoutMs?: (short: boolean) => number;
  /** Extra daemon environment. */
  daemonEnv?: Record<string, string>;
  faults(ctx: ScenarioContext): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/** Sleep until `at` (ms since the epoch), at once if it has passed. */
const sleepUntil = (at: number): Promise<void> => sleep(Math.max(0, at - Date.now()));
/** The instant at `share` of the load phase. */
const atShare = (ctx: ScenarioContext, share: number): number =>
  ctx.loadStart + (ctx.loadEnd - ctx.loadStart) * share;

/** Poll `probe` until it returns a value other than undefined (or `timeoutMs` passes: undefined). */
async function waitFor<T>(
  probe: () => Promise<T | undefined> | T | undefined,
  timeoutMs: number,
  everyMs = 100,
): Promise<T | undefined> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch {
      // not yet
    }
    if (Date.now() > deadline) return undefined;
    await sleep(everyMs);
  }
}

/** The window a fault at `t` shows in: from just before it to a minute after. */
const around = (t: number): { from: number; to: number } => ({ from: t - 2_000, to: t + 60_000 });

const secs = (ms: number | undefined): string => (ms === undefined ? '–' : `${(ms / 1000).toFixed(1)} s`);

/** One statement on its own connection. */
async function query<R extends pg.QueryResultRow>(url: string, text: string): Promise<R[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3_000 });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return (await client.query<R>(text)).rows;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * The recovery after a fault that ended at `from`: the first applied envelope after it and every
 * daemon ready again, whichever is later (ms after `from`), waited for up to 90 s.
 */
async function recovery(ctx: ScenarioContext, from: number): Promise<number | undefined> {
  const done = await waitFor(
    () => {
      const commit = ctx.watch.firstAppliedAfter(from);
      const green = ctx.watch.allGreenFrom(from);
      return commit !== undefined && green !== undefined ? Math.max(commit, green) : undefined;
    },
    90_000,
    250,
  );
  return done === undefined ? undefined : done - from;
}

/** The HAProxy UP event of `server` at or after `from`, waited for up to `timeoutMs`. */
function haproxyUp(p: PatroniClusterHandle, server: string, from: number, timeoutMs: number) {
  return waitFor(
    () => p.haproxy.events.find((e) => e.server === server && e.state === 'UP' && e.at >= from)?.at,
    timeoutMs,
  );
}

/**
 * The figures of a primary change at `faultAt` to `newLeader`: the write gap around it, the
 * core's share (from HAProxy routing to the new primary to the first applied envelope there),
 * the recovery; and the target (the core's share ≤ 2 s).
 */
async function primaryChangeFigures(ctx: ScenarioContext, faultAt: number, newLeader: string): Promise<void> {
  const p = ctx.infra.patroni!;
  const up = await haproxyUp(p, newLeader, faultAt, 60_000);
  const first = await waitFor(() => ctx.watch.firstAppliedAfter(up ?? faultAt), 60_000);
  ctx.figures.gapWindows.push(around(faultAt));
  if (up !== undefined && first !== undefined) {
    const share = Math.max(0, first - up);
    ctx.figures.coreShareMs = Math.max(ctx.figures.coreShareMs ?? 0, share);
    ctx.figures.notes.push(
      `primary change to ${newLeader}: HAProxy routed to it ${secs(up - faultAt)} after the fault; the core's first commit there ${secs(share)} later`,
    );
    ctx.figures.targets.push({
      name: `the core's share of the write gap ≤ 2 s (${newLeader})`,
      met: share <= 2_000,
      figures: `${secs(share)} from HAProxy routing to ${newLeader} to the first applied envelope`,
    });
  } else {
    ctx.figures.notes.push(`primary change to ${newLeader}: no HAProxy UP or no commit seen afterwards`);
  }
  const rec = await recovery(ctx, faultAt);
  ctx.figures.recoveryMs = Math.max(ctx.figures.recoveryMs ?? 0, rec ?? Infinity);
}

/** Inbox decisions counted so far: for "it kept working" checks. */
const appliedSoFar = (ctx: ScenarioContext): number => ctx.ledger.byDecision['applied'] ?? 0;

/** PID of the nats-server running with `configFile` (from /proc), if any. */
function natsServerPid(configFile: string): number | undefined {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmd = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (cmd.includes(configFile) && cmd.some((c) => c.endsWith('nats-server'))) return Number(entry);
    } catch {
      // gone
    }
  }
  return undefined;
}

/** Run the CLI with `args`; resolves with its exit code and output. */
function runCli(
  ctx: ScenarioContext,
  args: string[],
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [ctx.cli, ...args], {
      env: ctx.cliEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

// ---------------------------------------------------------------------------------------------
// The scenarios
// ---------------------------------------------------------------------------------------------

/** Killing the primary's machine (its Patroni and its PostgreSQL); Patroni promotes the sync standby. */
const failover: Scenario = {
  name: 'failover',
  summary:
    'SIGKILL the primary (its Patroni and PostgreSQL) under load; the synchronous standby is promoted, HAProxy follows; the old primary rejoins',
  infra: 'patroni-sync',
  seconds: { short: 45, long: 180 },
  // Reply deadlines longer than a failover, as in production: the fault must not turn into timeouts.
  replyTimeoutMs: () => 30_000,
  async faults(ctx) {
    const p = ctx.infra.patroni!;
    const rounds = ctx.short ? 1 : 2;
    for (let round = 0; round < rounds; round++) {
      await sleepUntil(atShare(ctx, round === 0 ? 0.3 : 0.65));
      const old = await p.waitHealthy(60_000);
      const from = ctx.clock();
      const faultAt = Date.now();
      await p.killMember(old);
      ctx.faults.push(`SIGKILL primary ${old}`);
      ctx.say(`SIGKILL the primary ${old} (Patroni and PostgreSQL)`);
      const leader = await waitFor(async () => {
        const l = await p.leader();
        return l !== undefined && l !== old ? l : undefined;
      }, 60_000);
      if (!leader) throw new Error('no new primary within 60 s of killing the old one');
      ctx.say(`${leader} is the primary (${secs(Date.now() - faultAt)} after the kill)`);
      ctx.outages.push({ what: `PostgreSQL primary ${old}`, from, to: ctx.clock() });
      await primaryChangeFigures(ctx, faultAt, leader);
      await p.startMember(old);
      ctx.say(`${old} started again: it rejoins as a standby`);
      await p.waitHealthy(120_000);
      ctx.say(`cluster healthy again (${old} replicates from ${leader})`);
    }
  },
};

/** A planned switchover; the old primary comes back as a standby (read-only). */
const switchover: Scenario = {
  name: 'switchover',
  summary:
    '`patronictl switchover` under load; the old primary comes back as a read-only standby; 0 envelopes quarantined',
  infra: 'patroni-sync',
  seconds: { short: 40, long: 180 },
  replyTimeoutMs: () => 30_000,
  async faults(ctx) {
    const p = ctx.infra.patroni!;
    const rounds = ctx.short ? 1 : 2;
    for (let round = 0; round < rounds; round++) {
      await sleepUntil(atShare(ctx, round === 0 ? 0.3 : 0.65));
      const old = await p.waitHealthy(60_000);
      const candidate = p.members.find((m) => m.name !== old && m.isRunning())!.name;
      const from = ctx.clock();
      const faultAt = Date.now();
      ctx.say(`patronictl switchover ${old} → ${candidate}`);
      await p.patronictl(['switchover', '--leader', old, '--candidate', candidate, '--force']);
      ctx.faults.push(`switchover ${old} → ${candidate}`);
      await primaryChangeFigures(ctx, faultAt, candidate);
      await p.waitHealthy(120_000);
      ctx.outages.push({ what: `switchover ${old} → ${candidate}`, from, to: ctx.clock() });
      ctx.say(`switchover done: ${candidate} primary, ${old} a standby`);
    }
  },
};

/**
 * Asynchronous replication loses the last commits when the primary dies: the standby is cut off
 * (the primary's walsender frozen with SIGSTOP) while results are applied, then the primary is
 * killed and the standby promoted. The results acked in between are gone from the database, not
 * from the stream: `inbox replay --since` applies each of them once.
 */
const asyncLoss: Scenario = {
  name: 'async-loss',
  summary:
    'asynchronous replication: results committed on the primary but not replicated are lost at a failover; `inbox replay --since` applies each once',
  infra: 'patroni-async',
  seconds: { short: 40, long: 150 },
  // Deadlines far enough that no job times out between the loss and the replay.
  replyTimeoutMs: () => 60_000,
  async faults(ctx) {
    const p = ctx.infra.patroni!;
    await sleepUntil(atShare(ctx, 0.35));
    const old = await p.waitHealthy(60_000);
    const primary = p.members.find((m) => m.name === old)!;
    const standby = p.members.find((m) => m.name !== old)!;
    // 1. Jobs waiting for their results: the reference service frozen while jobs keep coming.
    const servicePid = ctx.service.pid!;
    process.kill(servicePid, 'SIGSTOP');
    ctx.say(`${ctx.service.name} frozen (SIGSTOP): its jobs wait for their results`);
    await sleep(ctx.short ? 4_000 : 8_000);
    // 2. No job row may be lost (the harness would not know it): stop creating jobs, let every
    //    job be published, and let the standby replay all of it.
    ctx.pauseLoad();
    await waitFor(async () => {
      const r = await sql<{
        n: string;
      }>`SELECT count(*) AS n FROM recognition_job WHERE status = 'pending'`.execute(ctx.db.db);
      return Number(r.rows[0]!.n) === 0 ? true : undefined;
    }, 30_000);
    const [current] = await query<{ lsn: string }>(primary.url(), 'SELECT pg_current_wal_lsn()::text AS lsn');
    const lsn = current!.lsn;
    await waitFor(async () => {
      const [r] = await query<{ ok: boolean }>(
        standby.url(),
        `SELECT pg_last_wal_replay_lsn() >= '${lsn}'::pg_lsn AS ok`,
      );
      return r?.ok ? true : undefined;
    }, 30_000);
    // 3. Cut the standby off: freeze the primary's walsenders. Commits go on (asynchronous), and
    //    the waiting jobs' results arrive.
    const senders = await query<{ pid: number }>(primary.url(), 'SELECT pid FROM pg_stat_replication');
    const replayFrom = new Date(Date.now() - 2_000);
    const lossFrom = Date.now();
    for (const s of senders) process.kill(s.pid, 'SIGSTOP');
    process.kill(servicePid, 'SIGCONT');
    ctx.say(
      `walsender(s) ${senders.map((s) => s.pid).join(', ')} of ${old} frozen: ${standby.name} receives nothing more; ${ctx.service.name} thawed`,
    );
    const appliedBefore = appliedSoFar(ctx);
    // The burst of results for the waiting jobs is applied within a second or two: wait until it
    // has been, so the failover loses it all (and the write gap is the failover's, not a wait's).
    let seen = appliedBefore;
    let quietSince = Date.now();
    await waitFor(
      () => {
        if (appliedSoFar(ctx) !== seen) {
          seen = appliedSoFar(ctx);
          quietSince = Date.now();
        }
        return seen > appliedBefore && Date.now() - quietSince >= 500 ? true : undefined;
      },
      10_000,
      50,
    );
    // 4. The primary dies; the standby is promoted without the last commits. Jobs may be created
    //    again: they reach the new primary.
    const faultAt = Date.now();
    const from = ctx.clock();
    await p.killMember(old);
    ctx.resumeLoad();
    ctx.faults.push(`replication to ${standby.name} cut, SIGKILL primary ${old} (async)`);
    ctx.say(
      `SIGKILL the primary ${old}, ${appliedSoFar(ctx) - appliedBefore} envelopes applied since the cut`,
    );
    const leader = await waitFor(async () => {
      const l = await p.leader();
      return l !== undefined && l !== old ? l : undefined;
    }, 90_000);
    if (!leader) throw new Error('no new primary within 90 s of killing the old one');
    ctx.outages.push({ what: `PostgreSQL primary ${old}`, from, to: ctx.clock() });
    await haproxyUp(p, leader, faultAt, 30_000);
    // 5. What the database lost: envelopes the inboxes logged as applied, missing now.
    const lost = await lostEnvelopes(ctx, lossFrom);
    ctx.figures.lostBeforeRepair = lost.length;
    ctx.say(`${leader} promoted: ${lost.length} applied envelopes are missing from the database`);
    // 6. The repair, while the daemons go on.
    const replay = await runCli(ctx, ['inbox', 'replay', '--since', replayFrom.toISOString()]);
    ctx.say(`inbox replay --since ${replayFrom.toISOString()}: exit ${replay.code}: ${replay.stderr.trim()}`);
    ctx.figures.notes.push(`inbox replay: ${replay.stderr.trim().split('\n').pop() ?? ''}`);
    // An ack the replay finds after its job's result (stream order; the instances had applied
    // them the other way round) changes nothing: the job has its result, which is what the ack
    // would have led to.
    const still = (await lostEnvelopes(ctx, lossFrom)).filter((l) => !l.superseded);
    const doubled = await doubledEnvelopes(ctx.db);
    ctx.invariants.push({
      name: 'async-loss: every lost envelope applied once after the replay',
      ok: lost.length > 0 && replay.code === 0 && still.length === 0 && doubled.length === 0,
      figures: `${lost.length} applied envelopes lost with the primary (${lost.filter((l) => l.result).length} results, ${lost.filter((l) => !l.result).length} acks); after the replay ${still.length} missing (acks whose job has its result since count as applied), ${doubled.length} applied twice; replay exit ${replay.code}`,
      notes: [...still.slice(0, 5).map((l) => `still missing: ${l.key}`), ...doubled.slice(0, 5)],
    });
    await primaryChangeFigures(ctx, faultAt, leader);
    await p.startMember(old);
    ctx.say(`${old} started again: it rewinds and rejoins as a standby`);
    await p.waitHealthy(120_000);
  },
};

/** Envelopes the inboxes logged as applied after `since` whose transition the database lacks. */
async function lostEnvelopes(
  ctx: ScenarioContext,
  since: number,
): Promise<Array<{ key: string; result: boolean; superseded: boolean }>> {
  const applied = ctx.ledger.applied.filter((a) => a.at >= since);
  if (applied.length === 0) return [];
  const rows = await waitFor(
    () =>
      ctx.db.db
        .selectFrom('recognition_job_transition')
        .select(['job_id', 'msg_id', 'event'])
        .where('event', 'like', 'ENVELOPE_%')
        .where(
          'job_id',
          'in',
          applied.map((a) => a.jobId),
        )
        .execute(),
    60_000,
    500,
  );
  const have = new Set((rows ?? []).map((r) => `${r.job_id}|${r.msg_id ?? ''}`));
  const withResult = new Set((rows ?? []).filter((r) => r.event === 'ENVELOPE_RESULT').map((r) => r.job_id));
  return applied
    .filter((a) => !have.has(a.key))
    .map((a) => ({ key: a.key, result: a.result, superseded: !a.result && withResult.has(a.jobId) }));
}

/** (job, msg id) pairs with more than one envelope transition: applied twice. */
export async function doubledEnvelopes(db: Db): Promise<string[]> {
  const r = await sql<{ job_id: string; msg_id: string; n: string }>`
    SELECT job_id, msg_id, count(*) AS n FROM recognition_job_transition
    WHERE event LIKE 'ENVELOPE_%' AND msg_id IS NOT NULL
    GROUP BY job_id, msg_id HAVING count(*) > 1`.execute(db.db);
  return r.rows.map((x) => `${x.job_id}|${x.msg_id}: ${x.n} transitions`);
}

/** Commits hang (a synchronous standby that does not exist) for a while, then are released. */
const hungCommits: Scenario = {
  name: 'hung-commits',
  summary:
    "commits hang ~25 s (synchronous_standby_names names a standby that does not exist): every daemon's /readyz red within 30 s, green after the release, all applied once",
  infra: 'pg',
  seconds: { short: 45, long: 120 },
  async faults(ctx) {
    const admin = ctx.infra.pg!.url('postgres');
    await sleepUntil(atShare(ctx, 0.3));
    const hangFrom = Date.now();
    const from = ctx.clock();
    await query(admin, "ALTER SYSTEM SET synchronous_standby_names = 'nonexistent'");
    await query(admin, 'SELECT pg_reload_conf()');
    ctx.say('commits hang: synchronous_standby_names = nonexistent');
    const holdMs = 25_000;
    await sleep(holdMs);
    await query(admin, 'ALTER SYSTEM RESET synchronous_standby_names');
    await query(admin, 'SELECT pg_reload_conf()');
    const releasedAt = Date.now();
    ctx.say('commits released');
    ctx.faults.push(`commits hung ${secs(releasedAt - hangFrom)}`);
    ctx.outages.push({ what: 'commits hung', from, to: ctx.clock() });
    ctx.figures.gapWindows.push(around(hangFrom));
    const green = await waitFor(() => ctx.watch.allGreenFrom(releasedAt), 60_000, 250);
    ctx.figures.recoveryMs = await recovery(ctx, releasedAt);
    const reds = ctx.daemons.map((d) => ({
      d: d.name,
      at: ctx.watch.firstRed(d.name, hangFrom, releasedAt),
    }));
    ctx.invariants.push({
      name: "hung-commits: every daemon's /readyz red within 30 s, green again after the release",
      ok: reds.every((r) => r.at !== undefined && r.at - hangFrom <= 30_000) && green !== undefined,
      figures: `red after ${reds.map((r) => (r.at === undefined ? 'never' : secs(r.at - hangFrom))).join(' / ')}; all green ${green === undefined ? 'never' : `${secs(green - releasedAt)} after the release`}`,
      notes: [],
    });
  },
};

/** nats-server stopped ~30 s, later frozen with SIGSTOP, while jobs fall due: none goes to dlq. */
const natsOutage: Scenario = {
  name: 'nats-outage',
  summary:
    'nats-server stopped ~30 s, later frozen (SIGSTOP) ~20 s, while jobs fall due: none in dlq afterwards, all applied once',
  infra: 'pg',
  seconds: { short: 90, long: 180 },
  async faults(ctx) {
    const nats = ctx.infra.natsNodes[0]!;
    await sleepUntil(atShare(ctx, 0.15));
    let from = ctx.clock();
    await nats.stop();
    const stoppedAt = Date.now();
    ctx.say('nats-server stopped (SIGTERM) for 30 s; jobs keep falling due');
    await sleep(30_000);
    await nats.restart();
    const backAt = Date.now();
    ctx.say('nats-server is back');
    ctx.faults.push(`nats-server stopped ${secs(backAt - stoppedAt)}`);
    ctx.outages.push({ what: 'NATS stopped', from, to: ctx.clock() });
    ctx.figures.gapWindows.push(around(stoppedAt));
    ctx.figures.recoveryMs = await recovery(ctx, backAt);
    await sleepUntil(atShare(ctx, 0.6));
    const pid = natsServerPid(nats.configFile);
    if (pid === undefined) throw new Error('nats-server has no process to freeze');
    from = ctx.clock();
    const frozenAt = Date.now();
    const freezeMs = ctx.short ? 15_000 : 20_000;
    process.kill(pid, 'SIGSTOP');
    ctx.say(`nats-server frozen (SIGSTOP) for ${freezeMs / 1000} s`);
    await sleep(freezeMs);
    process.kill(pid, 'SIGCONT');
    const thawedAt = Date.now();
    ctx.figures.gapWindows.push(around(frozenAt));
    ctx.say('nats-server thawed (SIGCONT)');
    ctx.faults.push(`nats-server frozen ${secs(thawedAt - frozenAt)}`);
    ctx.outages.push({ what: 'NATS frozen', from, to: ctx.clock() });
    const rec = await recovery(ctx, thawedAt);
    ctx.figures.recoveryMs = Math.max(ctx.figures.recoveryMs ?? 0, rec ?? Infinity);
  },
};

/** `core-inbox` deleted under load: the inbox provisions it again and goes on. */
const consumerLoss: Scenario = {
  name: 'consumer-loss',
  summary: '`core-inbox` deleted under load: back within 30 s, every envelope applied once',
  infra: 'pg',
  seconds: { short: 45, long: 120 },
  async faults(ctx) {
    await sleepUntil(atShare(ctx, 0.35));
    const jsm = await jetstreamManager(ctx.nc);
    const from = ctx.clock();
    const deletedAt = Date.now();
    await jsm.consumers.delete(RESULTS_STREAM, INBOX_CONSUMER);
    ctx.say('core-inbox deleted');
    ctx.faults.push('core-inbox deleted');
    const back = await waitFor(
      () => jsm.consumers.info(RESULTS_STREAM, INBOX_CONSUMER).then(() => Date.now()),
      60_000,
      250,
    );
    ctx.say(
      back === undefined
        ? 'core-inbox NOT back within 60 s'
        : `core-inbox back after ${secs(back - deletedAt)}`,
    );
    ctx.outages.push({ what: 'core-inbox deleted', from, to: ctx.clock() });
    ctx.figures.gapWindows.push(around(deletedAt));
    ctx.figures.recoveryMs =
      back === undefined
        ? undefined
        : await recovery(ctx, back).then((r) => (r ?? Infinity) + back - deletedAt);
    const appliedAtBack = appliedSoFar(ctx);
    const moving = await waitFor(() => (appliedSoFar(ctx) > appliedAtBack ? true : undefined), 30_000);
    ctx.invariants.push({
      name: 'consumer-loss: core-inbox back within 30 s, and the inbox applies again',
      ok: back !== undefined && back - deletedAt <= 30_000 && moving === true,
      figures: `back after ${back === undefined ? 'never' : secs(back - deletedAt)}; applying again: ${moving ? 'yes' : 'no'}`,
      notes: [],
    });
  },
};

/** Instances replaced one at a time with SIGTERM (a rolling deploy) while results arrive. */
const rolling: Scenario = {
  name: 'rolling',
  summary: 'daemons replaced one at a time with SIGTERM (a rolling deploy) while results arrive',
  infra: 'pg',
  seconds: { short: 40, long: 150 },
  async faults(ctx) {
    await sleepUntil(atShare(ctx, 0.1));
    const stops: Array<{ name: string; code: number | null; forced: boolean; ms: number }> = [];
    let i = 0;
    while (Date.now() < ctx.loadEnd - 5_000) {
      const d = ctx.daemons[i++ % ctx.daemons.length]!;
      const t0 = Date.now();
      const exit = await d.stop(30_000);
      stops.push({ name: d.name, code: exit.code, forced: exit.forced, ms: exit.ms });
      ctx.say(
        `SIGTERM ${d.name}: exit ${exit.forced ? 'forced' : exit.code} after ${secs(exit.ms)}; starting its replacement`,
      );
      d.start();
      if (!(await d.waitStarted(60_000))) throw new Error(`${d.name}'s replacement did not start`);
      // Recovery: from the SIGTERM to every instance, the replacement included, ready.
      const startedAt = Date.now();
      const ready = await waitFor(() => ctx.watch.allGreenFrom(startedAt), 30_000, 250);
      ctx.figures.recoveryMs = Math.max(ctx.figures.recoveryMs ?? 0, (ready ?? Infinity) - t0);
      await sleep(ctx.rng.int(2_000, 4_000));
    }
    const longest = Math.max(0, ...stops.map((s) => s.ms));
    ctx.faults.push(`${stops.length} SIGTERM replacements`);
    ctx.figures.notes.push(
      `SIGTERM to exit: longest ${secs(longest)}, all ${stops.map((s) => secs(s.ms)).join(', ')}`,
    );
    ctx.invariants.push({
      name: 'rolling: every replaced instance exits 0 on SIGTERM, within its stop timeout',
      ok: stops.length >= 3 && stops.every((s) => s.code === 0 && !s.forced),
      figures: `${stops.length} replacements; exits ${[...new Set(stops.map((s) => (s.forced ? 'forced' : String(s.code))))].join('/')}; longest stop ${secs(longest)}`,
      notes: stops
        .filter((s) => s.code !== 0 || s.forced)
        .map((s) => `${s.name}: ${s.forced ? 'forced' : s.code}`),
    });
  },
};

/** PostgreSQL behind a slow link: a delay each way, with a spike. */
const slowDb: Scenario = {
  name: 'slow-db',
  summary: 'the link to PostgreSQL slowed down (25 ms each way, a spike of 250 ms) while results arrive',
  infra: 'pg-slow',
  seconds: { short: 40, long: 150 },
  async faults(ctx) {
    const proxy = ctx.infra.delay!;
    await sleepUntil(atShare(ctx, 0.2));
    let from = ctx.clock();
    proxy.setDelay(25);
    ctx.say('PostgreSQL link: +25 ms each way');
    await sleepUntil(atShare(ctx, 0.45));
    proxy.setDelay(250);
    const spikeAt = Date.now();
    ctx.say('PostgreSQL link: +250 ms each way');
    await sleepUntil(atShare(ctx, 0.6));
    proxy.setDelay(25);
    const spikeEnd = Date.now();
    ctx.say('PostgreSQL link: +25 ms each way');
    await sleepUntil(atShare(ctx, 0.8));
    proxy.setDelay(0);
    ctx.say('PostgreSQL link: no delay');
    ctx.outages.push({ what: 'slow PostgreSQL', from, to: ctx.clock() });
    from = ctx.clock();
    ctx.faults.push(`+25 ms each way, a ${secs(spikeEnd - spikeAt)} spike of +250 ms`);
    ctx.figures.recoveryMs = await recovery(ctx, spikeEnd);
  },
};

/** The three-node JetStream cluster: each node restarted in turn. */
const natsRoll: Scenario = {
  name: 'nats-roll',
  summary: 'the 3-node JetStream cluster (R3 streams): each node stopped and restarted in turn under load',
  infra: 'nats-cluster',
  seconds: { short: 60, long: 150 },
  async faults(ctx) {
    const jsm = await jetstreamManager(ctx.nc);
    await sleepUntil(atShare(ctx, 0.1));
    let n = 0;
    for (const node of ctx.infra.natsNodes) {
      if (Date.now() > ctx.loadEnd - 10_000) break;
      const from = ctx.clock();
      await node.stop();
      ctx.say(`NATS node ${node.serverName} stopped (SIGTERM)`);
      await sleep(ctx.rng.int(2_000, 4_000));
      await node.restart();
      const restartedAt = Date.now();
      n++;
      // Current again: every stream and the inbox's consumer have all three replicas caught up.
      const current = await waitFor(
        async () => {
          for (const s of [RESULTS_STREAM, JOBS_STREAM]) {
            const info = await jsm.streams.info(s);
            const replicas = info.cluster?.replicas ?? [];
            if (replicas.length < 2 || replicas.some((r) => !r.current)) return undefined;
          }
          return Date.now();
        },
        60_000,
        500,
      );
      ctx.say(
        `NATS node ${node.serverName} back; replicas current after ${secs((current ?? NaN) - restartedAt)}`,
      );
      ctx.outages.push({ what: `NATS node ${node.serverName}`, from, to: ctx.clock() });
      const rec = await recovery(ctx, restartedAt);
      ctx.figures.recoveryMs = Math.max(ctx.figures.recoveryMs ?? 0, rec ?? Infinity);
      await sleep(ctx.rng.int(3_000, 6_000));
    }
    ctx.faults.push(`${n} NATS nodes restarted in turn`);
  },
};

/** Every scenario by name. */
export const SCENARIOS: readonly Scenario[] = [
  failover,
  switchover,
  asyncLoss,
  hungCommits,
  natsOutage,
  consumerLoss,
  rolling,
  slowDb,
  natsRoll,
];
