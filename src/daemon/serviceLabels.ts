/**
 * Which `service.name` values may become a metric label. A sender writes any name it likes into
 * an envelope, so a label taken from it unchecked lets one client create series without end. A
 * name becomes a label only once the core has seen it as a job's `target_service` — an envelope
 * the machine accepted for its job (the machine accepts only the job's own service), or the
 * expected name of a `SERVICE_MISMATCH` — and at most {@link SERVICE_LABELS_MAX} names do; any
 * other is counted as `other`.
 */
import { SERVICE_LABEL_OTHER } from '../metrics.js';

/** Distinct service names used as label values, at most. */
export const SERVICE_LABELS_MAX = 64;

/** The known service names of one inbox, learned as it runs. */
export class ServiceLabels {
  readonly #known = new Set<string>();

  /** Note `name` as a job's `target_service` (while there is room). */
  learn(name: string): void {
    if (this.#known.size < SERVICE_LABELS_MAX) this.#known.add(name);
  }

  /** The label value for a message naming `name`: the name when known, `other` otherwise. */
  labelOf(name: string | null | undefined): string {
    return name !== null && name !== undefined && this.#known.has(name) ? name : SERVICE_LABEL_OTHER;
  }
}
