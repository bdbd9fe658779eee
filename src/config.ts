/**
 * Configuration: environment variables → a typed, validated object. The one place that reads
 * `process.env`. Every variable has a documented default (docs/configuration.md); a bad value
 * is a ConfigError naming the variable and the problem, and the process exits 2. A variable that
 * can hold a secret can be given as a file instead (`NAME_FILE`, see {@link FILE_VARIABLES}).
 */
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { z } from 'zod';
import { fileProblem, PG_TLS_PARAMETERS, pgTlsFiles, pgTlsOf, type PgTlsParameter } from './db/pgTls.js';
import { SPAN_FORMS, parseSpanMs } from './duration.js';
import { ConfigError } from './errors.js';

const int = (min: number, max = Number.MAX_SAFE_INTEGER) =>
  z
    .string()
    .trim()
    .regex(/^-?\d+$/, 'must be a whole number')
    .transform(Number)
    .pipe(z.number().int().min(min, `must be at least ${min}`).max(max, `must be at most ${max}`));

const bool = z
  .string()
  .trim()
  .toLowerCase()
  .refine((v) => ['true', 'false', '1', '0', 'yes', 'no'].includes(v), 'must be true or false')
  .transform((v) => ['true', '1', 'yes'].includes(v));

const url = (protocols: string[]) =>
  z
    .string()
    .trim()
    .refine(
      (v) => {
        try {
          return protocols.includes(new URL(v).protocol);
        } catch {
          return false;
        }
      },
      `must be a URL (${protocols.map((p) => p + '//').join(' or ')}…)`,
    );

/** A retention: a span (`30m`, `12h`, `90d`, `2w`) in milliseconds, or `0` for "keep forever". */
const retention = z
  .string()
  .trim()
  .refine(
    (v) => v === '0' || (parseSpanMs(v) ?? 0) > 0,
    `must be a span (${SPAN_FORMS}) or 0 to keep forever`,
  )
  .transform((v) => (v === '0' ? 0 : parseSpanMs(v)!));

