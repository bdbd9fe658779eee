#!/usr/bin/env bash
# The pooler tests start private PgBouncer processes (transaction and session mode) in front of the
# test PostgreSQL. Debian's `pgbouncer` package brings the binary. Install it when it is missing and
# we can (root, Debian's packages reachable), else say what to run. Only the binary is used: on a
# machine where systemd runs, the package also starts its own PgBouncer service on port 6432, which
# `systemctl disable --now pgbouncer` stops if it is not wanted.
set -euo pipefail
command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "npm test: installing Debian's pgbouncer (for the connection-pooler tests)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends pgbouncer >/dev/null \
    || { apt-get update >/dev/null && apt-get install -y --no-install-recommends pgbouncer >/dev/null; }
  exit 0
fi
echo "npm test: pgbouncer missing; install with: sudo apt-get install -y --no-install-recommends pgbouncer" >&2
exit 1
