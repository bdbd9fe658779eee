/**
 * The scenario file format (`visualizations/scenarios/README.md`): a job's starting row, the things
 * that happen to it (publish outcomes, envelopes from the service, the watchdog's deadline ticks,
 * JetStream's max-deliveries advisory) and what the author expects. Only validation and reading
 * live here: a file that does not match is a UsageError naming every problem with its path.
 */
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { JOB_STATUSES, type JobStatus } from '../../machines/index.js';
import { UsageError } from '../../src/errors.js';

/** `+90s`, `+10m`, `+2m30s`, `+1h`, `+250ms` after `start`, or an ISO 8601 timestamp. */
const RELATIVE = /^\+(?:\d+(?:\.\d+)?(?:ms|s|m|h))+$/;
const RELATIVE_PART = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 } as const;

const timestamp = z.string().refine((v) => !Number.isNaN(Date.parse(v)), 'must be an ISO 8601 timestamp');
const at = z
  .string()
  .refine(
    (v) => RELATIVE.test(v) || !Number.isNaN(Date.parse(v)),
    'must be +<n>ms|s|m|h (e.g. +2m30s) or an ISO 8601 timestamp',
  );
const common = { at: at.optional(), note: z.string().optional() };

const publishEvent = z.strictObject({
  ...common,
  publish: z.enum(['accepted', 'failed']),
  error: z.string().optional(),
});
const envelopeEvent = z.strictObject({
  ...common,
  envelope: z.record(z.string(), z.unknown()),
  msg_id: z.string().nullable().optional(),
});
const tickEvent = z.strictObject({ ...common, tick: z.literal('deadline') });
const maxDeliveriesEvent = z.strictObject({ ...common, max_deliveries: z.number().int().min(1) });

export const scenarioEventSchema = z.union([publishEvent, envelopeEvent, tickEvent, maxDeliveriesEvent]);
export type ScenarioEvent = z.infer<typeof scenarioEventSchema>;

const uuid = z
  .string()
  .regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, 'must be a uuid');
const columns = {
  id: uuid.optional(),
  file_id: uuid.optional(),
  attempt: z.number().int().min(1).optional(),
  target_service: z.string().optional(),
  status: z.enum(JOB_STATUSES as [JobStatus, ...JobStatus[]]),
  service_name: z.string().nullable().optional(),
  service_version: z.string().nullable().optional(),
  publish_attempts: z.number().int().min(0).optional(),
  next_publish_at: timestamp.nullable().optional(),
  published_at: timestamp.nullable().optional(),
  reply_deadline: timestamp.nullable().optional(),
  started_at: timestamp.nullable().optional(),
  finished_at: timestamp.nullable().optional(),
  metrics: z.record(z.string(), z.unknown()).nullable().optional(),
  error_code: z.string().nullable().optional(),
  error_message: z.string().nullable().optional(),
  result_schema_version: z.string().nullable().optional(),
  result_s3_object_id: z.string().nullable().optional(),
  result_msg_id: z.string().nullable().optional(),
};

export const scenarioSchema = z.strictObject({
  $schema: z.string().optional(),
  name: z.string().min(1),
  description: z.string().optional(),
  start: timestamp.default('2025-03-01T10:00:00.000Z'),
  job: z.strictObject(columns),
  file_is_current: z.boolean().default(true),
  config: z
    .strictObject({
      REPLY_TIMEOUT_MS: z.number().int().min(1).default(600_000),
      MAX_PUBLISH_ATTEMPTS: z.number().int().min(1).default(5),
      PUBLISH_BACKOFF_BASE_MS: z.number().int().min(1).default(1_000),
      PUBLISH_BACKOFF_MAX_MS: z.number().int().min(1).default(60_000),
    })
    .prefault({}),
  events: z.array(scenarioEventSchema).min(1),
  expect: z
    .strictObject({
      statuses: z.array(z.enum(JOB_STATUSES as [JobStatus, ...JobStatus[]])).optional(),
      decisions: z.array(z.enum(['applied', 'duplicate', 'ignored', 'late', 'quarantined'])).optional(),
      final_status: z.enum(JOB_STATUSES as [JobStatus, ...JobStatus[]]).optional(),
    })
    .optional(),
});
export type Scenario = z.infer<typeof scenarioSchema>;

/** Validate a parsed scenario; a UsageError names every problem with its path. */
export function parseScenario(value: unknown, { source = 'scenario' }: { source?: string } = {}): Scenario {
  const result = scenarioSchema.safeParse(value);
  if (result.success) return result.data;
  const problems = result.error.issues.map(
    (i) => `${i.path.length ? i.path.join('.') : '(root)'}: ${i.message}`,
  );
  throw new UsageError(`${source} is not a valid scenario: ${problems.join('; ')}`);
}

/** Read and validate a scenario file (JSON). */
export async function loadScenario(path: string): Promise<Scenario> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new UsageError(`cannot read scenario ${path}: ${(err as Error).message}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new UsageError(`scenario ${path} is not JSON: ${(err as Error).message}`);
  }
  return parseScenario(value, { source: path });
}

/** The moment an event's `at` names: relative to the scenario's `start`; absent, the previous event's. */
export function resolveAt(value: string | undefined, start: Date, previous: Date): Date {
  if (value === undefined) return previous;
  if (!RELATIVE.test(value)) return new Date(value);
  let ms = 0;
  for (const [, n, unit] of value.matchAll(RELATIVE_PART))
    ms += Number(n) * UNIT_MS[unit as keyof typeof UNIT_MS];
  return new Date(start.getTime() + ms);
}
