/**
 * The audit log's statements: an operator action that changes jobs or the quarantine is recorded
 * once it has run (on failure too, with what it did until then), and read back newest first. A
 * note and a selection are stored as given; nothing secret is ever passed in.
 */
import type { Kysely } from 'kysely';
import type { AuditAction } from '../../machines/index.js';
import { sinceSql, type Since } from './jobs.js';
import type { AuditRow, Database } from './schema.js';

/** One action to record. */
export interface AuditEntry {
  actor: string;
  via: 'cli' | 'console';
  action: AuditAction;
  /** What the action was aimed at: an id, or the filter that selected its targets. */
  selection: Record<string, unknown>;
  /** How many jobs or messages it changed. */
  affected: number;
  /** What came of it beyond the count (new attempts' ids, outcomes by kind, an error). */
  outcome?: Record<string, unknown>;
  note?: string | null;
}

/** Insert `entry`; resolves with its row. */
export async function recordAudit(db: Kysely<Database>, entry: AuditEntry): Promise<AuditRow> {
  return db
    .insertInto('recognition_audit')
    .values({
      actor: entry.actor,
      via: entry.via,
      action: entry.action,
      selection: JSON.stringify(entry.selection),
      affected: entry.affected,
      outcome: JSON.stringify(entry.outcome ?? {}),
      note: entry.note ?? null,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** Which audit rows to read. */
export interface AuditFilter {
  action?: AuditAction | undefined;
  actor?: string | undefined;
  since?: Since | undefined;
  /** Only rows older than this id (the next page, newest first). */
  beforeId?: string | undefined;
  limit: number;
}

/** Audit rows newest first. */
export async function listAudit(db: Kysely<Database>, f: AuditFilter): Promise<AuditRow[]> {
  let q = db.selectFrom('recognition_audit').selectAll().orderBy('id', 'desc').limit(f.limit);
  if (f.action) q = q.where('action', '=', f.action);
  if (f.actor) q = q.where('actor', '=', f.actor);
  if (f.since) q = q.where('at', '>=', sinceSql(f.since));
  if (f.beforeId) q = q.where('id', '<', f.beforeId);
  return q.execute();
}

/**
 * Run `work` and record what it did: `work` fills `entry.affected` and `entry.outcome` as it goes,
 * so an action that fails part-way is recorded with its error and what it had done. When that
 * record fails too, `onUnrecorded` hears of it and the action's own error is the one thrown.
 */
export async function audited<T>(
  db: Kysely<Database>,
  entry: AuditEntry,
  work: (entry: AuditEntry) => Promise<T>,
  onUnrecorded: (err: unknown) => void = () => undefined,
): Promise<T> {
  let result: T;
  try {
    result = await work(entry);
  } catch (err) {
    entry.outcome = { ...entry.outcome, error: err instanceof Error ? err.message : String(err) };
    await recordAudit(db, entry).catch(onUnrecorded);
    throw err;
  }
  await recordAudit(db, entry);
  return result;
}
