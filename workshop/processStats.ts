/** A process's CPU time and resident memory, read from Linux's `/proc`. */
import { readFileSync } from 'node:fs';

/** CPU milliseconds (user + system) a process has used, all its threads, or null when /proc cannot be read. */
export function processCpuMs(pid: number): number | null {
  return statCpuMs(`/proc/${pid}/stat`);
}

/**
 * CPU milliseconds one thread of a process has used, or null when /proc cannot be read. A
 * process's main thread has the process's id: the rest of its CPU is its other threads' (V8's
 * background threads, libuv's pool).
 */
export function threadCpuMs(pid: number, tid: number): number | null {
  return statCpuMs(`/proc/${pid}/task/${tid}/stat`);
}

function statCpuMs(path: string): number | null {
  try {
    const stat = readFileSync(path, 'utf8');
    // Fields after the command name (which may contain spaces) start after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime, in clock ticks of 1/100 s (USER_HZ on Linux).
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return null;
  }
}

/** A process's resident set size, bytes, or null when /proc cannot be read. */
export function rssBytes(pid: number): number | null {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}
