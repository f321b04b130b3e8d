#!/usr/bin/env bash
# Weak scaling on the emulated cluster (scripts/cluster.sh): M1 and M2 at a fixed
# per-rank batch on 1 node x 2 ranks, 2 x 1, 2 x 2 and 4 x 2, at two link rates, with
# each all-to-all algorithm. Every layout runs inside emulated nodes (the 1-node row
# too), 1 thread per rank. The machine has CORES cores: layouts with more ranks than
# cores are oversubscribed, so throughput is compared per core used (all rows use
# every core), and the efficiency is tokens/s against 1 node x 2 ranks at the same
# link rate. Medians over the steps after 2 warm-up steps. ar%: the gradient and
# parameter reductions' share of the step (all-reduce, or ZeRO-1's reduce-scatter and
# all-gather), arx%: the part of it the step waited for (below ar% with --grad-overlap 1).
# Usage: bench/cluster_scaling.sh [build-dir] [steps]
#   env: MODELS="m1 m2" RATES="10gbit 1gbit" A2A="flat hierarchical 2d auto"
#        LAYOUTS="1x2 2x1 2x2 4x2" BATCH=2 SEQ=128 EXTRA="flags for train"
set -euo pipefail
BUILD=${1:-build}
STEPS=${2:-10}
BIN=$(cd "$BUILD" && pwd)/bagualu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLUSTER=$ROOT/scripts/cluster.sh
MODELS=${MODELS:-m1 m2}
RATES=${RATES:-10gbit 1gbit}
A2A=${A2A:-flat hierarchical 2d auto}
LAYOUTS=${LAYOUTS:-1x2 2x1 2x2 4x2}
BATCH=${BATCH:-2}
SEQ=${SEQ:-128}
CORES=$(nproc)
D=$(mktemp -d)
NAME=s$(( $$ % 10000000 ))
trap '"$CLUSTER" down --name $NAME >/dev/null 2>&1; rm -rf "$D"' EXIT
trap 'exit 130' INT TERM  # a signal would skip the EXIT trap: the cluster would be left

median() { grep -o "\"$2\":[0-9.e+-]*" "$1" | cut -d: -f2 | tail -n +3 | sort -g |
           awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $CORES cores; commit $(git -C "$ROOT" rev-parse --short HEAD)"
echo "per-rank batch $BATCH x $SEQ tokens, $STEPS steps, 1 thread per rank; ranks > $CORES are oversubscribed"
printf "%-4s %-7s %-6s %-13s %10s %10s %8s %7s %7s %7s %7s\n" model rate layout a2a tokens/s per-core eff a2a% exp% ar% arx%
for model in $MODELS; do
  vocab=$(grep -o '"vocab_size": *[0-9]*' "$ROOT/configs/$model.json" | grep -o '[0-9]*$')
  "$BIN" synth --vocab "$vocab" --span 64 --tokens 400000 --out "$D/$model.bin" >/dev/null
  for rate in $RATES; do
    base=""
    for layout in $LAYOUTS; do
      nodes=${layout%x*}; rpn=${layout#*x}; P=$((nodes * rpn))
      "$CLUSTER" up "$nodes" --link-rate "$rate" --name "$NAME" >/dev/null
      for a2a in $A2A; do
        log="$D/$model-$rate-$layout-$a2a.jsonl"
        if ! OMP_NUM_THREADS=1 "$CLUSTER" run --name "$NAME" "$rpn" -- "$BIN" train \
            --config "$ROOT/configs/$model.json" --data "$D/$model.bin" --batch-size "$BATCH" \
            --seq-len "$SEQ" --steps "$STEPS" --threads 1 --a2a "$a2a" ${EXTRA:-} --log "$log" \
            >"$D/out" 2>&1; then
          echo "$model $rate $layout $a2a: failed"; tail -3 "$D/out"; continue
        fi
        tps=$(median "$log" tokens_per_s); st=$(median "$log" step_s)
        a2s=$(median "$log" a2a_s); ars=$(median "$log" allreduce_s); exs=$(median "$log" a2a_exposed_s)
        arx=$(median "$log" allreduce_exposed_s)
        [ -z "$base" ] && base=$tps
        awk -v m="$model" -v r="$rate" -v l="$layout" -v a="$a2a" -v t="$tps" -v c="$CORES" -v P="$P" \
            -v b="$base" -v s="$st" -v x="$a2s" -v y="$ars" -v e="${exs:-0}" -v z="${arx:-0}" 'BEGIN{
          used = P < c ? P : c
          printf "%-4s %-7s %-6s %-13s %10.0f %10.0f %7.0f%% %6.1f%% %6.1f%% %6.1f%% %6.1f%%\n", m, r, l, a, t, t/used, 100*t/b,
                 100*x/s, 100*e/s, 100*y/s, 100*z/s }'
      done
      "$CLUSTER" down --name "$NAME"
    done
  done
done
