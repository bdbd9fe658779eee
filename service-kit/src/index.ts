/**
 * `@recognition/service-kit`: write a recognition service for recognition-core as one handler.
 *
 *     const running = await serve({ service, version, nats, handle: async (job, ctx) => ctx.done({ … }) });
 *
 * The wire-level contract the kit keeps is docs/contract.md of recognition-core.
 */
export {
  HANDLER_FAILED,
  INVALID_JOB_MESSAGE,
  INVALID_RESULT,
  NO_OUTCOME,
  invalidJobAnswer,
  serve,
  type Handler,
  type JobContext,
  type KitLogger,
  type Outcome,
  type ResultFields,
  type RunningService,
  type ServeOptions,
  type ServiceCounters,
} from './serve.js';
export {
  CONTRACT_EXCHANGE,
  EXCHANGE_ENV,
  SERVICE_NAME_PATTERN,
  envelopeMsgId,
  exchangeFromEnv,
  expectedResultPrefix,
  jobSubjectOf,
  resultKey,
  type Exchange,
  type S3Ref,
} from './exchange.js';
export {
  checkJobMessage,
  checkResultEnvelope,
  describeErrors,
  describeInvalidJob,
  type Checked,
  type SchemaError,
} from './validate.js';
export { contextOfHeaders, headersOfContext, TRACEPARENT, TRACESTATE, type HeaderLike } from './tracing.js';
export {
  jobMessageSchema,
  resultEnvelopeSchema,
  type JobMessage,
  type ResultEnvelope,
} from './generated/messages.js';
export {
  CONFORMANCE_CHECKS,
  conformanceExchange,
  runConformance,
  type ConformanceCheck,
  type ConformanceCheckName,
  type ConformanceOptions,
  type ConformanceReport,
} from './conformance.js';
