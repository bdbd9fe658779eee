/**
 * Configuration: environment variables → a typed, validated object. The one place that reads
 * `process.env`. Every variable has a documented default (docs/configuration.md); a bad value
 * is a ConfigError naming the variable and the problem, and the process exits 2.
 */
import { z } from 'zod';
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
  MAX_PUBLISH_ATTEMPTS: [int(1, 1000), '5', 'publish attempts before a job goes to dlq'],
  PUBLISH_BACKOFF_BASE_MS: [int(1), '1000', 'delay after the first failed publish (doubles each time)'],
  PUBLISH_BACKOFF_MAX_MS: [int(1), '60000', 'the longest delay between publish attempts'],
  PUBLISH_TIMEOUT_MS: [int(1), '5000', 'how long to wait for JetStream to ack a job message'],
  PUBLISHER_POLL_INTERVAL_MS: [
    int(1),
    '5000',
    'safety-net poll for due pending jobs (NOTIFY wakes it sooner)',
  ],
  PUBLISHER_BATCH_SIZE: [int(1, 10000), '100', 'pending jobs published per transaction'],
  RESULTS_BUCKET: [z.string().trim().min(1), 'arm-ka', 'bucket named in job messages for the results'],
  MAX_ENVELOPE_BYTES: [
    int(64, 64 * 1024 * 1024),
    '1048576',
    'larger envelopes are quarantined PAYLOAD_TOO_LARGE',
  ],
  INBOX_BATCH_SIZE: [int(1, 10000), '100', 'envelopes applied per transaction, at most'],
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
  RETENTION_BATCH_SIZE: [
    int(1, 100000),
    '1000',
    'jobs (or quarantined messages) retention looks at per transaction',
  ],
  DB_POOL_SIZE: [int(1, 1000), '10', 'PostgreSQL connections of this instance'],
  SHUTDOWN_TIMEOUT_MS: [int(100), '30000', 'longest graceful shutdown before exiting anyway'],
} as const;

type Vars = typeof CONFIG_VARIABLES;
export type Config = { [K in keyof Vars]: z.output<Vars[K][0]> };

/**
 * Read and validate the configuration from `env`. Throws ConfigError with one line naming the
 * first bad variable; an empty string counts as unset.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const out: Record<string, unknown> = {};
  for (const [name, [schema, fallback]] of Object.entries(CONFIG_VARIABLES)) {
    const raw = env[name];
    const value = raw === undefined || raw === '' ? fallback : raw;
    const parsed = (schema as z.ZodType).safeParse(value);
    if (!parsed.success) {
      const shown = /PASSWORD|TOKEN|URL/.test(name) ? redactUrl(String(value)) : String(value);
      throw new ConfigError(
        `${name} ${parsed.error.issues[0]?.message ?? 'is invalid'} (got ${JSON.stringify(shown)})`,
      );
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
  return cfg;
}

/** A URL with its password replaced, for messages and logs. Non-URLs come back unchanged. */
export function redactUrl(value: string): string {
  return value.replace(/(\/\/[^/:@\s]*):[^@/\s]*@/g, '$1:[REDACTED]@');
}

/** The secret values in a configuration, so the logger can scrub them wherever they appear. */
export function secretsOf(cfg: Config): string[] {
  const secrets = [cfg.NATS_PASSWORD, cfg.NATS_TOKEN];
  try {
    const db = new URL(cfg.DATABASE_URL);
    if (db.password) secrets.push(db.password, decodeURIComponent(db.password));
  } catch {
    // loadConfig validated it; nothing to add otherwise.
  }
  for (const u of cfg.NATS_URL.split(',')) {
    try {
      const p = new URL(u.trim()).password;
      if (p) secrets.push(p, decodeURIComponent(p));
    } catch {
      // validated
    }
  }
  return [...new Set(secrets.filter((s) => s.length >= 3))];
}
