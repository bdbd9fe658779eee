// Generated from machines/recognitionJob.machine.ts by `recognition-core statecharts`. Do not edit: run `npm run statecharts`.
// Stately Studio: create a machine, choose "Import from code", paste this file. Guards and actions are
// named only (their code lives in the machine); final statuses are plain states tagged `final`,
// because the daemon still reports events that reach a finished job.
import { createMachine } from 'xstate';

export const machine = createMachine({
  id: 'recognitionJob',
  description: 'One attempt to recognise one stored file by an external recognition service.',
  initial: 'pending',
  on: {
    PUBLISHED: {
      actions: [
        { type: 'noteNoChange', params: { decision: 'ignored', reason: 'not_accepted' } },
      ],
      description: 'not waiting to be published',
    },
    PUBLISH_FAILED: {
      actions: [
        { type: 'noteNoChange', params: { decision: 'ignored', reason: 'not_accepted' } },
      ],
      description: 'not waiting to be published',
    },
    DELIVERY_EXHAUSTED: {
      actions: [
        { type: 'noteNoChange', params: { decision: 'ignored', reason: 'not_accepted' } },
      ],
      description: 'not waiting for delivery',
    },
    DEADLINE_PASSED: {
      actions: [
        { type: 'noteNoChange', params: { decision: 'ignored', reason: 'not_accepted' } },
      ],
      description: 'not waiting for a reply',
    },
    ENVELOPE_PROCESSING: [
      {
        guard: 'isFromAnotherService',
        actions: [
          { type: 'noteNoChange', params: { decision: 'rejected', reason: 'service_mismatch' } },
        ],
        description: "service.name is not the job's target_service: rejected (quarantined), nothing changes",
      },
      {
        actions: [
          { type: 'noteNoChange', params: { decision: 'ignored', reason: 'ack_not_accepted' } },
        ],
        description: 'an ack the status does not take',
      },
    ],
    RETRY_REQUESTED: {
      actions: [
        { type: 'noteNoChange', params: { decision: 'ignored', reason: 'not_failed' } },
      ],
      description: 'only a failed job (error, timeout, dlq) is retried',
    },
  },
  states: {
    pending: {
      description: 'Created; the publisher has not yet had JetStream accept the job message.',
      on: {
        PUBLISHED: {
          target: 'published',
          actions: [
            'applyPublished',
            { type: 'recordAndSetFile', params: { file: null } },
          ],
          description: 'JetStream accepted the job message: reply_deadline = now + REPLY_TIMEOUT_MS',
        },
        PUBLISH_FAILED: [
          {
            target: 'dlq',
            guard: 'publishAttemptsExhausted',
            actions: [
              'applyPublishExhausted',
              { type: 'recordAndSetFile', params: { file: 'ERROR' } },
            ],
            description: "the last allowed attempt failed: dead letter, file ERROR (if still this job's)",
          },
          {
            actions: [
              'applyPublishRetry',
              { type: 'recordAndSetFile', params: { file: null } },
            ],
            description: 'attempts left: retry after an exponential backoff',
          },
        ],
        ENVELOPE_RESULT: [
          {
            guard: 'isFromAnotherService',
            actions: [
              { type: 'noteNoChange', params: { decision: 'rejected', reason: 'service_mismatch' } },
            ],
            description: "service.name is not the job's target_service: rejected (quarantined), nothing changes",
          },
          {
            guard: 'isSameResultMessage',
            actions: [
              { type: 'noteNoChange', params: { decision: 'duplicate', reason: 'same_msg_id' } },
            ],
            description: 'the same result message again',
          },
          {
            target: 'done',
            guard: 'reportsDone',
            actions: [
              'applyResult',
              'registerResultObjectIfAny',
              { type: 'recordAndSetFile', params: { file: 'PROCESSING' } },
            ],
            description: "the service reports done: register the result object; file PROCESSING (if still this job's)",
          },
          {
            target: 'needs_check',
            guard: 'reportsNeedsCheck',
            actions: [
              'applyResult',
              'registerResultObjectIfAny',
              { type: 'recordAndSetFile', params: { file: 'PROCESSING' } },
            ],
            description: "the service reports needs_check: register the result object; file PROCESSING (if still this job's)",
          },
          {
            target: 'error',
            guard: 'reportsError',
            actions: [
              'applyResult',
              { type: 'recordAndSetFile', params: { file: 'ERROR' } },
            ],
            description: "the service reports an error: file ERROR with the service's error code (if still this job's)",
          },
        ],
      },
    },
    published: {
      description: 'The job message is in the stream; waiting for the service to ack it.',
      on: {
        ENVELOPE_PROCESSING: [
          {
            guard: 'isFromAnotherService',
            actions: [
              { type: 'noteNoChange', params: { decision: 'rejected', reason: 'service_mismatch' } },
            ],
            description: "service.name is not the job's target_service: rejected (quarantined), nothing changes",
          },
          {
            target: 'processing',
            actions: [
              'applyAck',
              { type: 'recordAndSetFile', params: { file: 'PROCESSING' } },
            ],
            description: "the service acked: started_at, service name and version; file PROCESSING (if still this job's)",
          },
        ],
        ENVELOPE_RESULT: [
          {
            guard: 'isFromAnotherService',
            actions: [
              { type: 'noteNoChange', params: { decision: 'rejected', reason: 'service_mismatch' } },
            ],
            description: "service.name is not the job's target_service: rejected (quarantined), nothing changes",
          },
          {
            guard: 'isSameResultMessage',
            actions: [
              { type: 'noteNoChange', params: { decision: 'duplicate', reason: 'same_msg_id' } },
            ],
            description: 'the same result message again',
          },
          {
            target: 'done',
            guard: 'reportsDone',
            actions: [
              'applyResult',
              'registerResultObjectIfAny',
              { type: 'recordAndSetFile', params: { file: 'PROCESSING' } },
            ],
            description: "the service reports done: register the result object; file PROCESSING (if still this job's)",
          },
          {
            target: 'needs_check',
            guard: 'reportsNeedsCheck',
            actions: [
              'applyResult',
              'registerResultObjectIfAny',
              { type: 'recordAndSetFile', params: { file: 'PROCESSING' } },
            ],
            description: "the service reports needs_check: register the result object; file PROCESSING (if still this job's)",
          },
          {
            target: 'error',
            guard: 'reportsError',
            actions: [
              'applyResult',
              { type: 'recordAndSetFile', params: { file: 'ERROR' } },
            ],
            description: "the service reports an error: file ERROR with the service's error code (if still this job's)",
          },
        ],
        DELIVERY_EXHAUSTED: {
          target: 'dlq',
          actions: [
            'applyDeliveryExhausted',
            { type: 'recordAndSetFile', params: { file: 'ERROR' } },
          ],
          description: 'no service took the job message (JetStream max deliveries): dead letter, file ERROR',
        },
        DEADLINE_PASSED: [
          {
            target: 'timeout',
            guard: 'deadlinePassed',
            actions: [
              'applyTimeout',
              { type: 'recordAndSetFile', params: { file: 'ERROR' } },
            ],
            description: 'reply_deadline passed: file ERROR with TIMEOUT',
          },
          {
            actions: [
              {
                type: 'noteNoChange',
                params: { decision: 'ignored', reason: 'deadline_not_passed' },
              },
            ],
            description: 'reply_deadline not yet passed',
          },
        ],
      },
    },
    processing: {
      description: 'The service acked the job and is working on it.',
      on: {
        ENVELOPE_PROCESSING: [
          {
            guard: 'isFromAnotherService',
            actions: [
              { type: 'noteNoChange', params: { decision: 'rejected', reason: 'service_mismatch' } },
            ],
            description: "service.name is not the job's target_service: rejected (quarantined), nothing changes",
          },
          {
            actions: [
              { type: 'noteNoChange', params: { decision: 'duplicate', reason: 'repeated_ack' } },
            ],
            description: 'a repeated ack',
          },
        ],
        ENVELOPE_RESULT: [
          {
            guard: 'isFromAnotherService',
            actions: [
              { type: 'noteNoChange', params: { decision: 'rejected', reason: 'service_mismatch' } },
            ],
            description: "service.name is not the job's target_service: rejected (quarantined), nothing changes",
          },
          {
            guard: 'isSameResultMessage',
            actions: [
              { type: 'noteNoChange', params: { decision: 'duplicate', reason: 'same_msg_id' } },
            ],
            description: 'the same result message again',
          },
          {
            target: 'done',
            guard: 'reportsDone',
            actions: [
              'applyResult',
              'registerResultObjectIfAny',
              { type: 'recordAndSetFile', params: { file: 'PROCESSING' } },
            ],
            description: "the service reports done: register the result object; file PROCESSING (if still this job's)",
          },
          {
            target: 'needs_check',
            guard: 'reportsNeedsCheck',
            actions: [
              'applyResult',
              'registerResultObjectIfAny',
              { type: 'recordAndSetFile', params: { file: 'PROCESSING' } },
            ],
            description: "the service reports needs_check: register the result object; file PROCESSING (if still this job's)",
          },
          {
            target: 'error',
            guard: 'reportsError',
            actions: [
              'applyResult',
              { type: 'recordAndSetFile', params: { file: 'ERROR' } },
            ],
            description: "the service reports an error: file ERROR with the service's error code (if still this job's)",
          },
        ],
        DEADLINE_PASSED: [
          {
            target: 'timeout',
            guard: 'deadlinePassed',
            actions: [
              'applyTimeout',
              { type: 'recordAndSetFile', params: { file: 'ERROR' } },
            ],
            description: 'reply_deadline passed: file ERROR with TIMEOUT',
          },
          {
            actions: [
              {
                type: 'noteNoChange',
                params: { decision: 'ignored', reason: 'deadline_not_passed' },
              },
            ],
            description: 'reply_deadline not yet passed',
          },
        ],
      },
    },
    done: {
      description: 'Recognised; the mapping loop reads the result. The file stays PROCESSING.',
      tags: ['final'],
      on: {
        ENVELOPE_RESULT: [
          {
            guard: 'isFromAnotherService',
            actions: [
              { type: 'noteNoChange', params: { decision: 'rejected', reason: 'service_mismatch' } },
            ],
            description: "service.name is not the job's target_service: rejected (quarantined), nothing changes",
          },
          {
            guard: 'isSameResultMessage',
            actions: [
              { type: 'noteNoChange', params: { decision: 'duplicate', reason: 'same_msg_id' } },
            ],
            description: 'the applied result again',
          },
          {
            actions: [
              { type: 'noteNoChange', params: { decision: 'late', reason: 'result_after_final' } },
            ],
            description: 'a result after a final status: logged at warn, not applied',
          },
        ],
        ENVELOPE_PROCESSING: [
          {
            guard: 'isFromAnotherService',
            actions: [
              { type: 'noteNoChange', params: { decision: 'rejected', reason: 'service_mismatch' } },
            ],
            description: "service.name is not the job's target_service: rejected (quarantined), nothing changes",
          },
          {
            actions: [
              { type: 'noteNoChange', params: { decision: 'ignored', reason: 'ack_not_accepted' } },
            ],
            description: 'an ack after a final status',
          },
        ],
      },
    },
    needs_check: {
      description: 'Recognised with doubts; the mapping loop reads the result. The file stays PROCESSING.',
      tags: ['final'],
      on: {
        ENVELOPE_RESULT: [
          {
            guard: 'isFromAnotherService',
            actions: [
              { type: 'noteNoChange', params: { decision: 'rejected', reason: 'service_mismatch' } },
            ],
            description: "service.name is not the job's target_service: rejected (quarantined), nothing changes",
          },
          {
            guard: 'isSameResultMessage',
            actions: [
              { type: 'noteNoChange', params: { decision: 'duplicate', reason: 'same_msg_id' } },
            ],
            description: 'the applied result again',
          },
          {
            actions: [
              { type: 'noteNoChange', params: { decision: 'late', reason: 'result_after_final' } },
            ],
            description: 'a result after a final status: logged at warn, not applied',
          },
        ],
        ENVELOPE_PROCESSING: [
          {
            guard: 'isFromAnotherService',
            actions: [
              { type: 'noteNoChange', params: { decision: 'rejected', reason: 'service_mismatch' } },
            ],
            description: "service.name is not the job's target_service: rejected (quarantined), nothing changes",
          },
          {
            actions: [
              { type: 'noteNoChange', params: { decision: 'ignored', reason: 'ack_not_accepted' } },
            ],
            description: 'an ack after a final status',
          },
        ],
      },
    },
    error: {
      description: 'The service could not recognise the file. The file is ERROR until a retry.',
      tags: ['final'],
      on: {
        ENVELOPE_RESULT: [
          {
            guard: 'isFromAnotherService',
            actions: [
              { type: 'noteNoChange', params: { decision: 'rejected', reason: 'service_mismatch' } },
            ],
            description: "service.name is not the job's target_service: rejected (quarantined), nothing changes",
          },
          {
            guard: 'isSameResultMessage',
            actions: [
              { type: 'noteNoChange', params: { decision: 'duplicate', reason: 'same_msg_id' } },
            ],
            description: 'the applied result again',
          },
          {
            actions: [
              { type: 'noteNoChange', params: { decision: 'late', reason: 'result_after_final' } },
            ],
            description: 'a result after a final status: logged at warn, not applied',
          },
        ],
        ENVELOPE_PROCESSING: [
          {
            guard: 'isFromAnotherService',
            actions: [
              { type: 'noteNoChange', params: { decision: 'rejected', reason: 'service_mismatch' } },
            ],
            description: "service.name is not the job's target_service: rejected (quarantined), nothing changes",
          },
          {
            actions: [
              { type: 'noteNoChange', params: { decision: 'ignored', reason: 'ack_not_accepted' } },
            ],
            description: 'an ack after a final status',
          },
        ],
        RETRY_REQUESTED: [
          {
            guard: 'fileIsCurrent',
            actions: [
              'createNextAttempt',
              'applyRetried',
              { type: 'recordAndSetFile', params: { file: null } },
            ],
            description: 'retry: a new job, attempt + 1, starts in pending and the file (QUEUED) points at it; this job keeps its status',
          },
          {
            actions: [
              { type: 'noteNoChange', params: { decision: 'ignored', reason: 'file_not_current' } },
            ],
            description: 'the file already has a newer job: not retried',
          },
        ],
      },
    },
    timeout: {
      description: 'No result before reply_deadline. The file is ERROR (TIMEOUT) until a retry.',
      tags: ['final'],
      on: {
        ENVELOPE_RESULT: [
          {
            guard: 'isFromAnotherService',
            actions: [
              { type: 'noteNoChange', params: { decision: 'rejected', reason: 'service_mismatch' } },
            ],
            description: "service.name is not the job's target_service: rejected (quarantined), nothing changes",
          },
          {
            guard: 'isSameResultMessage',
            actions: [
              { type: 'noteNoChange', params: { decision: 'duplicate', reason: 'same_msg_id' } },
            ],
            description: 'the applied result again',
          },
          {
            actions: [
              { type: 'noteNoChange', params: { decision: 'late', reason: 'result_after_final' } },
            ],
            description: 'a result after a final status: logged at warn, not applied',
          },
        ],
        ENVELOPE_PROCESSING: [
          {
            guard: 'isFromAnotherService',
            actions: [
              { type: 'noteNoChange', params: { decision: 'rejected', reason: 'service_mismatch' } },
            ],
            description: "service.name is not the job's target_service: rejected (quarantined), nothing changes",
          },
          {
            actions: [
              { type: 'noteNoChange', params: { decision: 'ignored', reason: 'ack_not_accepted' } },
            ],
            description: 'an ack after a final status',
          },
        ],
        RETRY_REQUESTED: [
          {
            guard: 'fileIsCurrent',
            actions: [
              'createNextAttempt',
              'applyRetried',
              { type: 'recordAndSetFile', params: { file: null } },
            ],
            description: 'retry: a new job, attempt + 1, starts in pending and the file (QUEUED) points at it; this job keeps its status',
          },
          {
            actions: [
              { type: 'noteNoChange', params: { decision: 'ignored', reason: 'file_not_current' } },
            ],
            description: 'the file already has a newer job: not retried',
          },
        ],
      },
    },
    dlq: {
      description: 'The job message could not be delivered. The file is ERROR until a retry.',
      tags: ['final'],
      on: {
        ENVELOPE_RESULT: [
          {
            guard: 'isFromAnotherService',
            actions: [
              { type: 'noteNoChange', params: { decision: 'rejected', reason: 'service_mismatch' } },
            ],
            description: "service.name is not the job's target_service: rejected (quarantined), nothing changes",
          },
          {
            guard: 'isSameResultMessage',
            actions: [
              { type: 'noteNoChange', params: { decision: 'duplicate', reason: 'same_msg_id' } },
            ],
            description: 'the applied result again',
          },
          {
            actions: [
              { type: 'noteNoChange', params: { decision: 'late', reason: 'result_after_final' } },
            ],
            description: 'a result after a final status: logged at warn, not applied',
          },
        ],
        ENVELOPE_PROCESSING: [
          {
            guard: 'isFromAnotherService',
            actions: [
              { type: 'noteNoChange', params: { decision: 'rejected', reason: 'service_mismatch' } },
            ],
            description: "service.name is not the job's target_service: rejected (quarantined), nothing changes",
          },
          {
            actions: [
              { type: 'noteNoChange', params: { decision: 'ignored', reason: 'ack_not_accepted' } },
            ],
            description: 'an ack after a final status',
          },
        ],
        RETRY_REQUESTED: [
          {
            guard: 'fileIsCurrent',
            actions: [
              'createNextAttempt',
              'applyRetried',
              { type: 'recordAndSetFile', params: { file: null } },
            ],
            description: 'retry: a new job, attempt + 1, starts in pending and the file (QUEUED) points at it; this job keeps its status',
          },
          {
            actions: [
              { type: 'noteNoChange', params: { decision: 'ignored', reason: 'file_not_current' } },
            ],
            description: 'the file already has a newer job: not retried',
          },
        ],
      },
    },
  },
});
