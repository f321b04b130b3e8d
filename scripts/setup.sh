#!/usr/bin/env bash
# Idempotent set-up on Debian: installs only the packages that are missing.
# Usage: scripts/setup.sh [build|test]   (test adds what the test suite needs)
set -euo pipefail
want=(build-essential cmake libdnnl-dev libcjson-dev)
if [ "${1:-build}" = test ]; then
  want+=(python3 python3-numpy)
fi
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
