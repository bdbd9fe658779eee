#!/bin/sh
# First start of the PostgreSQL volume of deploy/compose.yaml (the postgres image runs the files of
# /docker-entrypoint-initdb.d/ once, as its superuser, over its local socket): the roles and the
# database of recognition-core from roles.sql, with the passwords of the compose secrets.
set -e
psql -X -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" --dbname postgres \
  -v migrator_password="$(cat /run/secrets/migrator-password)" \
  -v runtime_password="$(cat /run/secrets/runtime-password)" \
  -f /etc/recognition-core/roles.sql
