/**
 * The operator console's pure parts: the token file, session cookies, the proxy header, the CSRF
 * and origin checks, and the actions a job offers as the machine says.
 */
import { describe, expect, it } from 'vitest';
import { FAILED_JOB_STATUSES, JOB_STATUSES } from '../../machines/index.js';
import {
  CONSOLE_ACTIONS,
  createSessions,
  csrfMatches,
  identify,
  matchToken,
  parseCookies,
  parseTokenFile,
  sameOrigin,
  sessionCookie,
} from '../../src/console/identity.js';
import { jobActions, retryableStatuses } from '../../src/console/jobActions.js';
import { readMachineGraph } from '../../src/statecharts/machineGraph.js';

const TOKEN_A = 'alice-token-0123456789';
const TOKEN_B = 'bob-token-0123456789abc';

describe('the token file', () => {
  it('reads name:token and name:token:actions lines, skipping blanks and comments', () => {
    const entries = parseTokenFile(`# operators\n\nalice:${TOKEN_A}\r\nbob:${TOKEN_B}:replay, purge\n`);
    expect(entries.map((e) => [e.name, e.actions])).toEqual([
      ['alice', CONSOLE_ACTIONS],
      ['bob', ['replay', 'purge']],
    ]);
    expect(matchToken(entries, TOKEN_B)?.name).toBe('bob');
    expect(matchToken(entries, TOKEN_A)?.name).toBe('alice');
    expect(matchToken(entries, 'alice-token-01234567890')).toBeUndefined();
    expect(matchToken(entries, '')).toBeUndefined();
  });

  it('refuses a malformed line naming its number, never its token', () => {
    const bad = [
      ['nocolon', /line 1 .*name:token/],
      [`al ice:${TOKEN_A}`, /line 1 .*name/],
      ['alice:short', /line 1 .*16 characters/],
      [`alice:${TOKEN_A}:delete`, /unknown action "delete"/],
      [`alice:${TOKEN_A}\nalice:${TOKEN_B}`, /line 2 .*alice is named twice/],
      [`alice:${TOKEN_A}:retry:x`, /line 1/],
    ] as const;
    for (const [text, message] of bad) {
      expect(() => parseTokenFile(text), text).toThrow(message);
      try {
        parseTokenFile(text);
      } catch (err) {
        expect((err as Error).message).not.toContain(TOKEN_A);
        expect((err as Error).message).not.toContain(TOKEN_B);
      }
    }
  });
});

describe('session cookies', () => {
  const sessions = createSessions(60_000, Buffer.alloc(32, 7));

  it('carry the name and actions, signed, until they expire', () => {
    const value = sessions.issue({ name: 'bob', actions: ['replay'] }, 1_000);
    const who = sessions.read(value, 2_000);
    expect(who).toMatchObject({ name: 'bob', actions: ['replay'], via: 'token' });
    expect(who!.csrf).toMatch(/^[A-Za-z0-9_-]{43}$/);
    // The same session, the same CSRF token; another session, another.
    expect(sessions.read(value, 3_000)!.csrf).toBe(who!.csrf);
    expect(sessions.read(sessions.issue({ name: 'bob', actions: [] }, 1_000), 2_000)!.csrf).not.toBe(
      who!.csrf,
    );
    expect(sessions.read(value, 61_000)).toBeUndefined();
  });

  it('refuse a changed payload, a changed signature, another key and garbage', () => {
    const value = sessions.issue({ name: 'bob', actions: ['replay'] }, 1_000);
    const [payload, mac] = value.split('.') as [string, string];
    const forged = Buffer.from(
      JSON.stringify({ ...JSON.parse(Buffer.from(payload, 'base64url').toString()), a: CONSOLE_ACTIONS }),
    ).toString('base64url');
    expect(sessions.read(`${forged}.${mac}`, 2_000)).toBeUndefined();
    expect(sessions.read(`${payload}.${mac.slice(0, -2)}AA`, 2_000)).toBeUndefined();
    expect(createSessions(60_000, Buffer.alloc(32, 8)).read(value, 2_000)).toBeUndefined();
    for (const junk of ['', '.', 'a.b.c', 'abc', `${payload}.`])
      expect(sessions.read(junk, 2_000)).toBeUndefined();
  });

  it('are set HttpOnly, SameSite=Strict, Path=/ and expiring, and removed the same way', () => {
    expect(sessionCookie('v', 3_600_000)).toBe(
      'rc_console=v; HttpOnly; SameSite=Strict; Path=/; Max-Age=3600',
    );
    expect(sessionCookie(null, 0)).toBe('rc_console=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0');
    expect(parseCookies('a=1; rc_console=x.y; a=2')).toEqual(
      new Map([
        ['a', '1'],
        ['rc_console', 'x.y'],
      ]),
    );
  });
});

