/**
 * Who is at the operator console, and whether a request may act. An identity comes from a signed
 * session cookie (a token of `CONSOLE_TOKEN_FILE`, entered at /login) or from a trusted proxy's user
 * header; without one the console is read-only. A form that acts carries the session's CSRF token,
 * and a request whose Origin (or Referer) names another host is refused. Tokens are compared by
 * their digests and never kept or logged. Pure but for the process's random signing key.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';

/** What an identity may do at the console. */
export const CONSOLE_ACTIONS = ['retry', 'replay', 'purge'] as const;
export type ConsoleAction = (typeof CONSOLE_ACTIONS)[number];

/** A signed-in operator. */
export interface Identity {
  name: string;
  actions: readonly ConsoleAction[];
  /** How the console knows them. */
  via: 'token' | 'proxy';
  /** The token every form that acts must carry back. */
  csrf: string;
}

/** One line of the token file: a name, the token's digest, the actions allowed. */
export interface TokenEntry {
  name: string;
  digest: Buffer;
  actions: readonly ConsoleAction[];
}

const NAME = /^[A-Za-z0-9._@-]{1,100}$/;

const digestOf = (token: string) => createHash('sha256').update(token, 'utf8').digest();

/**
 * The token file's entries: lines `name:token` or `name:token:action,action`, every action when
 * the third field is absent; blank lines and `#` comments are skipped. Throws naming the line (never
 * its token) when a line is malformed, a name repeats, or a token is shorter than 16 characters.
 */
export function parseTokenFile(text: string): TokenEntry[] {
  const out: TokenEntry[] = [];
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const where = `line ${i + 1} of the token file`;
    const [name, token, actions, ...rest] = line.split(':');
    if (rest.length > 0 || name === undefined || token === undefined)
      throw new Error(`${where}: expected name:token or name:token:actions`);
    if (!NAME.test(name)) throw new Error(`${where}: the name must be 1-100 letters, digits or ._@-`);
    if (token.length < 16) throw new Error(`${where}: the token must be at least 16 characters`);
    if (out.some((e) => e.name === name)) throw new Error(`${where}: ${name} is named twice`);
    out.push({ name, digest: digestOf(token), actions: parseActions(actions, where) });
  });
  return out;
}

function parseActions(field: string | undefined, where: string): readonly ConsoleAction[] {
  if (field === undefined) return CONSOLE_ACTIONS;
  const list = field
    .split(',')
    .map((a) => a.trim())
    .filter((a) => a !== '');
  for (const a of list)
    if (!(CONSOLE_ACTIONS as readonly string[]).includes(a))
      throw new Error(`${where}: unknown action ${JSON.stringify(a)} (${CONSOLE_ACTIONS.join(', ')})`);
  return list as ConsoleAction[];
}

/** The entry whose token `token` is, compared in constant time; undefined when none is. */
export function matchToken(entries: readonly TokenEntry[], token: string): TokenEntry | undefined {
  const d = digestOf(token);
  let found: TokenEntry | undefined;
  for (const e of entries) if (timingSafeEqual(e.digest, d)) found ??= e;
  return found;
}

/** The session cookie's name. */
export const SESSION_COOKIE = 'rc_console';

/** Signs and reads session cookies with one key (random per process unless given). */
export interface Sessions {
  /** The cookie value of a new session for `entry`, valid `ttlMs` from `nowMs`. */
  issue(entry: { name: string; actions: readonly ConsoleAction[] }, nowMs: number): string;
  /** The identity a cookie value carries, or undefined when it is forged, malformed or expired. */
  read(value: string, nowMs: number): Identity | undefined;
  /** The CSRF token of a proxy identity: the same for a user as long as the process runs. */
  proxyCsrf(name: string): string;
  ttlMs: number;
}

const b64 = (b: Buffer | string) => Buffer.from(b).toString('base64url');

