/**
 * The publisher's reading of a failed publish: every error @nats-io/jetstream 3.x raises from
 * `JetStreamClient.publish`, built from the client's own classes, as it raises them.
 */
import { JetStreamApiError, JetStreamError } from '@nats-io/jetstream';
import { jserrors } from '@nats-io/jetstream/internal';
import {
  ClosedConnectionError,
  DrainingConnectionError,
  InvalidArgumentError,
  NoRespondersError,
  PermissionViolationError,
  RequestError,
  TimeoutError,
} from '@nats-io/nats-core';
import { describe, expect, it } from 'vitest';
import { classifyPublishFailure } from '../../src/nats/classifyPublishFailure.js';

const apiError = (code: number, err_code: number, description: string) =>
  new JetStreamApiError({ code, err_code, description });
const noResponders = () =>
  new RequestError("no responders: 'recognition.job.x'", {
    cause: new NoRespondersError('recognition.job.x'),
  });

describe('classifyPublishFailure', () => {
  it.each([
    ['no ack in time', new TimeoutError(), 'unavailable'],
    ['the connection closed', new ClosedConnectionError(), 'unavailable'],
    ['the connection draining', new DrainingConnectionError(), 'unavailable'],
    ['a request cut by a disconnect', new RequestError('connection disconnected'), 'unavailable'],
    [
      'JetStream temporarily unavailable (10008)',
      apiError(503, 10008, 'JetStream system temporarily unavailable'),
      'unavailable',
    ],
    [
      'no cluster leader (10009)',
      apiError(500, 10009, 'JetStream cluster can not handle request'),
      'unavailable',
    ],
    ['JetStream not enabled (10076)', apiError(503, 10076, 'JetStream not enabled'), 'unavailable'],
    ['insufficient resources (10023)', apiError(503, 10023, 'insufficient resources'), 'unavailable'],
    [
      'storage failing (10077, not a limit)',
      apiError(503, 10077, 'write /data/x: no space left on device'),
      'unavailable',
    ],
    [
      'JetStream off for the account',
      new jserrors.JetStreamNotEnabled('JetStream not enabled for account', {
        cause: apiError(503, 10039, 'JetStream not enabled for account'),
      }),
      'unavailable',
    ],
    [
      'over the server’s max_payload',
      InvalidArgumentError.format('payload', 'max_payload size exceeded'),
      'rejected',
    ],
    [
      'no permission for the subject',
      new RequestError('Permissions Violation', {
        cause: new PermissionViolationError('Permissions Violation', 'publish', 'recognition.job.x'),
      }),
      'rejected',
    ],
    [
      'over the stream’s max_msg_size (10054)',
      apiError(400, 10054, 'message size exceeds maximum allowed'),
      'rejected',
    ],
    [
      'expected stream does not match (10060)',
      apiError(400, 10060, 'expected stream does not match'),
      'rejected',
    ],
    [
      'a full stream that discards new (10077)',
      apiError(503, 10077, 'maximum messages exceeded'),
      'rejected',
    ],
    ['bytes limit (10077)', apiError(503, 10077, 'maximum bytes exceeded'), 'rejected'],
    ['account limits (10002)', apiError(400, 10002, 'resource limits exceeded for account'), 'rejected'],
    ['an answer that is no ack', new JetStreamError('invalid ack response'), 'rejected'],
    ['something unknown', new Error('surprise'), 'rejected'],
    [
      'a 503: no responders',
      new jserrors.JetStreamNotEnabled('jetstream is not enabled', { cause: noResponders() }),
      'no_responders',
    ],
    ['a bare no-responders request error', noResponders(), 'no_responders'],
  ])('%s: %s', (_what, err, kind) => {
    const failure = classifyPublishFailure(err);
    expect(failure.kind).toBe(kind);
    expect(failure.reason).toContain((err as Error).message);
  });
});
