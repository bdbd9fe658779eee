/**
 * Where the CPU goes: user + system CPU time of this process, of the PostgreSQL backends serving a
 * given pool (found by `application_name`), and of the bench's nats-server, read from
 * `/proc/<pid>/stat` (Linux; elsewhere the figures are reported as null). On a machine whose cores
 * are shared by all three, CPU per envelope says more than wall time about what each part costs,
 * and stays meaningful when other work competes for the cores.
 */
import { readFileSync, readdirSync } from 'node:fs';
import type pg from 'pg';

/** Clock ticks per second of /proc's utime/stime (USER_HZ: 100 on Linux). */
const TICKS_PER_SECOND = 100;

/** CPU milliseconds (user + system) a process has used, or null when it cannot be read. */
export function processCpuMs(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may contain spaces) start after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const utime = Number(fields[11]);
    const stime = Number(fields[12]);
    return ((utime + stime) * 1000) / TICKS_PER_SECOND;
  } catch {
    return null;
  }
}

/** Pid of the process whose command line contains `needle` (the nats-server's config file path). */
export function findPid(needle: string): number | null {
  try {
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        const cmd = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
        if (cmd.includes(needle)) return Number(entry);
      } catch {
        // gone meanwhile
      }
    }
  } catch {
    // no /proc
  }
  return null;
}

/** Pids of the backends connected to the current database under `applicationName`. */
export async function backendPids(pool: pg.Pool, applicationName: string): Promise<number[]> {
  const { rows } = await pool.query<{ pid: number }>(
    `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`,
    [applicationName],
  );
  return rows.map((r) => r.pid);
}

/** Sum of {@link processCpuMs} over `pids` (null if none could be read). */
export function totalCpuMs(pids: readonly number[]): number | null {
  let total: number | null = null;
  for (const pid of pids) {
    const ms = processCpuMs(pid);
    if (ms !== null) total = (total ?? 0) + ms;
  }
  return total;
}

/** CPU per envelope of each part of a run, in microseconds (null where unknown). */
export interface CpuSplit {
  nodeUs: number | null;
  postgresUs: number | null;
  natsUs: number | null;
}

/**
 * Start measuring: this process and nats-server now; the backends are new connections (opened by
 * the consumer's pool during the run), so their whole lifetime is the run's — read them with
 * `end(pids)` before the pool closes.
 */
export function startCpuSplit(natsPid: number | null): {
  end(backendPids: readonly number[], envelopes: number): CpuSplit;
} {
  const node0 = process.cpuUsage();
  const nats0 = natsPid === null ? null : processCpuMs(natsPid);
  return {
    end(pids, envelopes) {
      const node = process.cpuUsage(node0);
      const nats1 = natsPid === null ? null : processCpuMs(natsPid);
      const pgMs = totalCpuMs(pids);
      return {
        nodeUs: (node.user + node.system) / envelopes,
        postgresUs: pgMs === null ? null : (pgMs * 1000) / envelopes,
        natsUs: nats0 === null || nats1 === null ? null : ((nats1 - nats0) * 1000) / envelopes,
      };
    },
  };
}
