/**
 * A JetStream message as the inbox stores it ({@link RawMessage}), for every road that reads the
 * results stream: the live inbox and `inbox replay`. Rule: it reads the message only when asked
 * (only quarantine and log lines ask), so an envelope costs no header copy and no reply-subject
 * parse.
 */
import type { JsMsg } from '@nats-io/jetstream';
import type { RawMessage } from './inboxBatch.js';

/** A {@link RawMessage} over a received `JsMsg`; its headers are copied once, on first read. */
export class ReceivedMessage implements RawMessage {
  readonly data: Uint8Array;
  #headers: Record<string, string[]> | undefined;
  constructor(private readonly msg: JsMsg) {
    this.data = msg.data;
  }
  get subject(): string {
    return this.msg.subject;
  }
  get stream(): string {
    return this.msg.info.stream;
  }
  get streamSeq(): number {
    return this.msg.seq;
  }
  get headers(): Record<string, string[]> {
    if (this.#headers === undefined) {
      const headers: Record<string, string[]> = {};
      const h = this.msg.headers;
      if (h) for (const k of h.keys()) headers[k] = h.values(k);
      this.#headers = headers;
    }
    return this.#headers;
  }
}
