/** One answer for many callers: the HTTP endpoints' bound on work per request. */
/**
 * `ask`, shared: an answer in flight is every caller's however long it takes, and a settled one,
 * failures included, is reused for `reuseMs`: a burst of requests asks once, during an outage too.
 */
export function sharedAnswer<T>(ask: () => Promise<T>, reuseMs: number): () => Promise<T> {
  let last: { at: number; answer: Promise<T>; settled: boolean } | undefined;
  return () => {
    const now = Date.now();
    if (!last || (last.settled && now - last.at >= reuseMs)) {
      const answer = ask();
      const entry = { at: now, answer, settled: false };
      last = entry;
      const settle = () => void (entry.settled = true);
      answer.then(settle, settle);
    }
    return last.answer;
  };
}