describe('identify', () => {
  const sessions = createSessions(60_000, Buffer.alloc(32, 1));
  const src = { sessions, trustedProxies: ['10.0.0.5', '::1'], userHeader: 'X-Forwarded-User' };

  it('takes the user header from a trusted proxy only', () => {
    const headers = { 'x-forwarded-user': 'carol' };
    expect(identify(src, { peer: '10.0.0.5', headers }, 0)).toMatchObject({ name: 'carol', via: 'proxy' });
    expect(identify(src, { peer: '::ffff:10.0.0.5', headers }, 0)?.name).toBe('carol');
    expect(identify(src, { peer: '::1', headers }, 0)?.name).toBe('carol');
    expect(identify(src, { peer: '10.0.0.6', headers }, 0)).toBeUndefined();
    expect(identify(src, { peer: '127.0.0.1', headers }, 0)).toBeUndefined();
    expect(identify({ ...src, trustedProxies: [] }, { peer: '10.0.0.5', headers }, 0)).toBeUndefined();
    // A name the console would not store is no identity.
    expect(identify(src, { peer: '10.0.0.5', headers: { 'x-forwarded-user': 'a b' } }, 0)).toBeUndefined();
  });

  it('falls back to the session cookie', () => {
    const cookie = `rc_console=${sessions.issue({ name: 'alice', actions: ['retry'] }, 0)}`;
    expect(identify(src, { peer: '127.0.0.1', headers: { cookie } }, 10)?.name).toBe('alice');
    expect(identify(src, { peer: '127.0.0.1', headers: {} }, 10)).toBeUndefined();
  });
});

describe('CSRF and origin', () => {
  it('matches the token exactly', () => {
    expect(csrfMatches('abc', 'abc')).toBe(true);
    expect(csrfMatches('abc', 'abd')).toBe(false);
    expect(csrfMatches('abc', 'ab')).toBe(false);
    expect(csrfMatches('abc', undefined)).toBe(false);
    expect(csrfMatches('abc', '')).toBe(false);
  });

  it('takes the Origin, else the Referer, of the console host only', () => {
    const host = '127.0.0.1:8099';
    expect(sameOrigin({ host, origin: 'http://127.0.0.1:8099' })).toBe(true);
    expect(sameOrigin({ host, referer: 'http://127.0.0.1:8099/jobs/x' })).toBe(true);
    expect(sameOrigin({ host })).toBe(true);
    expect(sameOrigin({ host, origin: 'http://evil.example' })).toBe(false);
    expect(sameOrigin({ host, origin: 'http://127.0.0.1:8100' })).toBe(false);
    expect(sameOrigin({ host, origin: 'null' })).toBe(false);
    expect(sameOrigin({ host, referer: 'http://evil.example/127.0.0.1:8099' })).toBe(false);
    expect(sameOrigin({ host, origin: 'not a url' })).toBe(false);
  });
});

describe('the actions a job offers, from the machine', () => {
  const graph = readMachineGraph();

  it('offers a retry in each failed status while the job is its file’s current one, nowhere else', () => {
    for (const status of JOB_STATUSES) {
      const failed = (FAILED_JOB_STATUSES as readonly string[]).includes(status);
      expect(jobActions(graph, { status, fileIsCurrent: true }), status).toEqual(failed ? ['retry'] : []);
      expect(jobActions(graph, { status, fileIsCurrent: false }), status).toEqual([]);
    }
    expect(retryableStatuses(graph)).toEqual([...FAILED_JOB_STATUSES]);
  });

  it('follows the machine: a graph without the retry transition offers none', () => {
    const without = { ...graph, transitions: graph.transitions.filter((t) => t.event !== 'RETRY_REQUESTED') };
    expect(jobActions(without, { status: 'error', fileIsCurrent: true })).toEqual([]);
  });
});
