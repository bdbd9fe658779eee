/**
 * What `retention run` does when it runs (registered in `./retention.ts`): one pass now; the
 * counts to stdout as one JSON document, a one-line summary to stderr.
 */
import { runRetentionPass, retentionSettings } from '../daemon/retention.js';
import { formatSpan } from '../duration.js';
import { plural, print } from './plumbing.js';
import { withDb } from './withDb.js';

/** `retention run [--dry-run]`: one pass now, from the oldest expired job; counts per class. */
export async function runAction(o: { dryRun?: boolean }): Promise<void> {
  const dryRun = o.dryRun === true;
  const { result, settings } = await withDb(async (db, cfg) => {
    const settings = retentionSettings(cfg);
    return { settings, result: await runRetentionPass(db.db, { settings, dryRun }) };
  });
  const kept = (ms: number) => (ms === 0 ? 'forever' : formatSpan(ms));
  print({
    dry_run: dryRun,
    busy: result.busy,
    succeeded: { retention: kept(settings.succeededMs), ...result.succeeded },
    failed: { retention: kept(settings.failedMs), ...result.failed },
    quarantine: { retention: kept(settings.quarantineMs), ...result.quarantine },
    duration_ms: result.durationMs,
    rested_ms: result.restedMs,
  });
  if (result.busy) {
    process.stderr.write('another instance is running a retention pass: nothing deleted; run again later\n');
    return;
  }
  const jobs = result.succeeded.jobs + result.failed.jobs;
  process.stderr.write(
    `${dryRun ? 'would delete' : 'deleted'} ${plural(jobs, 'job')} (${result.succeeded.jobs} succeeded, ${result.failed.jobs} failed) with ${plural(result.succeeded.transitions + result.failed.transitions, 'transition')}, and ${plural(result.quarantine.messages, 'quarantined message')}\n`,
  );
}
