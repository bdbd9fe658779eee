-- After the first `recognition-core migrate`, as recognition_migrator (or a superuser), connected
-- to the database recognition: take from the runtime role what the default privileges of
-- roles.sql gave it and the daemon does not use, and make sure it holds what the daemon does use.
-- Running it again changes nothing.

-- The migrations' bookkeeping: the daemon reads which ones ran (it refuses to start when one is
-- pending) and never takes the migration lock.
REVOKE INSERT, UPDATE ON kysely_migration FROM recognition_runtime;
REVOKE ALL ON kysely_migration_lock FROM recognition_runtime;
-- The legal status changes, read by the trigger that checks every change of a job's status.
REVOKE INSERT, UPDATE ON recognition_job_edge FROM recognition_runtime;
-- The transition log is written once per transition and never changed.
REVOKE UPDATE ON recognition_job_transition FROM recognition_runtime;
-- Retention and `quarantine purge` delete through these functions, which run as their owner. The
-- default privileges of roles.sql grant them as the migrations create them; this grants them on a
-- database whose roles were made without those default privileges.
GRANT EXECUTE ON FUNCTION
  recognition_retention_delete_jobs(text, timestamptz, timestamptz, uuid, integer),
  recognition_retention_delete_quarantined(timestamptz, text, integer)
  TO recognition_runtime;
-- An object is registered once and never changed: a result never takes over an existing row.
REVOKE UPDATE ON s3_object FROM recognition_runtime;
-- The audit log of operator actions is written once per action and never changed.
REVOKE UPDATE ON recognition_audit FROM recognition_runtime;
-- The console's counts: the trigger on recognition_job_transition appends each statement's new
-- transitions to recognition_transition_delta as the inserting role; the rollup loop takes them
-- and adds them to recognition_transition_minute, and expires its old minutes, through these
-- functions, which run as their owner; the console reads both tables.
REVOKE UPDATE ON recognition_transition_delta FROM recognition_runtime;
REVOKE INSERT, UPDATE ON recognition_transition_minute FROM recognition_runtime;
GRANT EXECUTE ON FUNCTION
  recognition_roll_up_transitions(bigint[], integer),
  recognition_expire_transition_minutes(timestamptz, integer)
  TO recognition_runtime;