/** Variable → [schema, default, meaning]. The table in docs/configuration.md is generated from this list. */
export const CONFIG_VARIABLES = {
  DATABASE_URL: [
    url(['postgres:', 'postgresql:']).refine((v) => {
      try {
        return new URL(v).pathname.replace(/^\//, '') !== '';
      } catch {
        return true; // not a URL: reported by url()
      }
    }, 'must name a database (postgres://user@host:5432/database)'),
    'postgres://postgres@127.0.0.1:5432/recognition',
    'PostgreSQL connection URL',
  ],
  DATABASE_SSLMODE: [
    z.string().trim(),
    '',
    'PostgreSQL TLS: disable, require, verify-ca or verify-full (as sslmode in DATABASE_URL; unset: disable)',
  ],
  DATABASE_SSLROOTCERT: [
    z.string().trim(),
    '',
    'path of the CA certificate (PEM) that signed the PostgreSQL server’s (as sslrootcert)',
  ],
  DATABASE_SSLCERT: [z.string().trim(), '', 'path of a client certificate (PEM) for PostgreSQL (as sslcert)'],
  DATABASE_SSLKEY: [z.string().trim(), '', 'path of the client certificate’s key (PEM) (as sslkey)'],
  NATS_URL: [
    z
      .string()
      .trim()
      .refine(
        (v) =>
          v.split(',').every((s) => {
            try {
              return ['nats:', 'tls:', 'ws:', 'wss:'].includes(new URL(s.trim()).protocol);
            } catch {
              return false;
            }
          }),
        'must be one or more nats://host:port URLs, comma-separated',
      ),
    'nats://127.0.0.1:4222',
    'NATS server URL(s), comma-separated for a cluster',
  ],
  NATS_USER: [z.string(), '', 'NATS user (with NATS_PASSWORD)'],
  NATS_PASSWORD: [z.string(), '', 'NATS password'],
  NATS_TOKEN: [z.string(), '', 'NATS token'],
  NATS_CREDS: [z.string(), '', 'path of a NATS .creds file (JWT + nkey)'],
  NATS_TLS_CA: [z.string(), '', 'path of a CA certificate (PEM) to verify the NATS server'],
  NATS_TLS_CERT: [z.string(), '', 'path of a client certificate (PEM) for mutual TLS'],
  NATS_TLS_KEY: [z.string(), '', 'path of the client certificate key (PEM)'],
  NATS_PROVISION: [bool, 'true', 'create/update the streams and the core-inbox consumer at start'],
  NATS_STREAM_REPLICAS: [int(1, 5), '1', 'replicas of the streams (3 on a JetStream cluster)'],
  NATS_DUPLICATE_WINDOW_MS: [int(1000), '120000', 'JetStream duplicate window of both streams'],
  HTTP_HOST: [z.string().trim().min(1), '0.0.0.0', 'address of the health/metrics server'],
  HTTP_PORT: [int(0, 65535), '8080', 'port of /healthz, /readyz, /metrics, /statechart (0 = any free port)'],
  READINESS_COMMIT_INTERVAL_MS: [
    int(100),
    '5000',
    'how often the commits check of /readyz commits a write transaction (every second after a failure)',
  ],
  READINESS_COMMIT_TIMEOUT_MS: [
    int(100),
    '10000',
    'the commits check of /readyz is red while its write transaction has waited longer than this',
  ],
  HTTP_FIGURES_INTERVAL_MS: [
    int(100),
    '10000',
    'how often the database figures of /metrics and /statechart are read, on a connection of their own, whatever the request rate',
  ],
  HTTP_FIGURES_TIMEOUT_MS: [
    int(100),
    '5000',
    'bound of each read of those figures (its statement timeout) and of connecting for it or for the database check of /readyz',
  ],
  CONSOLE_PORT: [
    z
      .string()
      .trim()
      .refine((v) => v === '' || (/^\d+$/.test(v) && Number(v) <= 65535), 'must be a port (0-65535) or unset')
      .transform((v) => (v === '' ? null : Number(v))),
    '',
    'port of the operator console (0 = any free port; unset: no console, as it can act on jobs)',
  ],
  CONSOLE_HOST: [z.string().trim().min(1), '127.0.0.1', 'address the operator console listens on'],
  CONSOLE_TOKEN_FILE: [
    z.string().trim(),
    '',
    'file of `name:token` lines (optionally `name:token:retry,replay,purge`): who may sign in to the console, and what they may do',
  ],
  CONSOLE_TRUSTED_PROXIES: [
    z
      .string()
      .trim()
      .refine(
        (v) => v === '' || v.split(',').every((a) => isIP(a.trim()) !== 0),
        'must be IP addresses, comma-separated',
      )
      .transform((v) => (v === '' ? [] : v.split(',').map((a) => a.trim()))),
    '',
    'IP addresses of the proxies whose CONSOLE_USER_HEADER names the console user (unset: the header is ignored)',
  ],
  CONSOLE_USER_HEADER: [
    z
      .string()
      .trim()
      .regex(/^[A-Za-z0-9-]+$/, 'must be a header name'),
    'X-Forwarded-User',
    'the header a trusted proxy names the signed-in user in',
  ],
  CONSOLE_TIMEOUT_MS: [
    int(100),
    '5000',
    "bound of each of the console's database statements (its statement timeout) and of connecting for one",
  ],
  LOG_LEVEL: [
    z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
      message: 'must be one of fatal, error, warn, info, debug, trace, silent',
    }),
    'info',
    'pino log level',
  ],
  LOG_PRETTY: [
    z.enum(['auto', 'true', 'false'], { message: 'must be auto, true or false' }),
    'auto',
    'human-readable logs (auto: when stdout is a terminal)',
  ],
  WATCHDOG_INTERVAL_MS: [int(1), '30000', 'how often the watchdog looks for passed deadlines'],
  WATCHDOG_BATCH_SIZE: [int(1, 100000), '1000', 'jobs the watchdog times out per transaction'],
  WATCHDOG_CONCURRENCY: [
    int(1, 16),
    '2',
    'watchdog transactions at once while a backlog drains (the first from the oldest deadline, the second from the newest)',
  ],
  REPLY_TIMEOUT_MS: [int(1), '600000', 'how long a service has to answer after publication'],
  MAX_PUBLISH_ATTEMPTS: [
    int(1, 1000),
    '5',
    'publishes JetStream refuses before a job goes to dlq (a NATS outage spends none)',
  ],
  PUBLISH_BACKOFF_BASE_MS: [
    int(1),
    '1000',
    'delay after the first refused publish (doubles each time); the first pause of an outage',
  ],
  PUBLISH_BACKOFF_MAX_MS: [int(1), '60000', 'the longest delay between publish attempts'],
  PUBLISH_TIMEOUT_MS: [int(1), '5000', 'how long to wait for JetStream to ack a job message'],
  PUBLISHER_POLL_INTERVAL_MS: [
    int(1),
    '5000',
    'safety-net poll for due pending jobs (NOTIFY wakes it sooner)',
  ],
  PUBLISHER_BATCH_SIZE: [int(1, 10000), '100', 'pending jobs published per transaction'],
  RESULTS_BUCKET: [
    z.string().trim().min(1),
    'arm-ka',
    "bucket named in job messages for the results; the only one a result's object may be in",
  ],
  MAX_ENVELOPE_BYTES: [
    int(64, 64 * 1024 * 1024),
    '1048576',
    'larger envelopes are quarantined PAYLOAD_TOO_LARGE; with NATS_PROVISION, RECOGNITION_RESULTS gets max_msg_size = this + 4096 (headers)',
  ],
  QUARANTINE_PAYLOAD_MAX_BYTES: [
    int(0, 64 * 1024 * 1024),
    '65536',
    'payload bytes a quarantine row keeps; a longer payload is stored cut, with its length in details.payload_bytes',
  ],
  INBOX_BATCH_SIZE: [int(1, 10000), '200', 'envelopes applied per transaction, at most'],
  INBOX_CONCURRENCY: [int(1, 64), '4', 'batch transactions at once in this instance'],
  INBOX_LINGER_MS: [int(0, 10000), '2', 'longest wait of a batch that is not full, from its first envelope'],
  INBOX_ACK_WAIT_MS: [int(1000), '30000', 'JetStream redelivers an envelope not acked within this time'],
  INBOX_MAX_ACK_PENDING: [int(1), '20000', 'envelopes in flight across all instances'],
  RETENTION_SUCCEEDED: [
    retention,
    '30d',
    "done/needs_check jobs finished longer ago are deleted with their transitions, unless still their file's current job (0 = keep forever)",
  ],
  RETENTION_FAILED: [
    retention,
    '90d',
    "error/timeout/dlq jobs finished longer ago are deleted with their transitions, unless still their file's current job (0 = keep forever)",
  ],
  RETENTION_QUARANTINE: [
    retention,
    '30d',
    'quarantined messages received longer ago are deleted (0 = keep forever)',
  ],
  RETENTION_INTERVAL_MS: [
    int(0),
    '600000',
    'pause between retention passes of the daemon (0 = the daemon runs none)',
  ],
  ROLLUP_INTERVAL_MS: [
    int(0),
    '5000',
    "pause between runs of the daemon's transition rollup, which the console's counts read (0 = this instance runs none: another must, or the deltas only grow)",
  ],
  RETENTION_BATCH_SIZE: [
    int(1, 100000),
    '1000',
    'jobs (or quarantined messages) retention looks at per transaction',
  ],
  RETENTION_MAX_BUSY_PERCENT: [
    int(1, 100),
    '25',
    'share of wall-clock time a retention pass spends in its batches; it rests after each batch to stay under it (100 = no rest)',
  ],
  DB_POOL_SIZE: [int(1, 1000), '10', 'PostgreSQL connections of this instance'],
  SHUTDOWN_TIMEOUT_MS: [int(100), '30000', 'longest graceful shutdown before exiting anyway'],
  DATABASE_POOLER: [
    z.enum(['none', 'session', 'transaction'], { message: 'must be none, session or transaction' }),
    'none',
    'the connection pooler DATABASE_URL goes through: none, session mode, or transaction mode (unnamed statements; the publisher LISTENs only on DATABASE_LISTEN_URL, else polls every PUBLISHER_POLL_INTERVAL_MS)',
  ],
  DATABASE_LISTEN_URL: [
    z
      .string()
      .trim()
      .refine((v) => {
        if (v === '') return true;
        try {
          return ['postgres:', 'postgresql:'].includes(new URL(v).protocol);
        } catch {
          return false;
        }
      }, 'must be a URL (postgres://… or postgresql://…)'),
    '',
    'a direct PostgreSQL URL for the publisher’s LISTEN connection, past a pooler (unset: DATABASE_URL, but not with DATABASE_POOLER=transaction)',
  ],
} as const;

