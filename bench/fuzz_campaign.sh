#!/usr/bin/env bash
# Fuzz campaign: every libFuzzer target (fuzz.mk, tests/fuzz/) for N inputs or a wall
# time, one after the other; writes one line per target (inputs run, seconds, corpus
# size, crashes) to OUT, and the crash inputs to OUT's folder. Exit 1 when any target
# crashed. A crash's input, once fixed, goes to tests/fuzz/<target>/crashes/.
# Usage: bench/fuzz_campaign.sh [--runs N] [--time SECONDS] [--out FILE] [TARGET...]
#   default: 10,000,000 inputs per target, no time limit, out/fuzz_campaign.txt
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
RUNS=10000000; TIME=0; OUT=out/fuzz_campaign.txt; targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --runs) RUNS=$2; shift 2 ;;
    --time) TIME=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -*) echo "fuzz_campaign: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || for f in tests/fuzz/fuzz_*.c; do t=${f#tests/fuzz/fuzz_}; targets+=("${t%.c}"); done
make --no-print-directory fuzz-build >/dev/null || { echo "fuzz_campaign: build failed (make fuzz-build)" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"
FIND=$(cd "$(dirname "$OUT")" && pwd)/fuzz-findings
mkdir -p "$FIND"
{
  echo "# fuzz campaign, commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo +dirty), $(date -u +%F)"
  echo "# runs per target: $RUNS, time limit per target: ${TIME}s (0: none)"
  printf '%-14s %12s %8s %8s %8s\n' target inputs seconds corpus crashes
} >"$OUT"
any=0
for t in "${targets[@]}"; do
  corpus=build-fuzz/corpus-$t
  mkdir -p "$corpus"
  dict=(); [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  log=$FIND/$t.log
  start=$(date +%s)
  # -fork-less, one process: a crash ends the target's run; the count is what ran.
  build-fuzz/fuzz_$t -runs="$RUNS" -max_total_time="$TIME" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "${dict[@]}" -artifact_prefix="$FIND/$t-" \
    "$corpus" tests/fuzz/$t/seeds tests/fuzz/$t/crashes >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  inputs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  crashes=$(ls "$FIND" | grep -c "^$t-\(crash\|leak\|timeout\|oom\)-")
  [ $rc -ne 0 ] && [ "$crashes" -eq 0 ] && crashes=1  # died without an artifact: count it
  [ "$crashes" -gt 0 ] && any=1
  printf '%-14s %12s %8s %8s %8s\n' "$t" "${inputs:-?}" "$secs" "$(ls "$corpus" | wc -l)" "$crashes" | tee -a "$OUT"
done
echo "findings (logs, crash inputs): $FIND" >>"$OUT"
exit $any
