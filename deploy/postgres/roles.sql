-- The two roles of recognition-core and its database (docs/deployment.md, "Database roles").
-- Run once, as a superuser, before the first `recognition-core migrate`:
--
--   psql -v ON_ERROR_STOP=1 -v migrator_password="$(cat migrator-password)" \
--        -v runtime_password="$(cat runtime-password)" -f deploy/postgres/roles.sql
--
-- recognition_migrator owns the database and everything the migrations create; only
-- `recognition-core migrate` logs in as it. recognition_runtime is the daemon's: it reads, adds and
-- changes rows, and deletes only through the two retention functions the migrations create: they
-- run as recognition_migrator and delete finished jobs that are no file's current job (with their
-- transitions) and quarantined messages, older than a moment the caller names. It may not create,
-- alter, drop or truncate anything, nor delete a row of any table itself.

CREATE ROLE recognition_migrator LOGIN PASSWORD :'migrator_password';
CREATE ROLE recognition_runtime LOGIN PASSWORD :'runtime_password';
CREATE DATABASE recognition OWNER recognition_migrator;
-- Nobody else connects (PUBLIC may by default); the owner may anyway.
REVOKE ALL ON DATABASE recognition FROM PUBLIC;
GRANT CONNECT ON DATABASE recognition TO recognition_runtime;

\connect recognition
-- PostgreSQL 15 gives PUBLIC no CREATE on the schema public; earlier versions do.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO recognition_runtime;
-- Every table and sequence the migration role creates, now and in later migrations: rows may be
-- read, added and changed (identity columns draw from their sequences), never deleted directly.
ALTER DEFAULT PRIVILEGES FOR ROLE recognition_migrator IN SCHEMA public
  GRANT SELECT, INSERT, UPDATE ON TABLES TO recognition_runtime;
ALTER DEFAULT PRIVILEGES FOR ROLE recognition_migrator IN SCHEMA public
  GRANT USAGE ON SEQUENCES TO recognition_runtime;
-- Every function the migration role creates may be called: the retention functions, whose EXECUTE
-- the migrations take from PUBLIC, are the runtime role's only way to delete.
ALTER DEFAULT PRIVILEGES FOR ROLE recognition_migrator IN SCHEMA public
  GRANT EXECUTE ON FUNCTIONS TO recognition_runtime;
