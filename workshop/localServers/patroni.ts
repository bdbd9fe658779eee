/**
 * A local highly available PostgreSQL for failover tests: two or three members run by Patroni, a
 * one-member etcd and HAProxy in front, which routes to the primary (so `pg`, one host per URL,
 * follows a failover). `scripts/ensure-patroni.sh` installs the binaries.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { chown, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import {
  createOutputTail,
  createTempDir,
  hasExited,
  isExecutable,
  spawnServer,
  stopChild,
} from './childProcesses.js';
import type { ServerChild } from './childProcesses.js';
import { startEtcd, type EtcdHandle } from './etcd.js';
import { freePort } from './freePort.js';
import { startHaproxy, type HaproxyHandle } from './haproxy.js';
import { MissingServerBinaryError } from './missingBinary.js';
import { alive, childPids, findPgBinDir, postgresUser } from './pgCluster.js';

/** Options of {@link startPatroniCluster}; every field is optional. */
export interface PatroniClusterOptions {
  /** Number of PostgreSQL members (2 or 3 make sense). Default 2. */
  members?: number;
  /**
   * Patroni's `synchronous_mode`: a commit returns once the synchronous standby has it, and only
   * that standby may be promoted, so a failover loses no acknowledged commit. Default true.
   */
  synchronousMode?: boolean;
  /** Leader key TTL (s): how long a dead primary holds the lock. Default 10. */
  ttl?: number;
  /** Patroni's loop wait (s). Default 1. */
  loopWait?: number;
  /** Patroni's retry timeout (s) for DCS and PostgreSQL operations. Default 4. */
  retryTimeout?: number;
  /** A standby further behind than this (bytes of WAL) is not promoted. Default Patroni's (1 MiB). */
  maximumLagOnFailover?: number;
  /** Extra PostgreSQL parameters, the same on every member (Patroni's DCS `parameters`). */
  parameters?: Record<string, string | number>;
}

/** One PostgreSQL member and its Patroni. */
export interface PatroniMember {
  readonly name: string;
  /** PostgreSQL port on 127.0.0.1. */
  readonly pgPort: number;
  /** Patroni REST API port on 127.0.0.1. */
  readonly restPort: number;
  readonly dataDir: string;
  /** Patroni's configuration file (also what `patronictl -c` takes). */
  readonly configFile: string;
  /** Whether its Patroni process is running. */
  isRunning(): boolean;
  /** PID of its postmaster (from `postmaster.pid`), if one is running. */
  postmasterPid(): number | undefined;
  /** `postgres://postgres@127.0.0.1:<pgPort>/<db>`: this member directly, not through HAProxy. */
  url(db?: string): string;
  /** The last ~64 KiB of its Patroni's output (PostgreSQL's log included). */
  output(): string;
}

/** A member as Patroni's `GET /cluster` reports it. */
export interface PatroniMemberState {
  name: string;
  /** `leader`, `sync_standby`, `replica`, … */
  role: string;
  /** `running`, `streaming`, `starting`, `stopped`, … */
  state: string;
  timeline?: number;
  lag?: number | string;
}

/** A running cluster started by {@link startPatroniCluster}. */
export interface PatroniClusterHandle {
  /** Patroni's `scope` (the cluster's name in etcd). */
  readonly scope: string;
  readonly members: readonly PatroniMember[];
  readonly etcd: EtcdHandle;
  readonly haproxy: HaproxyHandle;
  readonly synchronousMode: boolean;
  /** `postgres://postgres@127.0.0.1:<haproxy port>/<db>`: the primary, whichever member it is. */
  url(db?: string): string;
  /** The members as a running Patroni reports them (empty when none answers). */
  state(): Promise<PatroniMemberState[]>;
  /** The leader's name, when a running Patroni reports one whose PostgreSQL runs. */
  leader(): Promise<string | undefined>;
  /**
   * Resolves with the leader's name once there is a leader, every running member replicates from
   * it (running or streaming, same timeline), and, in synchronous mode, one is its synchronous
   * standby; rejects after `timeoutMs` with the members' state.
   */
  waitHealthy(timeoutMs: number): Promise<string>;
  /** SIGKILL a member's Patroni and its PostgreSQL (a machine that dies); resolves once both are gone. */
  killMember(name: string): Promise<void>;
  /** Start a member's Patroni again (it starts its PostgreSQL, rewinding or re-cloning it as needed). */
  startMember(name: string): Promise<void>;
  /** Run `patronictl -c <config> <args…>`; resolves with its output, rejects when it fails. */
  patronictl(args: string[]): Promise<string>;
  /** Stop everything gracefully (Patroni stops its PostgreSQL). */
  stop(): Promise<void>;
  /** {@link PatroniClusterHandle.stop}, then remove every temporary directory. */
  cleanup(): Promise<void>;
}

