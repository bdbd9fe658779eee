-- A database that recognition-core already uses with one role (a superuser, or the role that
-- migrated it), moved to the two roles of roles.sql. Run once, as a superuser, connected to that
-- database, then run narrow-runtime.sql:
--
--   psql -v ON_ERROR_STOP=1 -v migrator_password="$(cat migrator-password)" \
--        -v runtime_password="$(cat runtime-password)" -d recognition -f deploy/postgres/adopt-database.sql
--
-- Stop the daemon first; afterwards give `migrate` and `start` the URLs of the new roles.

CREATE ROLE recognition_migrator LOGIN PASSWORD :'migrator_password';
CREATE ROLE recognition_runtime LOGIN PASSWORD :'runtime_password';
ALTER DATABASE :"DBNAME" OWNER TO recognition_migrator;
REVOKE ALL ON DATABASE :"DBNAME" FROM PUBLIC;
GRANT CONNECT ON DATABASE :"DBNAME" TO recognition_runtime;

-- Everything the migrations made (tables with their identity sequences, the functions of the
-- triggers) now belongs to the migration role, so later migrations may change it.
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT oid::regclass AS name FROM pg_class
           WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p') LOOP
    EXECUTE format('ALTER TABLE %s OWNER TO recognition_migrator', r.name);
  END LOOP;
  FOR r IN SELECT oid::regprocedure AS name FROM pg_proc
           WHERE pronamespace = 'public'::regnamespace LOOP
    EXECUTE format('ALTER FUNCTION %s OWNER TO recognition_migrator', r.name);
  END LOOP;
END $$;

-- As roles.sql, and the same privileges on the tables and sequences that exist already.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO recognition_runtime;
ALTER DEFAULT PRIVILEGES FOR ROLE recognition_migrator IN SCHEMA public
  GRANT SELECT, INSERT, UPDATE ON TABLES TO recognition_runtime;
ALTER DEFAULT PRIVILEGES FOR ROLE recognition_migrator IN SCHEMA public
  GRANT USAGE ON SEQUENCES TO recognition_runtime;
ALTER DEFAULT PRIVILEGES FOR ROLE recognition_migrator IN SCHEMA public
  GRANT EXECUTE ON FUNCTIONS TO recognition_runtime;
GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO recognition_runtime;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO recognition_runtime;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO recognition_runtime;
