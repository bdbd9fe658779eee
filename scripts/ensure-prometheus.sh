#!/usr/bin/env bash
# The test suite checks the alerting rules with promtool, runs a real Prometheus against a running
# daemon, and verifies the systemd unit with systemd-analyze. Debian's `prometheus` package brings
# promtool and prometheus, its `systemd` package systemd-analyze. Install what is missing when we
# can (root, Debian's packages reachable), else say what to run. Only the binaries are used: on a
# machine where systemd runs, the package also starts its own Prometheus service, which
# `systemctl disable --now prometheus` stops if it is not wanted.
set -euo pipefail
missing=()
command -v promtool >/dev/null && command -v prometheus >/dev/null || missing+=(prometheus)
command -v systemd-analyze >/dev/null || missing+=(systemd)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "npm test: installing Debian's ${missing[*]} (promtool, prometheus, systemd-analyze for the monitoring and deployment tests)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null \
    || { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
  exit 0
fi
echo "npm test: ${missing[*]} missing; install with: sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
exit 1
