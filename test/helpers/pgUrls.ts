/** Where the tests find PostgreSQL: `TEST_PG_URL` (a server URL), else the machine's local server. */
export function serverUrl(): string {
  return process.env.TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
}

/** The URL of database `name` on the test server. */
export function dbUrl(name: string): string {
  const u = new URL(serverUrl());
  u.pathname = `/${name}`;
  return u.toString();
}

/** The server's maintenance database, for CREATE/DROP DATABASE. */
export function adminUrl(): string {
  return dbUrl('postgres');
}
