/**
 * Behind PgBouncer in session mode (`DATABASE_POOLER=session`): three daemons apply
 * 10 000 results exactly once, publish due jobs (dead-letter one no service acks), time out
 * overdue ones and run a retention pass, and log no error line.
 */
import { describe, expect, it } from 'vitest';
import { useHarness } from '../helpers/harness.js';
import { runBehindPooler } from '../helpers/poolerScenario.js';

const t = useHarness({ database: true, nats: true, client: true });

describe('behind PgBouncer in session mode', () => {
  it('three daemons: 10 000 results applied once, due jobs published or dead-lettered, overdue timed out, a retention pass, no error line', async () => {
    expect(await runBehindPooler(t, 'session', 10_000)).toEqual({
      doneTransitions: 10_000,
      jobsDoneTwice: 0,
      quarantined: 0,
      jobMessages: 4,
      dueJobs: 3,
      retentionDeleted: 1,
      expiredLeft: false,
      listening: [true, true, true],
      errorLines: [],
      errorLinesAfterStop: [],
    });
  }, 90_000);
});
