/**
 * TLS to PostgreSQL with libpq's meaning of `sslmode`, `sslrootcert`, `sslcert` and `sslkey`
 * (docs/configuration.md, "PostgreSQL TLS"): read out of the URL and handed to `pg` as explicit TLS
 * options, so `pg` never reads an `sslmode` itself. `disable`, `require`, `verify-ca` and
 * `verify-full` as in libpq; `prefer` and `allow` are refused (they fall back to plain text).
 */
import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import { ConfigError } from '../errors.js';

/** The accepted `sslmode` values, weakest first. */
export const SSL_MODES = ['disable', 'require', 'verify-ca', 'verify-full'] as const;
export type SslMode = (typeof SSL_MODES)[number];

/** The TLS parameters of a connection URL, and the dedicated variable of each. */
export const PG_TLS_PARAMETERS = {
  sslmode: 'DATABASE_SSLMODE',
  sslrootcert: 'DATABASE_SSLROOTCERT',
  sslcert: 'DATABASE_SSLCERT',
  sslkey: 'DATABASE_SSLKEY',
} as const;
export type PgTlsParameter = keyof typeof PG_TLS_PARAMETERS;

/** A connection's TLS settings, validated. File fields are paths (`rootCert` may be `system`). */
export interface PgTls {
  mode: SslMode;
  rootCert: string | undefined;
  cert: string | undefined;
  key: string | undefined;
}

/**
 * Parameters removed from the URL before `pg` sees it: the TLS ones, which this module applies
 * itself, and `uselibpqcompat`, `pg`'s switch to libpq's meaning, which is always the meaning here.
 */
const CONSUMED = [...Object.keys(PG_TLS_PARAMETERS), 'uselibpqcompat'];

/** How a parameter is named in messages, by default `DATABASE_URL sslmode`. */
export type ParameterName = (parameter: PgTlsParameter) => string;
const inUrl: ParameterName = (p) => `DATABASE_URL ${p}`;

/**
 * The TLS settings of `url`. Pure. Throws ConfigError (one line, starting with the parameter's
 * name as `name` gives it) for an unknown or weak `sslmode`, a mode that needs a CA file without
 * one, a certificate without its key, or `pg`'s own `ssl` parameter.
 */
export function pgTlsOf(url: URL, name: ParameterName = inUrl): PgTls {
  const p = url.searchParams;
  if (p.has('ssl')) {
    throw new ConfigError(
      'DATABASE_URL has the ssl parameter, which is pg’s own: use sslmode=verify-full (for ssl=true) or sslmode=disable',
    );
  }
  const get = (k: PgTlsParameter) => {
    const v = p.get(k)?.trim();
    return v ? v : undefined;
  };
  const raw = get('sslmode');
  const files = { rootCert: get('sslrootcert'), cert: get('sslcert'), key: get('sslkey') };
  if (raw !== undefined && !(SSL_MODES as readonly string[]).includes(raw)) {
    const why =
      raw === 'prefer' || raw === 'allow'
        ? `: ${raw} falls back to an unencrypted connection, which pg cannot do`
        : '';
    throw new ConfigError(
      `${name('sslmode')} must be disable, require, verify-ca or verify-full (got ${JSON.stringify(raw)})${why}`,
    );
  }
  const mode = (raw ?? 'disable') as SslMode;
  const given = (['sslrootcert', 'sslcert', 'sslkey'] as const).find((k) => get(k) !== undefined);
  if (raw === undefined && given !== undefined) {
    throw new ConfigError(
      `${name(given)} is set without ${name('sslmode')}: set sslmode to require, verify-ca or verify-full`,
    );
  }
  if (mode === 'verify-ca' && (files.rootCert === undefined || files.rootCert === 'system')) {
    throw new ConfigError(
      `${name('sslmode')} verify-ca needs ${name('sslrootcert')}: the file of the CA that signed the server's certificate`,
    );
  }
  if (files.rootCert === 'system' && mode !== 'verify-full') {
    throw new ConfigError(`${name('sslrootcert')} system needs ${name('sslmode')} verify-full`);
  }
  if ((files.cert === undefined) !== (files.key === undefined)) {
    throw new ConfigError(`${name('sslcert')} and ${name('sslkey')} go together: set both or neither`);
  }
  return { mode, ...files };
}

/** The files `tls` reads (none under `disable`) with the parameter of each, for checks and messages. */
export function pgTlsFiles(tls: PgTls): Array<[PgTlsParameter, string]> {
  const out: Array<[PgTlsParameter, string]> = [];
  if (tls.mode === 'disable') return out;
  if (tls.rootCert !== undefined && tls.rootCert !== 'system') out.push(['sslrootcert', tls.rootCert]);
  if (tls.cert !== undefined) out.push(['sslcert', tls.cert]);
  if (tls.key !== undefined) out.push(['sslkey', tls.key]);
  return out;
}

/** Why a file cannot be read, in words (`no such file`), from a Node error. */
export function fileProblem(err: unknown): string {
  const code = (err as { code?: unknown }).code;
  switch (code) {
    case 'ENOENT':
      return 'no such file';
    case 'EACCES':
    case 'EPERM':
      return 'permission denied';
    case 'EISDIR':
      return 'it is a directory';
    default:
      return typeof code === 'string' ? code : 'unreadable';
  }
}

/**
 * The `ssl` option of `pg` for `tls`: false, or TLS options with the files read now. Throws
 * ConfigError naming the parameter and the path (never the content) when a file cannot be read.
 */
export function pgSslOptions(tls: PgTls, name: ParameterName = inUrl): false | ConnectionOptions {
  if (tls.mode === 'disable') return false;
  const read = (parameter: PgTlsParameter, path: string) => {
    try {
      return readFileSync(path, 'utf8');
    } catch (err) {
      throw new ConfigError(`${name(parameter)} ${path} cannot be read (${fileProblem(err)})`);
    }
  };
  const options: ConnectionOptions = {};
  for (const [parameter, path] of pgTlsFiles(tls)) {
    const text = read(parameter, path);
    if (parameter === 'sslrootcert') options.ca = text;
    else if (parameter === 'sslcert') options.cert = text;
    else options.key = text;
  }
  const skipHostName = () => undefined;
  if (tls.mode === 'require') {
    if (options.ca === undefined) options.rejectUnauthorized = false;
    else options.checkServerIdentity = skipHostName;
  } else if (tls.mode === 'verify-ca') {
    options.checkServerIdentity = skipHostName;
  }
  return options;
}

/** What `pg` gets for a connection URL: the URL without the TLS parameters, and `ssl`. */
export interface PgConnection {
  connectionString: string;
  ssl: false | ConnectionOptions;
}

/**
 * The `pg` connection settings of `url` (validated by {@link pgTlsOf}, files read by
 * {@link pgSslOptions}). `ssl` is always explicit, so `pg` neither parses an `sslmode` nor falls
 * back to `PGSSLMODE`.
 */
export function pgConnection(url: string): PgConnection {
  const u = new URL(url);
  const tls = pgTlsOf(u);
  if (CONSUMED.some((k) => u.searchParams.has(k))) {
    for (const k of CONSUMED) u.searchParams.delete(k);
    url = u.toString();
  }
  return { connectionString: url, ssl: pgSslOptions(tls) };
}