/** `$PATRONI_BIN`, else `/usr/bin/patroni`; throws {@link MissingServerBinaryError} when neither is there. */
export function findPatroniBinary(): string {
  const fromEnv = process.env['PATRONI_BIN'];
  if (fromEnv && isExecutable(fromEnv)) return fromEnv;
  if (isExecutable('/usr/bin/patroni')) return '/usr/bin/patroni';
  throw new MissingServerBinaryError('patroni', 'patroni', 'set PATRONI_BIN');
}

function patronictlBinary(patroni: string): string {
  const ctl = join(patroni, '..', 'patronictl');
  return isExecutable(ctl) ? ctl : 'patronictl';
}

/** `GET http://127.0.0.1:<port><path>`: status and JSON body, or undefined when nothing answers. */
async function rest(port: number, path: string): Promise<{ status: number; body: unknown } | undefined> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}${path}`, { signal: AbortSignal.timeout(2_000) });
    const text = await res.text();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      // not JSON
    }
    return { status: res.status, body };
  } catch {
    return undefined;
  }
}

function memberConfig(o: {
  scope: string;
  name: string;
  dir: string;
  pgPort: number;
  restPort: number;
  etcd: string;
  binDir: string;
  dcs: Record<string, unknown>;
}): Record<string, unknown> {
  const hba = [
    'local all all trust',
    'host all all 127.0.0.1/32 trust',
    'host replication all 127.0.0.1/32 trust',
  ];
  return {
    scope: o.scope,
    name: o.name,
    log: { level: 'INFO' },
    restapi: { listen: `127.0.0.1:${o.restPort}`, connect_address: `127.0.0.1:${o.restPort}` },
    etcd3: { hosts: o.etcd },
    bootstrap: {
      dcs: o.dcs,
      initdb: [{ encoding: 'UTF8' }, { locale: 'C' }, { auth: 'trust' }],
      pg_hba: hba,
    },
    postgresql: {
      listen: `127.0.0.1:${o.pgPort}`,
      connect_address: `127.0.0.1:${o.pgPort}`,
      data_dir: join(o.dir, 'data'),
      bin_dir: o.binDir,
      pgpass: join(o.dir, 'pgpass'),
      authentication: {
        superuser: { username: 'postgres' },
        replication: { username: 'postgres' },
        rewind: { username: 'postgres' },
      },
      // Only what differs per member; synchronous_standby_names is Patroni's to set (a standby
      // cloned with pg_basebackup would otherwise inherit the primary's).
      parameters: { unix_socket_directories: o.dir },
      pg_hba: hba,
    },
    watchdog: { mode: 'off' },
    tags: { nofailover: false, noloadbalance: false, clonefrom: false, nosync: false },
  };
}

/**
 * Starts etcd, then the first member (it runs initdb and becomes the leader), then the others (each
 * cloned with pg_basebackup), then HAProxy in front of them, and resolves once the cluster is
 * healthy ({@link PatroniClusterHandle.waitHealthy}).
 *
 * Contract:
 * - Everything listens on free 127.0.0.1 ports; every directory is a fresh temporary one, removed
 *   by `cleanup()` or when this process exits. When this process is root, Patroni (and so
 *   PostgreSQL) runs as the `postgres` OS user in directories it owns.
 * - Authentication is `trust` on loopback (superuser, replication and rewind as `postgres`).
 * - DCS settings: `ttl`, `loop_wait`, `retry_timeout`, `synchronous_mode`, `use_pg_rewind`,
 *   `use_slots`, and parameters `max_connections=150`, `wal_log_hints=on` (pg_rewind),
 *   `track_commit_timestamp=on` (commit times can be read back), `fsync=off` (a killed member
 *   loses nothing the OS holds), plus `opts.parameters`.
 * - A failed start stops what was started and rejects with the outputs.
 */
export async function startPatroniCluster(opts: PatroniClusterOptions = {}): Promise<PatroniClusterHandle> {
  const patroni = findPatroniBinary();
  const binDir = findPgBinDir();
  const n = opts.members ?? 2;
  const synchronousMode = opts.synchronousMode ?? true;
  const asUser = typeof process.getuid === 'function' && process.getuid() === 0 ? postgresUser() : undefined;
  if (typeof process.getuid === 'function' && process.getuid() === 0 && !asUser)
    throw new Error('startPatroniCluster: running as root but there is no postgres OS user');
  const ids = asUser ? { uid: asUser.uid, gid: asUser.gid } : {};
  const scope = `chaos-${Math.random().toString(36).slice(2, 8)}`;
  const dcs = {
    ttl: opts.ttl ?? 10,
    loop_wait: opts.loopWait ?? 1,
    retry_timeout: opts.retryTimeout ?? 4,
    ...(opts.maximumLagOnFailover !== undefined
      ? { maximum_lag_on_failover: opts.maximumLagOnFailover }
      : {}),
    synchronous_mode: synchronousMode,
    postgresql: {
      use_pg_rewind: true,
      use_slots: true,
      remove_data_directory_on_rewind_failure: true,
      remove_data_directory_on_diverged_timelines: true,
      parameters: {
        max_connections: 150,
        wal_level: 'replica',
        hot_standby: 'on',
        max_wal_senders: 10,
        max_replication_slots: 10,
        wal_keep_size: '256MB',
        wal_log_hints: 'on',
        track_commit_timestamp: 'on',
        fsync: 'off',
        ...opts.parameters,
      },
    },
  };

  const etcd = await startEtcd();
  const root = await createTempDir('patroni-');
  if (asUser) await chown(root.path, asUser.uid, asUser.gid);
  const members: Array<
    PatroniMember & { start(): void; kill(): Promise<void>; stopGracefully(): Promise<void> }
  > = [];
  let haproxy: HaproxyHandle | undefined;

  for (let i = 0; i < n; i++) {
    const name = `m${i}`;
    const dir = join(root.path, name);
    await mkdir(dir, { mode: 0o700 });
    if (asUser) await chown(dir, asUser.uid, asUser.gid);
    const [pgPort, restPort] = [await freePort(), await freePort()];
    const configFile = join(dir, 'patroni.yml');
    // JSON is YAML.
    await writeFile(
      configFile,
      JSON.stringify(
        memberConfig({ scope, name, dir, pgPort, restPort, etcd: etcd.hostPort, binDir, dcs }),
        null,
        2,
      ),
    );
    if (asUser) await chown(configFile, asUser.uid, asUser.gid);
    const output = createOutputTail();
    let child: ServerChild | undefined;
    const dataDir = join(dir, 'data');
    const postmasterPid = (): number | undefined => {
      try {
        const pid = Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
        return Number.isInteger(pid) && pid > 0 && alive(pid) ? pid : undefined;
      } catch {
        return undefined;
      }
    };
    members.push({
      name,
      pgPort,
      restPort,
      dataDir,
      configFile,
      isRunning: () => child !== undefined && !hasExited(child.proc),
      postmasterPid,
      url: (db = 'postgres') => `postgres://postgres@127.0.0.1:${pgPort}/${db}`,
      output: output.text,
      start() {
        if (child && !hasExited(child.proc)) return;
        child = spawnServer(patroni, [configFile], { ...ids, cwd: dir, onOutput: output.append });
      },
      async kill() {
        const pm = postmasterPid();
        const backends = pm ? childPids(pm) : [];
        await stopChild(child?.proc, 'SIGKILL', 10_000);
        for (const pid of [pm, ...backends]) {
          if (pid === undefined) continue;
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            // gone already
          }
        }
        const deadline = Date.now() + 10_000;
        while ([pm, ...backends].some((p) => p !== undefined && alive(p)) && Date.now() < deadline)
          await sleep(50);
      },
      async stopGracefully() {
        // Patroni stops its PostgreSQL (fast shutdown) on SIGTERM.
        await stopChild(child?.proc, 'SIGTERM', 60_000);
        const pm = postmasterPid();
        if (pm !== undefined) {
          try {
            process.kill(pm, 'SIGKILL');
          } catch {
            // gone
          }
        }
      },
    });
  }

  const ctl = patronictlBinary(patroni);
  const handle: PatroniClusterHandle = {
    scope,
    members,
    etcd,
    get haproxy(): HaproxyHandle {
      if (!haproxy) throw new Error('HAProxy is not started yet');
      return haproxy;
    },
    synchronousMode,
    url: (db = 'postgres') => `postgres://postgres@127.0.0.1:${handle.haproxy.port}/${db}`,
    async state() {
      for (const m of members) {
        if (!m.isRunning()) continue;
        const r = await rest(m.restPort, '/cluster');
        const list = (r?.body as { members?: PatroniMemberState[] } | undefined)?.members;
        if (r?.status === 200 && Array.isArray(list)) return list;
      }
      return [];
    },
    async leader() {
      for (const m of members) {
        if (!m.isRunning()) continue;
        const r = await rest(m.restPort, '/primary');
        if (r?.status === 200) return m.name;
      }
      return undefined;
    },
    async waitHealthy(timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      let last: PatroniMemberState[] = [];
      for (;;) {
        last = await handle.state();
        const leader = await handle.leader();
        const running = members.filter((m) => m.isRunning()).map((m) => m.name);
        const lead = last.find((s) => s.name === leader);
        const standbys = last.filter((s) => s.name !== leader && running.includes(s.name));
        const ok =
          leader !== undefined &&
          lead !== undefined &&
          standbys.length === running.length - 1 &&
          standbys.every(
            (s) =>
              (s.state === 'running' || s.state === 'streaming') &&
              (lead.timeline === undefined || s.timeline === lead.timeline),
          ) &&
          (!synchronousMode || standbys.length === 0 || standbys.some((s) => s.role === 'sync_standby'));
        if (ok) return leader;
        if (Date.now() > deadline)
          throw new Error(
            `the Patroni cluster did not become healthy within ${timeoutMs / 1000} s: ${JSON.stringify(last)}`,
          );
        await sleep(250);
      }
    },
    async killMember(name) {
      await memberNamed(name).kill();
    },
    async startMember(name) {
      memberNamed(name).start();
    },
    patronictl(args) {
      return new Promise((resolve, reject) => {
        execFile(
          ctl,
          ['-c', members[0]!.configFile, ...args],
          { encoding: 'utf8', timeout: 120_000 },
          (err, stdout, stderr) => {
            if (err)
              reject(new Error(`patronictl ${args.join(' ')} failed: ${err.message}\n${stdout}${stderr}`));
            else resolve(stdout + stderr);
          },
        );
      });
    },
    async stop() {
      await haproxy?.stop();
      // Standbys first, so the primary's shutdown does not wait on them.
      const leader = await handle.leader().catch(() => undefined);
      await Promise.all(members.filter((m) => m.name !== leader).map((m) => m.stopGracefully()));
      await Promise.all(members.filter((m) => m.name === leader).map((m) => m.stopGracefully()));
      await etcd.stop();
    },
    async cleanup() {
      await handle.stop();
      await haproxy?.cleanup();
      await etcd.cleanup();
      await root.remove();
    },
  };
  function memberNamed(name: string) {
    const m = members.find((x) => x.name === name);
    if (!m) throw new Error(`no member ${name} (members: ${members.map((x) => x.name).join(', ')})`);
    return m;
  }

  try {
    members[0]!.start();
    const deadline = Date.now() + 60_000;
    while ((await handle.leader()) !== members[0]!.name) {
      if (!members[0]!.isRunning() || Date.now() > deadline)
        throw new Error(`the first Patroni member did not become the leader:\n${members[0]!.output()}`);
      await sleep(250);
    }
    for (const m of members.slice(1)) m.start();
    haproxy = await startHaproxy({
      backends: members.map((m) => ({ name: m.name, pgPort: m.pgPort, restPort: m.restPort })),
    });
    await handle.waitHealthy(90_000);
  } catch (err) {
    const logs = members.map((m) => `--- ${m.name} ---\n${m.output().slice(-4_000)}`).join('\n');
    await handle.cleanup().catch(() => undefined);
    throw new Error(`${err instanceof Error ? err.message : String(err)}\n${logs}`, { cause: err });
  }
  return handle;
}
