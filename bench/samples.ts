/**
 * Inputs of the memory measurement: job rows as the step reads them (`SELECT j.*`) and the
 * events the daemon sends, in the mix an inbox sees (acks, results, a duplicate, a late result)
 * plus the watchdog's deadline. Each call builds fresh objects, as each message would.
 */
import type { JobEvent } from '../machines/index.js';
import type { JobRow } from '../src/db/schema.js';

/** A row + event pair, and whether the file's current job is this one. */
export interface Sample {
  name: string;
  row: JobRow;
  fileIsCurrent: boolean;
  event: JobEvent;
}

const SERVICE = { name: 'tabular-parser', version: '2.3.1' };

function row(i: number, status: JobRow['status'], extra: Partial<JobRow> = {}): JobRow {
  const t = 1_700_000_000_000 + i;
  const hex = i.toString(16).padStart(12, '0').slice(-12);
  return {
    id: `00000000-0000-4000-8000-${hex}`,
    file_id: `11111111-0000-4000-8000-${hex}`,
    attempt: 1,
    target_service: 'tabular-parser',
    status,
    service_name: null,
    service_version: null,
    publish_attempts: 1,
    next_publish_at: null,
    published_at: new Date(t - 60_000),
    reply_deadline: new Date(t + 600_000),
    started_at: null,
    finished_at: null,
    metrics: null,
    error_code: null,
    error_message: null,
    result_schema_version: null,
    result_s3_object_id: null,
    result_msg_id: null,
    created_at: new Date(t - 120_000),
    updated_at: new Date(t - 60_000),
    ...extra,
  };
}

/** The i-th sample of the mix (cycles through five cases). */
export function sample(i: number): Sample {
  const now = new Date(1_700_000_000_000 + i + 1_000);
  const r = row(i, 'published');
  switch (i % 5) {
    case 0:
      return {
        name: 'ack on published',
        row: r,
        fileIsCurrent: true,
        event: { type: 'ENVELOPE_PROCESSING', msgId: `ack:${r.id}:1`, service: SERVICE, now },
      };
    case 1:
      return {
        name: 'done on published',
        row: r,
        fileIsCurrent: true,
        event: {
          type: 'ENVELOPE_RESULT',
          msgId: `result:${r.id}:1`,
          status: 'done',
          service: SERVICE,
          resultS3: { bucket: 'arm-ka', key: `results/${r.file_id}/${r.id}/result.json` },
          resultSchemaVersion: '1.0',
          metrics: { pages: 2, duration_ms: 420 },
          now,
        },
      };
    case 2: {
      const p = row(i, 'processing', {
        started_at: new Date(now.getTime() - 30_000),
        service_name: 'tabular-parser',
        service_version: '2.3.1',
      });
      return {
        name: 'error on processing',
        row: p,
        fileIsCurrent: true,
        event: {
          type: 'ENVELOPE_RESULT',
          msgId: `result:${p.id}:1`,
          status: 'error',
          service: SERVICE,
          error: { code: 'UNSUPPORTED_FORMAT', message: 'xls 95' },
          now,
        },
      };
    }
    case 3: {
      const d = row(i, 'done', {
        finished_at: new Date(now.getTime() - 5_000),
        result_msg_id: `result:${r.id}:1`,
        metrics: { pages: 2 },
      });
      return {
        name: 'duplicate result',
        row: d,
        fileIsCurrent: true,
        event: {
          type: 'ENVELOPE_RESULT',
          msgId: `result:${d.id}:1`,
          status: 'done',
          service: SERVICE,
          metrics: { pages: 2 },
          now,
        },
      };
    }
    default: {
      const p = row(i, 'processing', {
        reply_deadline: new Date(now.getTime() - 1),
        started_at: new Date(now.getTime() - 30_000),
      });
      return {
        name: 'deadline on processing',
        row: p,
        fileIsCurrent: true,
        event: { type: 'DEADLINE_PASSED', now },
      };
    }
  }
}
