/**
 * What `audit list` does, and how the CLI's recorded commands write their audit row: after the
 * action has run, or failed part-way, with what it did; a dry run is not recorded. The CLI's actor
 * is the operating-system user it runs as. Imported by actions only: it loads the database client.
 */
import { userInfo } from 'node:os';
import type { Kysely } from 'kysely';
import { audited as sharedAudited, listAudit, type AuditEntry } from '../db/audit.js';
import type { Database } from '../db/schema.js';
import type { AuditListOptions } from './audit.js';
import { printRows, type Cell } from './rows.js';
import { withDb } from './withDb.js';

/** The CLI's actor: the operating-system user, or `unknown` where the system names none. */
export function cliActor(): string {
  try {
    return userInfo().username || 'unknown';
  } catch {
    return 'unknown';
  }
}

/** The CLI's part of an audit row: its actor, `via: 'cli'`, the operator's note. */
export function cliAudit(note: string | undefined) {
  return { actor: cliActor(), via: 'cli' as const, note: note ?? null };
}

/** What an action of the CLI records; the actor and `via` are the CLI's. */
export type CliAuditEntry = Omit<AuditEntry, 'actor' | 'via'>;

/** Says on stderr that the audit log did not take an action that failed. */
export function warnUnrecorded(auditErr: unknown): void {
  process.stderr.write(`warning: the audit log did not take this action: ${String(auditErr)}\n`);
}

/** Run `work` and record what it did as the CLI's action ({@link sharedAudited}). */
export function audited<T>(
  db: Kysely<Database>,
  entry: CliAuditEntry,
  work: (entry: CliAuditEntry) => Promise<T>,
): Promise<T> {
  return sharedAudited(db, { ...entry, actor: cliActor(), via: 'cli' }, work, warnUnrecorded);
}

type AuditLine = Awaited<ReturnType<typeof listAudit>>[number];

const AUDIT_COLUMNS: ReadonlyArray<[string, (r: AuditLine) => Cell]> = [
  ['ID', (r) => r.id],
  ['AT', (r) => r.at],
  ['ACTOR', (r) => r.actor],
  ['VIA', (r) => r.via],
  ['ACTION', (r) => r.action],
  ['AFFECTED', (r) => r.affected],
  ['SELECTION', (r) => JSON.stringify(r.selection)],
  ['NOTE', (r) => r.note],
];

/** `audit list`: newest first, JSON lines or a table. */
export async function listAction(o: AuditListOptions): Promise<void> {
  const rows = await withDb(({ db }) =>
    listAudit(db, { action: o.action, actor: o.actor, since: o.since, limit: o.limit }),
  );
  printRows(rows, AUDIT_COLUMNS, o);
}
