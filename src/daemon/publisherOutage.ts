/**
 * The publisher's outages: telling an outage of NATS or JetStream (wait, spend no attempt) from a
 * refusal of the message (record `PUBLISH_FAILED`, spend one), and waiting an outage out: one job per
 * round, after a pause that doubles, at once on a reconnect. The course of an outage and its pause
 * are pure ({@link outageAfterRound}, {@link outagePauseMs}); {@link createOutageWatch} holds the
 * current one and logs, counts and provisions around it (docs/development.md, "Why the loops are built as they are").
 */
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import { classifyPublishFailure } from '../nats/classifyPublishFailure.js';
import { PROVISION_AGAIN_AFTER_MS } from '../nats/provision.js';

/**
 * The longest pause between two tries during an outage: the end of an outage that no reconnect
 * announces (a frozen server that resumes keeps its connection) is noticed within this time.
 */
export const OUTAGE_PAUSE_MAX_MS = 5_000;

// ---------------------------------------------------------------------------------------------
// Outage or refusal

/** A failed publish as the publisher acts on it: a refusal spends an attempt, an outage waits. */
export interface PublishVerdict {
  kind: 'rejected' | 'unavailable';
  error: string;
}

/** Reads the failed publishes of one round. */
export interface RoundFailureReader {
  /** Outage or refusal, for `err` thrown by a publish on `subject`. */
  read(err: unknown, subject: string): Promise<PublishVerdict>;
  /** No stream answered on a job subject where the core provisions the streams: provision again. */
  readonly provisionWanted: boolean;
}

/** What {@link createFailureReader} needs. */
export interface FailureReaderOptions {
  js: JetStreamClient;
  /** The wildcard of every job subject (`recognition.job.>` by the contract). */
  jobSubjects: string;
  /** Whether the core provisions the streams (then its jobs stream binds every job subject). */
  provisions: boolean;
}

/** Names of the streams that bind `subject` (a wildcard finds the streams with subjects under it). */
async function streamsBinding(jsm: JetStreamManager, subject: string): Promise<string[]> {
  const names: string[] = [];
  for await (const name of jsm.streams.names(subject)) names.push(name);
  return names;
}

/**
 * A source of {@link RoundFailureReader}s, one per round: a reader asks JetStream what a 503 means
 * at most once per subject, and the JetStream manager it asks with is shared by every round.
 */
export function createFailureReader(opts: FailureReaderOptions): () => RoundFailureReader {
  const { js, jobSubjects } = opts;
  let jsm: Promise<JetStreamManager> | undefined;

  /**
   * What a 503 on `subject` means where the core does not provision the streams: a refusal when
   * streams bind job subjects but none binds this one, an outage when none binds any job subject
   * (the jobs stream is missing) or one binds it and did not answer (no leader).
   */
  async function noRespondersMeaning(subject: string): Promise<PublishVerdict> {
    try {
      jsm ??= js.jetstreamManager(false);
      const manager = await jsm;
      const binding = await streamsBinding(manager, subject);
      if (binding.length > 0) {
        return {
          kind: 'unavailable',
          error: `stream ${binding.join(', ')} binds ${subject} but did not answer`,
        };
      }
      const jobStreams = await streamsBinding(manager, jobSubjects);
      if (jobStreams.length > 0) {
        return {
          kind: 'rejected',
          error: `no stream binds subject ${subject} (streams for job subjects: ${jobStreams.join(', ')})`,
        };
      }
      return {
        kind: 'unavailable',
        error: `no stream binds job subjects (${jobSubjects}): the jobs stream is missing`,
      };
    } catch (err) {
      jsm = undefined;
      return {
        kind: 'unavailable',
        error: `no stream answered on ${subject}; asking JetStream failed: ${String(err)}`,
      };
    }
  }

  return () => {
    const noResponders = new Map<string, Promise<PublishVerdict>>();
    let provisionWanted = false;
    return {
      async read(err, subject) {
        const failure = classifyPublishFailure(err);
        if (failure.kind !== 'no_responders') return { kind: failure.kind, error: failure.reason };
        if (opts.provisions) {
          provisionWanted = true;
          return {
            kind: 'unavailable',
            error: `no stream answered on ${subject}: the jobs stream is missing or has no leader`,
          };
        }
        let meaning = noResponders.get(subject);
        if (!meaning) noResponders.set(subject, (meaning = noRespondersMeaning(subject)));
        return meaning;
      },
      get provisionWanted() {
        return provisionWanted;
      },
    };
  };
}

// ---------------------------------------------------------------------------------------------
// Waiting an outage out

/** An outage the publisher waits out. */
export interface Outage {
  /** When it began (epoch milliseconds). */
  since: number;
  /** The failure that began it. */
  reason: string;
  /** Publishes put off since it began. */
  deferred: number;
  /** Rounds that found NATS still unavailable (the pause doubles with each). */
  rounds: number;
}

