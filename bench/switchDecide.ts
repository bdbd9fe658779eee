/**
 * The baseline of the CPU measurement: the same decision as the machine's `decide()` for the
 * events the inbox and the watchdog send (acks, results, deadlines), written as a plain `switch`
 * with no XState — what the lifecycle would cost as hand-written code. Bench-only: the machine
 * stays the single source of truth; `cpu.ts` checks that both agree on every sample before timing.
 */
import type { JobDecision, JobEffect, JobEvent, JobState } from '../machines/index.js';

const FINAL = new Set(['done', 'needs_check', 'error', 'timeout', 'dlq']);

function noChange(job: JobState, decision: JobDecision['decision'], reason: string): JobDecision {
  return {
    decision,
    from: job.status,
    to: job.status,
    context: job.context,
    effects: [{ type: 'noteNoChange', params: { decision, reason } } as JobEffect],
    reason,
  };
}

/** `decide()` for ENVELOPE_PROCESSING, ENVELOPE_RESULT and DEADLINE_PASSED, as a switch. */
export function switchDecide(job: JobState, event: JobEvent): JobDecision {
  const c = job.context;
  switch (event.type) {
    case 'ENVELOPE_PROCESSING': {
      if (event.service.name !== c.targetService) return noChange(job, 'rejected', 'service_mismatch');
      if (job.status === 'processing') return noChange(job, 'duplicate', 'repeated_ack');
      if (job.status !== 'published') return noChange(job, 'ignored', 'ack_not_accepted');
      const context = {
        ...c,
        startedAt: event.now,
        serviceName: event.service.name,
        serviceVersion: event.service.version,
      };
      const effects: JobEffect[] = [];
      if (c.fileIsCurrent)
        effects.push({ type: 'setFileStatus', params: { status: 'PROCESSING', errorCode: null } });
      effects.push({
        type: 'recordTransition',
        params: { event: event.type, msgId: event.msgId, detail: { service: event.service.name } },
      });
      return { decision: 'applied', from: job.status, to: 'processing', context, effects, reason: null };
    }
    case 'ENVELOPE_RESULT': {
      if (event.service.name !== c.targetService) return noChange(job, 'rejected', 'service_mismatch');
      if (c.resultMsgId !== null && c.resultMsgId === event.msgId)
        return noChange(job, 'duplicate', 'same_msg_id');
      if (FINAL.has(job.status)) return noChange(job, 'late', 'result_after_final');
      const context = {
        ...c,
        serviceName: event.service.name,
        serviceVersion: event.service.version,
        finishedAt: event.now,
        metrics: event.metrics ?? null,
        errorCode: event.error?.code ?? null,
        errorMessage: event.error?.message ?? null,
        resultSchemaVersion: event.resultSchemaVersion ?? null,
        resultMsgId: event.msgId,
        nextPublishAt: null,
      };
      const effects: JobEffect[] = [];
      if (event.status !== 'error' && event.resultS3) {
        effects.push({
          type: 'registerResultObject',
          params: { bucket: event.resultS3.bucket, key: event.resultS3.key, createdBy: event.service.name },
        });
      }
      if (c.fileIsCurrent) {
        effects.push(
          event.status === 'error'
            ? { type: 'setFileStatus', params: { status: 'ERROR', errorCode: context.errorCode } }
            : { type: 'setFileStatus', params: { status: 'PROCESSING', errorCode: null } },
        );
      }
      const detail: Record<string, unknown> = { status: event.status, service: event.service.name };
      if (event.error) detail['error_code'] = event.error.code;
      effects.push({ type: 'recordTransition', params: { event: event.type, msgId: event.msgId, detail } });
      return { decision: 'applied', from: job.status, to: event.status, context, effects, reason: null };
    }
    case 'DEADLINE_PASSED': {
      if (job.status !== 'published' && job.status !== 'processing')
        return noChange(job, 'ignored', 'not_accepted');
      if (c.replyDeadline === null || c.replyDeadline.getTime() >= event.now.getTime()) {
        return noChange(job, 'ignored', 'deadline_not_passed');
      }
      const context = {
        ...c,
        errorCode: 'TIMEOUT',
        errorMessage: 'no result before reply_deadline',
        finishedAt: event.now,
      };
      const effects: JobEffect[] = [];
      if (c.fileIsCurrent)
        effects.push({ type: 'setFileStatus', params: { status: 'ERROR', errorCode: 'TIMEOUT' } });
      effects.push({ type: 'recordTransition', params: { event: event.type, msgId: null, detail: {} } });
      return { decision: 'applied', from: job.status, to: 'timeout', context, effects, reason: null };
    }
    default:
      throw new Error(`switchDecide: ${event.type} is not part of the bench`);
  }
}
