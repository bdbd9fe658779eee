#!/bin/sh
# The secrets of deploy/compose.yaml: random passwords, and the database URLs that carry them, one
# file each in deploy/secrets/ (or the directory given). Run once before the first
# `docker compose up`; a file that exists is kept, so running it again changes nothing.
#
# The directory is 0700, so no other user of the host reaches the files. The files themselves are
# 0644: compose mounts them into the containers as they are, and the containers read them as their
# own users (PostgreSQL's, NATS's, recognition-core's 10001).
set -eu
dir="${1:-$(dirname "$0")/secrets}"
mkdir -p "$dir"
chmod 0700 "$dir"

# 32 letters and digits, the first a letter: nothing a URL or a shell reads specially, and
# nats-server reads the value of a variable its configuration names (`$NATS_CORE_PASSWORD`) as a
# configuration value, so a password starting with a digit would be parsed as a number and refused.
password() {
  printf '%s%s' \
    "$(LC_ALL=C tr -dc 'A-Za-z' </dev/urandom | head -c 1)" \
    "$(LC_ALL=C tr -dc 'A-Za-z0-9' </dev/urandom | head -c 31)"
}

put() {
  if [ ! -e "$dir/$1" ]; then
    printf '%s\n' "$2" >"$dir/$1"
    chmod 0644 "$dir/$1"
  fi
}

put postgres-password "$(password)"
put migrator-password "$(password)"
put runtime-password "$(password)"
put nats-core-password "$(password)"
put nats-service-password "$(password)"
put database-url-migrator \
  "postgres://recognition_migrator:$(cat "$dir/migrator-password")@postgres:5432/recognition"
put database-url-runtime \
  "postgres://recognition_runtime:$(cat "$dir/runtime-password")@postgres:5432/recognition"
