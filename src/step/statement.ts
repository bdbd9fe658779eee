/**
 * Named SQL statements. A driver that prepares statements by name parses and plans each once per
 * connection, and reuses it for as long as the name stands for the same text. The name is derived
 * from the text, so a changed text always gets a new name and is prepared anew, and nobody keeps a
 * version number by hand.
 */
import { createHash } from 'node:crypto';

/** A statement's text and the name it is prepared under (the same name always means the same text). */
export interface Statement {
  readonly name: string;
  readonly text: string;
}

/** PostgreSQL keeps names of at most this many bytes (NAMEDATALEN - 1); longer ones would collide. */
const MAX_NAME_BYTES = 63;

/**
 * A statement named `rc_<label>_<hash of text>`: the label says what it is in
 * `pg_prepared_statements`, the hash tells texts apart.
 */
export function defineStatement(label: string, text: string): Statement {
  if (!/^[a-z][a-z0-9_]*$/.test(label)) throw new Error(`statement label must be snake_case: ${label}`);
  const hash = createHash('sha256').update(text).digest('hex').slice(0, 12);
  const name = `rc_${label}_${hash}`;
  if (Buffer.byteLength(name) > MAX_NAME_BYTES) throw new Error(`statement name too long: ${name}`);
  return { name, text };
}
