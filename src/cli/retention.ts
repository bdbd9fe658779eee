/**
 * `retention run`: one retention pass now, as the daemon runs them every `RETENTION_INTERVAL_MS`
 * (finished jobs and quarantined messages older than `RETENTION_*`; never a current or an open
 * job). This module registers it; what it does is in `./retentionActions.ts`, imported when it runs.
 */
import type { Command } from 'commander';

/** Register `retention run`. */
export function registerRetentionCommands(program: Command): void {
  const retention = program
    .command('retention')
    .description('delete finished jobs and quarantined messages older than their retention (RETENTION_*)');
  retention
    .command('run')
    .description(
      'one pass now: delete expired finished jobs (not current ones) with their transitions, and expired quarantined messages; prints the counts per class',
    )
    .option('--dry-run', 'count what would be deleted; delete nothing')
    .action(async (o: { dryRun?: boolean }) => {
      await (await import('./retentionActions.js')).runAction(o);
    });
}
