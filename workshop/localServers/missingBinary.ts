/** A server binary this machine lacks, and the one command that installs it. */

/** The Debian package that brings each local server's binaries. */
export type ServerPackage =
  'postgresql' | 'nats-server' | 'patroni' | 'etcd-server' | 'haproxy' | 'pgbouncer';

/** The one command that installs `packages` on Debian (and Ubuntu). */
export function installCommand(packages: readonly ServerPackage[]): string {
  return `apt-get install -y ${packages.join(' ')}`;
}

/** A local server cannot start: its binary is not installed. `debianPackage` brings it. */
export class MissingServerBinaryError extends Error {
  override name = 'MissingServerBinaryError';
  constructor(
    readonly debianPackage: ServerPackage,
    what: string,
    alternative: string,
  ) {
    super(`${what} not found: install it (${installCommand([debianPackage])}) or ${alternative}`);
  }
}
