#!/usr/bin/env bash
# Flat vs hierarchical vs 2d all-to-all on the emulated cluster (scripts/cluster.sh):
# bench_a2a at each node count and link rate, small and large messages, RPN ranks per
# node (1 thread each; more ranks than cores are oversubscribed). Times are bench_a2a's:
# the median of alternated rounds of the slowest rank.
# Usage: bench/cluster_a2a.sh [build-dir]
#   env: NODES="2 4" RATES="1gbit 10gbit" RPN=2 SIZES="64 4096" WIDTH=256 ITERS=10
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLUSTER=$ROOT/scripts/cluster.sh
NODES=${NODES:-2 4}; RATES=${RATES:-1gbit 10gbit}; RPN=${RPN:-2}; SIZES=${SIZES:-64 4096}
WIDTH=${WIDTH:-256}; ITERS=${ITERS:-10}
NAME=a$(( $$ % 10000000 ))
OUT=$(mktemp)
trap '"$CLUSTER" down --name $NAME >/dev/null 2>&1; rm -f "$OUT"' EXIT
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; commit $(git -C "$ROOT" rev-parse --short HEAD); $RPN ranks per node, 1 thread each; no added latency"
printf "%-5s %-7s %9s %9s %9s %9s %9s %9s %9s %12s %12s\n" nodes rate KB/rank flat_ms hier_ms 2d_ms \
  flat4_ms hier4_ms 2d4_ms inter_msgs "f/h/2d"
for n in $NODES; do
  for rate in $RATES; do
    "$CLUSTER" up "$n" --link-rate "$rate" --name "$NAME" >/dev/null
    for rows in $SIZES; do
      OMP_NUM_THREADS=1 "$CLUSTER" run --name "$NAME" "$RPN" -- "$BUILD/bench/bench_a2a" \
        --ranks-per-node 0 --rows "$rows" --width "$WIDTH" --iters "$ITERS" >"$OUT" 2>&1 ||
        { echo "bench_a2a failed at $n nodes $rate"; tail -3 "$OUT"; exit 1; }
      t() { awk -v k="$1" 'index($0, k) == 1 { print $NF }' "$OUT" | head -1; }
      m() { awk -v k="$1" 'index($0, k) == 1 { print $(NF-4) }' "$OUT" | head -1; }
      printf "%-5s %-7s %9.0f %9s %9s %9s %9s %9s %9s %12s\n" "$n" "$rate" \
        "$(awk -v r="$rows" -v w="$WIDTH" 'BEGIN{print r*w*4/1024}')" \
        "$(t 'flat  ')" "$(t 'hierarchical  ')" "$(t '2d  ')" "$(t 'flat, 4')" "$(t 'hierarchical, 4')" \
        "$(t '2d, 4')" "$(m 'flat  ')/$(m 'hierarchical  ')/$(m '2d  ')"
      grep '^progress' "$OUT" | sed 's/^/      /'
    done
    "$CLUSTER" down --name "$NAME" >/dev/null
  done
done