type Vars = typeof CONFIG_VARIABLES;
export type Config = { [K in keyof Vars]: z.output<Vars[K][0]> };
type ConfigName = keyof Vars;

/**
 * The variables that can hold a secret, so each can also be given as `NAME_FILE`: the path of a
 * file holding the value (a systemd credential, a container secret under /run/secrets). The value
 * is the file's content with one trailing newline (`\n` or `\r\n`) removed. Setting both `NAME`
 * and `NAME_FILE` is a configuration error.
 */
export const FILE_VARIABLES: ReadonlySet<ConfigName> = new Set<ConfigName>([
  'DATABASE_URL',
  'DATABASE_LISTEN_URL',
  'NATS_URL',
  'NATS_PASSWORD',
  'NATS_TOKEN',
]);

/** Every environment variable the configuration reads: the table's, and the `_FILE` variants. */
export function configVariableNames(): string[] {
  return Object.keys(CONFIG_VARIABLES).flatMap((name) =>
    FILE_VARIABLES.has(name as ConfigName) ? [name, `${name}_FILE`] : [name],
  );
}

/** Where a value came from, for messages: a variable, or a file named by `NAME_FILE`. */
interface RawValue {
  value: string | undefined;
  /** Set when the value was read from a file: the `NAME_FILE=path` that named it. */
  file?: string;
}