/** {@link Sessions} signed with HMAC-SHA-256 under `key`. */
export function createSessions(ttlMs: number, key: Buffer = randomBytes(32)): Sessions {
  const sign = (text: string) => createHmac('sha256', key).update(text).digest();
  const csrfOf = (what: string) => b64(sign(`csrf|${what}`));
  return {
    ttlMs,
    issue(entry, nowMs) {
      const payload = b64(
        JSON.stringify({ n: entry.name, a: entry.actions, e: nowMs + ttlMs, s: b64(randomBytes(16)) }),
      );
      return `${payload}.${b64(sign(payload))}`;
    },
    read(value, nowMs) {
      const [payload, mac, ...rest] = value.split('.');
      if (!payload || !mac || rest.length > 0) return undefined;
      const given = Buffer.from(mac, 'base64url');
      const expected = sign(payload);
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
      let body: { n?: unknown; a?: unknown; e?: unknown; s?: unknown };
      try {
        body = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as typeof body;
      } catch {
        return undefined;
      }
      if (typeof body.n !== 'string' || typeof body.e !== 'number' || typeof body.s !== 'string')
        return undefined;
      if (!Array.isArray(body.a) || body.e <= nowMs) return undefined;
      const actions = body.a.filter((a): a is ConsoleAction =>
        (CONSOLE_ACTIONS as readonly unknown[]).includes(a),
      );
      return { name: body.n, actions, via: 'token', csrf: csrfOf(`session|${body.s}`) };
    },
    proxyCsrf: (name) => csrfOf(`proxy|${name}`),
  };
}

/** A `Set-Cookie` value: the session (HttpOnly, SameSite=Strict, Path=/, expiring), or its removal. */
export function sessionCookie(value: string | null, maxAgeMs: number): string {
  const attrs = 'HttpOnly; SameSite=Strict; Path=/';
  return value === null
    ? `${SESSION_COOKIE}=; ${attrs}; Max-Age=0`
    : `${SESSION_COOKIE}=${value}; ${attrs}; Max-Age=${Math.floor(maxAgeMs / 1000)}`;
}

/** The cookies of a `Cookie` header, by name (the first of a name wins). */
export function parseCookies(header: string | undefined): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq <= 0) continue;
    const name = part.slice(0, eq).trim();
    if (!out.has(name)) out.set(name, part.slice(eq + 1).trim());
  }
  return out;
}

/** How the console learns who is there. */
export interface IdentitySources {
  sessions: Sessions;
  /** Peers whose user header counts (IP addresses as the socket reports them). */
  trustedProxies: readonly string[];
  /** The header a trusted proxy names the user in (any case). */
  userHeader: string;
}

/** A socket's address without the IPv4-mapped IPv6 prefix (`::ffff:127.0.0.1` → `127.0.0.1`). */
export function plainAddress(address: string | undefined): string {
  return (address ?? '').replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/, '');
}

/**
 * The identity of a request: a trusted proxy's user header (only when the TCP peer is one of the
 * trusted proxies; from anyone else it is ignored), else a valid session cookie, else none.
 */
export function identify(
  src: IdentitySources,
  req: { peer: string | undefined; headers: IncomingHttpHeaders },
  nowMs: number,
): Identity | undefined {
  const peer = plainAddress(req.peer);
  if (src.trustedProxies.some((p) => plainAddress(p) === peer)) {
    const raw = req.headers[src.userHeader.toLowerCase()];
    const name = (Array.isArray(raw) ? raw[0] : raw)?.trim();
    if (name && NAME.test(name))
      return { name, actions: CONSOLE_ACTIONS, via: 'proxy', csrf: src.sessions.proxyCsrf(name) };
  }
  const cookie = parseCookies(req.headers.cookie).get(SESSION_COOKIE);
  return cookie ? src.sessions.read(cookie, nowMs) : undefined;
}

/** The CSRF token of a form equals the identity's, compared in constant time. */
export function csrfMatches(expected: string, given: string | undefined): boolean {
  if (given === undefined) return false;
  const a = Buffer.from(expected);
  const b = Buffer.from(given);
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * A POST comes from the console's own pages: its Origin, or its Referer when it has no Origin,
 * names the host the request was sent to (the `Host` header). A request with neither passes (a
 * browser sends Origin with every cross-site POST); the CSRF token is checked besides.
 */
export function sameOrigin(headers: IncomingHttpHeaders): boolean {
  const host = headers.host;
  const from = headers.origin ?? headers.referer;
  if (from === undefined) return true;
  if (host === undefined || from === 'null') return false;
  try {
    return new URL(from).host === host;
  } catch {
    return false;
  }
}
