#!/usr/bin/env bash
# Flat vs hierarchical vs 2d all-to-all on the emulated cluster (scripts/cluster.sh):
# bench_a2a at each node count, ranks per node and link rate, small and large messages
# (1 thread per rank; more ranks than cores are oversubscribed). Times are bench_a2a's:
# the median of alternated rounds of the slowest rank. `auto` is what --a2a auto's cost
# model chooses from the links bench_a2a measured in the same run; `fastest` the
# measured fastest of flat, hierarchical, 2d (unchunked) and its lead over the next.
# Usage: bench/cluster_a2a.sh [build-dir]
#   env: NODES="2 4 8" RPN="1 2" RATES="1gbit 10gbit" SIZES="64 4096" WIDTH=256 ITERS=10
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLUSTER=$ROOT/scripts/cluster.sh
NODES=${NODES:-2 4 8}; RPN=${RPN:-1 2}; RATES=${RATES:-1gbit 10gbit}; SIZES=${SIZES:-64 4096}
WIDTH=${WIDTH:-256}; ITERS=${ITERS:-10}
NAME=a$(( $$ % 10000000 ))
OUT=$(mktemp)
trap '"$CLUSTER" down --name $NAME >/dev/null 2>&1; rm -f "$OUT"' EXIT
trap 'exit 130' INT TERM  # a signal would skip the EXIT trap: the cluster would be left
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; commit $(git -C "$ROOT" rev-parse --short HEAD); load $(cut -d' ' -f1-3 /proc/loadavg); 1 thread per rank; no added latency"
printf "%-5s %-3s %-7s %7s %8s %8s %8s %8s %8s %8s %10s %-12s %-12s %s\n" nodes rpn rate KB/rank flat_ms \
  hier_ms 2d_ms flat4_ms hier4_ms 2d4_ms inter_msgs fastest auto "auto's inputs (inter Gbit/s, lat us, gap us; sync us; ranks/core)"
for n in $NODES; do
  for rate in $RATES; do
    "$CLUSTER" up "$n" --link-rate "$rate" --name "$NAME" >/dev/null
    for r in $RPN; do
      for rows in $SIZES; do
        OMP_NUM_THREADS=1 "$CLUSTER" run --name "$NAME" "$r" -- "$BUILD/bench/bench_a2a" \
          --ranks-per-node 0 --rows "$rows" --width "$WIDTH" --iters "$ITERS" --progress 0 >"$OUT" 2>&1 ||
          { echo "bench_a2a failed at $n nodes x $r, $rate"; tail -3 "$OUT"; exit 1; }
        t() { awk -v k="$1" 'index($0, k) == 1 { print $NF }' "$OUT" | head -1; }
        m() { awk -v k="$1" 'index($0, k) == 1 { print $(NF-4) }' "$OUT" | head -1; }
        auto=$(sed -n 's/^auto: \([a-z0-9]*\), measured fastest \([a-z0-9]*\) .*/\1 \2/p' "$OUT")
        # the fastest's lead over the next: within the run-to-run spread, it is no winner
        lead=$(printf '%s\n' "$(t 'flat  ')" "$(t 'hierarchical  ')" "$(t '2d  ')" | sort -g |
               awk 'NR==1{a=$1} NR==2{printf "+%.0f%%", (a > 0 ? 100*($1-a)/a : 0)}')
        links=$(sed -n 's/^auto: .*inter-node \([^ ]*\) Gbit\/s, \([^ ]*\) us, gap \([^ ]*\) us;.* sync \([^ ]*\) us; \([0-9.]*\) ranks per core.*/\1, \2, \3; \4; \5/p' "$OUT")
        printf "%-5s %-3s %-7s %7.0f %8s %8s %8s %8s %8s %8s %10s %-12s %-12s %s\n" "$n" "$r" "$rate" \
          "$(awk -v r="$rows" -v w="$WIDTH" 'BEGIN{print r*w*4/1024}')" \
          "$(t 'flat  ')" "$(t 'hierarchical  ')" "$(t '2d  ')" "$(t 'flat, 4')" "$(t 'hierarchical, 4')" \
          "$(t '2d, 4')" "$(m 'flat  ')/$(m 'hierarchical  ')/$(m '2d  ')" "${auto#* } $lead" "${auto% *}" "$links"
        [ -n "${VERBOSE:-}" ] && grep '^auto' "$OUT" | sed 's/^/      /'
      done
    done
    "$CLUSTER" down --name "$NAME" >/dev/null
  done
done
echo "load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
