#!/usr/bin/env bash
# The failover chaos scenarios (`npm run chaos -- --scenario failover|switchover|async-loss`, and
# their short cases in the test suite) run PostgreSQL under Patroni, with etcd as its store and
# HAProxy in front: Debian's `patroni`, `etcd-server` and `haproxy` packages. Only the binaries are
# used; the harness starts its own processes on loopback ports. Install what is missing when we
# can (root, Debian's packages reachable), else say what to run.
set -euo pipefail
missing=()
command -v patroni >/dev/null && command -v patronictl >/dev/null || missing+=(patroni)
command -v etcd >/dev/null || missing+=(etcd-server)
command -v haproxy >/dev/null || missing+=(haproxy)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "chaos: installing Debian's ${missing[*]} (Patroni, etcd and HAProxy for the failover scenarios)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null \
    || { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
  exit 0
fi
echo "chaos: ${missing[*]} missing; install with: sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
exit 1