const isSet = (v: string | undefined): v is string => v !== undefined && v !== '';

/**
 * The raw value of `name` in `env`: the variable, or the content of the file `NAME_FILE` names.
 * Throws ConfigError when both are set, or when the file cannot be read or is empty; the message
 * names the variable and the path, never the content.
 */
function rawValue(env: NodeJS.ProcessEnv, name: ConfigName): RawValue {
  const direct = env[name];
  if (!FILE_VARIABLES.has(name)) return { value: direct };
  const fileVar = `${name}_FILE`;
  const path = env[fileVar];
  if (!isSet(path)) return { value: direct };
  if (isSet(direct)) throw new ConfigError(`${name} and ${fileVar} are both set: set one`);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`${fileVar}=${path} cannot be read (${fileProblem(err)})`);
  }
  const value = text.replace(/\r?\n$/, '');
  if (value === '') throw new ConfigError(`${fileVar}=${path} is empty`);
  return { value, file: `${fileVar}=${path}` };
}

/**
 * Read and validate the configuration from `env`. Throws ConfigError with one line naming the
 * first bad variable; an empty string counts as unset.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const out: Record<string, unknown> = {};
  for (const [name, [schema, fallback]] of Object.entries(CONFIG_VARIABLES)) {
    const raw = rawValue(env, name as ConfigName);
    const value = isSet(raw.value) ? raw.value : fallback;
    const parsed = (schema as z.ZodType).safeParse(value);
    if (!parsed.success) {
      const problem = parsed.error.issues[0]?.message ?? 'is invalid';
      // A value read from a file may be a secret put in the wrong file: it is never shown.
      if (raw.file) throw new ConfigError(`${name} ${problem} (read from ${raw.file})`);
      const shown = /PASSWORD|TOKEN|URL/.test(name) ? redactUrl(String(value)) : String(value);
      throw new ConfigError(`${name} ${problem} (got ${JSON.stringify(shown)})`);
    }
    out[name] = parsed.data;
  }
  const cfg = out as Config;
  if (cfg.PUBLISH_BACKOFF_MAX_MS < cfg.PUBLISH_BACKOFF_BASE_MS) {
    throw new ConfigError('PUBLISH_BACKOFF_MAX_MS must be at least PUBLISH_BACKOFF_BASE_MS');
  }
  if (cfg.NATS_TOKEN && cfg.NATS_USER)
    throw new ConfigError('NATS_TOKEN and NATS_USER are exclusive: set one');
  if (cfg.NATS_PASSWORD && !cfg.NATS_USER) throw new ConfigError('NATS_PASSWORD is set but NATS_USER is not');
  if (Boolean(cfg.NATS_TLS_CERT) !== Boolean(cfg.NATS_TLS_KEY)) {
    throw new ConfigError('NATS_TLS_CERT and NATS_TLS_KEY go together: set both or neither');
  }
  return { ...cfg, DATABASE_URL: withDatabaseTls(cfg) };
}

/**
 * DATABASE_URL with the DATABASE_SSL* variables written into it as the URL parameters of the same
 * meaning, so that everything that connects reads one URL; the TLS settings validated, and their
 * files readable. Throws ConfigError naming the variable or the parameter: for a variable and the
 * parameter both set, a bad combination, or a file that cannot be read.
 */
