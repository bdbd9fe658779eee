#!/usr/bin/env bash
# The test suite opens /statechart in a real headless browser: Debian's Chromium, driven by
# playwright-core. A fresh machine of this kind does not have it: install it when we can (root,
# Debian's packages reachable), else say what to run.
set -euo pipefail
[ -x /usr/bin/chromium ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "npm test: installing Debian's chromium (for the /statechart browser test)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends chromium >/dev/null \
    || { apt-get update >/dev/null && apt-get install -y --no-install-recommends chromium >/dev/null; }
  exit 0
fi
echo "npm test: /usr/bin/chromium is missing; install it with: sudo apt-get install -y chromium" >&2
exit 1
