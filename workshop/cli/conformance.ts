/**
 * `conformance --service NAME -- <command...>`: run a recognition service's command against a
 * private exchange on the NATS of the configuration (NATS_URL and credentials) and report, check
 * by check, whether it keeps the contract (`service-kit/src/conformance.ts`). Exit 0 when every
 * check passes, 1 when one fails, 2 for a mistake on the command line.
 */
import type { Command } from 'commander';
import { InvalidArgumentError } from '../../src/cli/commander.js';
import { wholeNumber } from '../../src/cli/plumbing.js';

const HELP = `
The service is spawned from <command...> (everything after --, run without a shell, so that
SIGTERM reaches it) with NATS_URL and RECOGNITION_JOBS_STREAM, RECOGNITION_JOB_SUBJECT_PREFIX and
RECOGNITION_RESULT_SUBJECT naming a private exchange: streams CONFORMANCE_<ID>_JOBS and
CONFORMANCE_<ID>_RESULTS, deleted at the end. RECOGNITION_JOBS, RECOGNITION_RESULTS and their
consumers are never touched, so the check can run next to a core. Checks: ack-deadline,
result-schema, service-name, traceparent, stable-msg-ids, invalid-job, sigterm.

Example:
  recognition-core conformance --service tabular-parser -- \\
    recognition-core service tabular-parser --weights done=1 --delay 500`;

const serviceName = (value: string) => {
  if (!/^[A-Za-z0-9_-]{1,200}$/.test(value))
    throw new InvalidArgumentError('must be letters, digits, _ and - (the subject suffix)');
  return value;
};

export function registerConformanceCommand(program: Command): void {
  program
    .command('conformance')
    .description(
      "run a recognition service's command on a private exchange and check, one by one, that it keeps the contract",
    )
    .requiredOption(
      '--service <name>',
      'the target service: its subject suffix and service.name',
      serviceName,
    )
    .option('--ack-timeout <ms>', 'the processing ack must arrive within this', wholeNumber(1), 10_000)
    .option(
      '--result-timeout <ms>',
      "a result must arrive within this (the jobs' reply_deadline)",
      wholeNumber(1),
      30_000,
    )
    .option('--stop-timeout <ms>', 'SIGTERM must stop the service within this', wholeNumber(1), 30_000)
    .option(
      '--ack-wait <ms>',
      "ack wait of the service's consumer on the private stream",
      wholeNumber(100),
      5_000,
    )
    .option('--json', 'print the report as one JSON object')
    .argument('<command...>', "the service's command and its arguments, after --")
    .addHelpText('after', HELP)
    .action(
      async (
        command: string[],
        o: {
          service: string;
          ackTimeout: number;
          resultTimeout: number;
          stopTimeout: number;
          ackWait: number;
          json?: boolean;
        },
      ) => {
        const { commandConfig } = await import('../../src/cli/commandConfig.js');
        const { commandLogger } = await import('../../src/cli/commandLogger.js');
        const { connectNats } = await import('../../src/nats/connection.js');
        const { runConformance } = await import('../../service-kit/src/conformance.js');
        const cfg = commandConfig();
        const logger = commandLogger(cfg, { base: { command: 'conformance' } });
        const nats = await connectNats(cfg, logger, { name: 'recognition-core-conformance' });
        try {
          const report = await runConformance({
            nats: nats.nc,
            natsUrl: cfg.NATS_URL,
            service: o.service,
            command,
            ackTimeoutMs: o.ackTimeout,
            resultTimeoutMs: o.resultTimeout,
            stopTimeoutMs: o.stopTimeout,
            ackWaitMs: o.ackWait,
            onCheck: o.json
              ? undefined
              : (c) => process.stdout.write(`${c.ok ? 'PASS' : 'FAIL'} ${c.name.padEnd(14)} ${c.detail}\n`),
          });
          if (o.json) process.stdout.write(`${JSON.stringify(report)}\n`);
          else {
            const failed = report.checks.filter((c) => !c.ok).map((c) => c.name);
            process.stdout.write(
              failed.length
                ? `${o.service}: ${failed.length} of ${report.checks.length} checks failed: ${failed.join(', ')}\n`
                : `${o.service}: all ${report.checks.length} checks passed\n`,
            );
            if (failed.length && report.serviceOutput.length)
              process.stdout.write(
                `last lines of the service:\n${report.serviceOutput.map((l) => `  ${l}`).join('\n')}\n`,
              );
          }
          process.exitCode = report.ok ? 0 : 1;
        } finally {
          await nats.nc.drain().catch(() => undefined);
        }
      },
    );
}