/**
 * The outage after a round that put off the publishes that failed with `deferredErrors`, at `now`:
 * one begins (its reason the first error) or goes on when the round put any off; there is none
 * when it put none off (JetStream answered, or nothing was due to try). Pure.
 */
export function outageAfterRound(
  outage: Outage | undefined,
  deferredErrors: readonly string[],
  now: number,
): Outage | undefined {
  if (deferredErrors.length === 0) return undefined;
  const current = outage ?? { since: now, reason: deferredErrors[0]!, deferred: 0, rounds: 0 };
  return { ...current, deferred: current.deferred + deferredErrors.length, rounds: current.rounds + 1 };
}

/**
 * The pause before the next try of an outage that has lasted `rounds` rounds: doubles per round
 * from `PUBLISH_BACKOFF_BASE_MS`, capped by {@link OUTAGE_PAUSE_MAX_MS} and `PUBLISH_BACKOFF_MAX_MS`.
 * Pure.
 */
export function outagePauseMs(
  rounds: number,
  cfg: Pick<Config, 'PUBLISH_BACKOFF_BASE_MS' | 'PUBLISH_BACKOFF_MAX_MS'>,
): number {
  const cap = Math.min(OUTAGE_PAUSE_MAX_MS, cfg.PUBLISH_BACKOFF_MAX_MS);
  return Math.min(cfg.PUBLISH_BACKOFF_BASE_MS * 2 ** Math.min(rounds - 1, 20), cap);
}

/** What {@link createOutageWatch} needs. */
export interface OutageWatchOptions {
  log: Logger;
  metrics?: Metrics | undefined;
  config: Pick<Config, 'PUBLISH_BACKOFF_BASE_MS' | 'PUBLISH_BACKOFF_MAX_MS'>;
  /** Provision the streams again, where the core provisions them. */
  provision?: (() => Promise<void>) | undefined;
}

/** The current outage of a publisher, and what it does about it. */
export interface OutageWatch {
  /** Whether an outage is on: the publisher waits for NATS or JetStream. */
  readonly active: boolean;
  /** How many due jobs the next round locks: one during an outage (the oldest due tries whether NATS is back). */
  roundLimit(batchSize: number): number;
  /** Begin, continue or end the outage after a round, and say so once at each end. */
  note(deferredErrors: readonly string[]): void;
  /** The pause before the next try of the outage. */
  pauseMs(): number;
  /**
   * After a round in which no stream answered on a job subject (`provisionWanted`): provision the
   * streams again once the outage has lasted `PROVISION_AGAIN_AFTER_MS` — other code that deleted
   * the stream gets a moment to re-create it first. A failure is logged, not thrown.
   */
  recover(provisionWanted: boolean): Promise<void>;
}

/** Create the outage watch of a publisher; no outage is on. */
export function createOutageWatch(opts: OutageWatchOptions): OutageWatch {
  const { log, metrics } = opts;
  let outage: Outage | undefined;

  const pauseMs = () => outagePauseMs(outage?.rounds ?? 1, opts.config);

  async function provisionAgain(provision: () => Promise<void>): Promise<void> {
    try {
      await provision();
      log.info(
        { event: 'publisher_provisioned' },
        'no stream answered on a job subject: streams provisioned again',
      );
    } catch (err) {
      log.warn(
        { err, event: 'publisher_provision_failed' },
        'provisioning the streams again failed; retrying',
      );
    }
  }

  return {
    get active() {
      return outage !== undefined;
    },
    roundLimit: (batchSize) => (outage ? 1 : batchSize),
    note(deferredErrors) {
      const before = outage;
      const now = Date.now();
      outage = outageAfterRound(before, deferredErrors, now);
      if (outage) {
        metrics?.publisherOutageWaits.inc(deferredErrors.length);
        if (!before) {
          metrics?.publisherNatsUnavailable.set(1);
          log.warn(
            { event: 'publisher_nats_unavailable', reason: outage.reason, deferred: deferredErrors.length },
            'NATS unavailable: publishing waits; jobs stay pending, their publish attempts unspent',
          );
        }
        log.debug(
          {
            event: 'publisher_nats_still_unavailable',
            reason: deferredErrors[0],
            deferred: outage.deferred,
            retry_in_ms: pauseMs(),
          },
          'NATS still unavailable',
        );
      } else if (before) {
        log.info(
          {
            event: 'publisher_nats_available',
            unavailable_ms: now - before.since,
            deferred: before.deferred,
            reason: before.reason,
          },
          'NATS available again: publishing resumes',
        );
        metrics?.publisherNatsUnavailable.set(0);
      }
    },
    pauseMs,
    async recover(provisionWanted) {
      if (!provisionWanted || !outage || !opts.provision) return;
      if (Date.now() - outage.since < PROVISION_AGAIN_AFTER_MS) return;
      await provisionAgain(opts.provision);
    },
  };
}
