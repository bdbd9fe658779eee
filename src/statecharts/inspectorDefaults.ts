/**
 * The inspector's defaults, apart from the inspector itself, so that the CLI can offer
 * `--inspect-port` without loading the inspector (the Stately packages, ws).
 */

/**
 * Port of the local inspection server unless `--inspect-port` says otherwise. Not 8080: that is
 * the daemon's default HTTP_PORT, and a developer often runs both.
 */
export const DEFAULT_INSPECT_PORT = 8090;
