/**
 * `inbox_quarantine.reason` is a closed list in the database (a CHECK constraint) and in the code
 * (`QUARANTINE_REASONS`): a reason the code writes but the database refuses would fail the inbox's
 * batch on every redelivery. Each migration freezes the list it sets; the newest one must be the
 * code's list, so a new reason cannot ship without its migration.
 */
import { describe, expect, it } from 'vitest';
import { QUARANTINE_REASONS } from '../../machines/index.js';
import {
  QUARANTINE_REASONS_0001,
  QUARANTINE_REASONS_0007,
} from '../../src/db/migrations/0007_quarantine_service_mismatch.js';
import { QUARANTINE_REASONS_0018 } from '../../src/db/migrations/0018_quarantine_result_object.js';
import { migrations } from '../../src/db/migrations/index.js';

describe('the quarantine reasons the database allows', () => {
  it('the newest migration that sets them allows exactly the reasons the code writes', () => {
    expect([...QUARANTINE_REASONS_0018].sort()).toEqual([...QUARANTINE_REASONS].sort());
    expect(Object.keys(migrations)).toContain('0018_quarantine_result_object');
  });

  it('only ever grows: every earlier reason is still allowed', () => {
    for (const reason of QUARANTINE_REASONS_0001) expect(QUARANTINE_REASONS_0007).toContain(reason);
    expect(QUARANTINE_REASONS_0007).toContain('SERVICE_MISMATCH');
    for (const reason of QUARANTINE_REASONS_0007) expect(QUARANTINE_REASONS_0018).toContain(reason);
    expect(QUARANTINE_REASONS_0018).toContain('RESULT_OBJECT_NOT_OWNED');
  });
});