function withDatabaseTls(cfg: Config): string {
  const url = new URL(cfg.DATABASE_URL);
  const fromVariable = new Set<PgTlsParameter>();
  for (const [parameter, variable] of Object.entries(PG_TLS_PARAMETERS) as Array<
    [PgTlsParameter, keyof typeof CONFIG_VARIABLES]
  >) {
    const value = cfg[variable] as string;
    if (!value) continue;
    if (url.searchParams.has(parameter))
      throw new ConfigError(
        `${variable} and the ${parameter} parameter of DATABASE_URL are both set: set one`,
      );
    url.searchParams.set(parameter, value);
    fromVariable.add(parameter);
  }
  const name = (p: PgTlsParameter) => (fromVariable.has(p) ? PG_TLS_PARAMETERS[p] : `DATABASE_URL ${p}`);
  const tls = pgTlsOf(url, name);
  for (const [parameter, path] of pgTlsFiles(tls)) {
    try {
      readFileSync(path);
    } catch (err) {
      throw new ConfigError(`${name(parameter)} ${path} cannot be read (${fileProblem(err)})`);
    }
  }
  return fromVariable.size > 0 ? url.toString() : cfg.DATABASE_URL;
}

/** Schemes whose URLs name a user, not a secret, by a lone userinfo (`postgres://app@db/x`). */
const USER_SCHEMES: ReadonlySet<string> = new Set(['postgres', 'postgresql']);

/**
 * A URL in a text: its scheme, then everything up to a blank, a quote, or a comma that starts the
 * next URL of a list (`nats://a@h1,nats://b@h2`). A password may hold `/`, `@`, `?` or `#`
 * unencoded, so the URL's own syntax cannot tell where its userinfo ends: the last `@` does.
 */
const URL_IN_TEXT = /\b([a-z][a-z0-9+.-]*):\/\/((?:[^\s"'`<>,]|,(?![a-z][a-z0-9+.-]*:\/\/))*)/gi;

/**
 * Every URL in a text with its secrets replaced, for messages and logs: the password of
 * `user:password@` (whatever characters it holds), a lone userinfo, which is a token
 * (`nats://TOKEN@host`, `https://TOKEN@host`) except in a PostgreSQL URL, where it is the user, and
 * a `password=` parameter. Users, hosts and paths stay, so a redacted URL still shows where it
 * pointed; text without a URL comes back unchanged.
 */
export function redactUrl(value: string): string {
  return value.replace(URL_IN_TEXT, (url: string, scheme: string, rest: string) => {
    const out = redactUserinfo(scheme, rest).replace(/([?&]password=)[^&#]+/gi, '$1[REDACTED]');
    return out === rest ? url : `${scheme}://${out}`;
  });
}

/** What follows `scheme://` with the secret of its userinfo replaced (see {@link redactUrl}). */
function redactUserinfo(scheme: string, rest: string): string {
  const at = rest.lastIndexOf('@');
  // No userinfo without an authority: `file:///srv/node_modules/@scope/…` has none.
  if (at <= 0 || rest.startsWith('/')) return rest;
  const userinfo = rest.slice(0, at);
  const colon = userinfo.indexOf(':');
  const user = colon >= 0 ? userinfo.slice(0, colon) : userinfo;
  // A user or a lone token holds no `/`, `?` or `#`: one there ends the authority, and the `@` is
  // in the path. Only a password may hold them.
  if (/[/?#]/.test(user)) return rest;
  if (colon >= 0) return `${user}:[REDACTED]${rest.slice(at)}`;
  return USER_SCHEMES.has(scheme.toLowerCase()) ? rest : `[REDACTED]${rest.slice(at)}`;
}

/** The secret values in a configuration, so the logger can scrub them wherever they appear. */
export function secretsOf(cfg: Config): string[] {
  const secrets = [cfg.NATS_PASSWORD, cfg.NATS_TOKEN];
  try {
    const db = new URL(cfg.DATABASE_URL);
    if (db.password) secrets.push(db.password, decodeURIComponent(db.password));
    // pg also takes the password as a URL parameter: as written in the URL, and decoded.
    const param = /[?&]password=([^&#]*)/.exec(db.search)?.[1];
    if (param) secrets.push(param, db.searchParams.get('password') ?? param);
  } catch {
    // loadConfig validated it; nothing to add otherwise.
  }
  try {
    const p = cfg.DATABASE_LISTEN_URL ? new URL(cfg.DATABASE_LISTEN_URL).password : '';
    if (p) secrets.push(p, decodeURIComponent(p));
  } catch {
    // validated
  }
  for (const u of cfg.NATS_URL.split(',')) {
    try {
      const { username, password } = new URL(u.trim());
      // A NATS URL's lone userinfo is a token (nats://TOKEN@host).
      const p = password || username;
      if (p) secrets.push(p, decodeURIComponent(p));
    } catch {
      // validated
    }
  }
  return [...new Set(secrets.filter((s) => s.length >= 3))];
}
