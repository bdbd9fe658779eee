/**
 * What `inbox replay` does when it runs (registered in `./inbox.ts`), on
 * `src/replay/inboxReplay.ts`. Output: one JSON object on stdout (the counts); on stderr a
 * progress bar when stderr is a terminal, warnings, and one summary line. Imported by the action
 * only; the heavy modules load when it runs.
 */
import type { InboxReplaySummary } from '../replay/inboxReplay.js';
import { MigrationsPendingError, UsageError } from '../errors.js';
import type { ReplayOptions } from './inbox.js';

/** The counts as one line for a person. */
function summaryLine(s: InboxReplaySummary): string {
  const range = s.firstSeq === null ? 'nothing to replay' : `sequences ${s.firstSeq}..${s.lastSeq}`;
  const applied = s.dryRun ? 'would apply' : 'applied';
  return `${s.dryRun ? 'dry run, nothing written: ' : ''}${s.stream} ${range}: ${s.delivered} delivered, ${s.applied} ${applied}, ${s.duplicates} duplicates, ${s.ignored} ignored, ${s.late} late, ${s.quarantined} quarantined`;
}

/**
 *   1. configuration; the database (migrations current) and NATS;
 *   2. the start: `--from-seq`, or `--since` (a span is taken back from the database clock);
 *   3. the replay, with a progress bar on a terminal;
 *   4. the counts on stdout, a summary line and the warnings on stderr.
 */
export async function replayAction(o: ReplayOptions): Promise<void> {
  if ((o.since === undefined) === (o.fromSeq === undefined))
    throw new UsageError('give either --since or --from-seq');
  if (o.untilSeq !== undefined && o.fromSeq !== undefined && o.untilSeq < o.fromSeq)
    throw new UsageError(`--until-seq ${o.untilSeq} is before --from-seq ${o.fromSeq}`);

  // 1. Configuration, database, NATS.
  const [
    { commandConfig },
    { secretsOf },
    { dbNow, openDb, pendingMigrations },
    { createLogger },
    { connectNats, connectFailureReason },
    { jetstream, jetstreamManager },
    { replayInbox },
    { default: cliProgress },
  ] = await Promise.all([
    import('./commandConfig.js'),
    import('../config.js'),
    import('../db/database.js'),
    import('../logger.js'),
    import('../nats/connection.js'),
    import('@nats-io/jetstream'),
    import('../replay/inboxReplay.js'),
    import('cli-progress'),
  ]);
  const { audited } = await import('./auditActions.js');
  const cfg = commandConfig();
  // stdout carries the result: the connection's warnings go to stderr.
  const logger = createLogger({
    level: 'warn',
    secrets: secretsOf(cfg),
    destination: process.stderr,
  });
  const db = openDb(cfg.DATABASE_URL, {
    max: 2,
    applicationName: 'recognition-core inbox replay',
    unnamedStatements: cfg.DATABASE_POOLER === 'transaction',
  });
  let bar: InstanceType<typeof cliProgress.SingleBar> | undefined;
  try {
    const pending = await pendingMigrations(db.db);
    if (pending.length > 0) throw new MigrationsPendingError(pending);
    const nats = await connectNats(cfg, logger, { name: 'recognition-core inbox replay' }).catch(
      (err: unknown) => {
        throw new Error(`NATS (NATS_URL) is not usable: ${connectFailureReason(cfg, err)}`, { cause: err });
      },
    );
    try {
      // 2. The start.
      const since = o.since;
      const from =
        since === undefined
          ? { seq: o.fromSeq! }
          : 'at' in since
            ? { time: since.at }
            : { time: new Date((await dbNow(db.db)).getTime() - since.agoMs) };

      // 3. The replay, recorded in the audit log unless dry.
      const replay = async (onBatch: (s: Readonly<InboxReplaySummary>) => void) =>
        replayInbox({
          db: db.db,
          pool: db.pool,
          js: jetstream(nats.nc),
          jsm: await jetstreamManager(nats.nc),
          from,
          untilSeq: o.untilSeq,
          batchSize: cfg.INBOX_BATCH_SIZE,
          maxEnvelopeBytes: cfg.MAX_ENVELOPE_BYTES,
          quarantinePayloadMaxBytes: cfg.QUARANTINE_PAYLOAD_MAX_BYTES,
          resultsBucket: cfg.RESULTS_BUCKET,
          dryRun: o.dryRun === true,
          onPlan(plan) {
            if (plan.startAgedOut && plan.oldest)
              process.stderr.write(
                `warning: the oldest message still in ${plan.stream} is sequence ${plan.oldest.seq}, stored ${plan.oldest.time.toISOString()}: results stored before it, if any, cannot be replayed\n`,
              );
            if (process.stderr.isTTY && plan.pending > 0) {
              bar = new cliProgress.SingleBar(
                {
                  format: ' replaying {bar} seq {seq} · {value}/{total} messages',
                  stream: process.stderr,
                  hideCursor: true,
                  fps: 10,
                },
                cliProgress.Presets.shades_classic,
              );
              bar.start(plan.pending, 0, { seq: '-' });
            }
          },
          onProgress(s) {
            bar?.update(s.delivered, { seq: s.lastSeq ?? '-' });
            onBatch(s);
          },
        });
      const selection = {
        ...(o.since === undefined ? { from_seq: o.fromSeq } : { since: o.since }),
        until_seq: o.untilSeq ?? null,
      };
      const summary =
        o.dryRun === true
          ? await replay(() => undefined)
          : await audited(
              db.db,
              { action: 'inbox replay', selection, affected: 0, note: o.note ?? null },
              async (e) => {
                const took = (s: Readonly<InboxReplaySummary>) => {
                  e.affected = s.applied;
                  e.outcome = { ...s };
                };
                const done = await replay(took);
                took(done);
                return done;
              },
            );
      bar?.stop();
      bar = undefined;

      // 4. The counts.
      process.stdout.write(JSON.stringify(summary) + '\n');
      process.stderr.write(summaryLine(summary) + '\n');
    } finally {
      await nats.nc.close().catch(() => undefined);
    }
  } finally {
    bar?.stop();
    await db.close();
  }
}
