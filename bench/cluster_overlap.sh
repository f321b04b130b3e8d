#!/usr/bin/env bash
# How much of the exchange the chunked overlap hides, on the emulated cluster
# (scripts/cluster.sh): P = NODES x RPN ranks at one link rate, the same chunk count
# with --a2a-overlap 0 and 1, runs alternated (the machine is shared), medians over
# every run's steps after 2 warm-up steps. Hidden fraction = (a2a_s without overlap -
# a2a_exposed_s with overlap) / a2a_s without overlap.
# Usage: bench/cluster_overlap.sh [build-dir] [steps]
#   env: MODEL=m1 RATE=1gbit NODES=2 RPN=2 CHUNKS=4 BATCH=2 SEQ=128 REPS=3 A2A="flat 2d"
#        VOCAB=n: MODEL's config with that vocabulary (a small one leaves the experts and
#        the exchange to dominate the step)
set -euo pipefail
BUILD=${1:-build}
STEPS=${2:-6}
BIN=$(cd "$BUILD" && pwd)/bagualu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLUSTER=$ROOT/scripts/cluster.sh
MODEL=${MODEL:-m1}; RATE=${RATE:-1gbit}; NODES=${NODES:-2}; RPN=${RPN:-2}; CHUNKS=${CHUNKS:-4}
BATCH=${BATCH:-2}; SEQ=${SEQ:-128}; REPS=${REPS:-3}; A2A=${A2A:-flat 2d}
D=$(mktemp -d)
NAME=o$(( $$ % 10000000 ))
trap '"$CLUSTER" down --name $NAME >/dev/null 2>&1; rm -rf "$D"' EXIT

# median of field $2 over the steps after 2 warm-up steps of every log given after it
median() { local f=$1; shift; for l in "$@"; do grep -o "\"$f\":[0-9.e+-]*" "$l" | cut -d: -f2 | tail -n +3; done |
           sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

CFG=$ROOT/configs/$MODEL.json
if [ -n "${VOCAB:-}" ]; then
  sed "s/\"vocab_size\": *[0-9]*/\"vocab_size\": $VOCAB/" "$CFG" >"$D/model.json"
  CFG=$D/model.json
fi
vocab=$(grep -o '"vocab_size": *[0-9]*' "$CFG" | grep -o '[0-9]*$')
"$BIN" synth --vocab "$vocab" --span 64 --tokens 400000 --out "$D/data.bin" >/dev/null
"$CLUSTER" up "$NODES" --link-rate "$RATE" --name "$NAME" >/dev/null
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; commit $(git -C "$ROOT" rev-parse --short HEAD)"
echo "$MODEL (vocab $vocab), $NODES nodes x $RPN ranks (1 thread each; $((NODES * RPN)) ranks on $(nproc) cores: oversubscribed), link $RATE (no added latency), per-rank batch $BATCH x $SEQ, $CHUNKS chunks, $REPS alternated runs x $STEPS steps"
printf "%-6s %-8s %10s %14s %10s %12s\n" a2a overlap a2a_s a2a_exposed_s step_s tokens/s
for a2a in $A2A; do
  for r in $(seq "$REPS"); do
    for ov in 0 1; do
      OMP_NUM_THREADS=1 "$CLUSTER" run --name "$NAME" "$RPN" -- "$BIN" train \
        --config "$CFG" --data "$D/data.bin" --batch-size "$BATCH" \
        --seq-len "$SEQ" --steps "$STEPS" --threads 1 --a2a "$a2a" --a2a-chunks "$CHUNKS" \
        --a2a-overlap "$ov" ${EXTRA:-} --log "$D/$a2a-$ov-$r.jsonl" >"$D/out" 2>&1 ||
        { echo "$a2a overlap $ov: failed"; tail -3 "$D/out"; exit 1; }
    done
  done
  for ov in 0 1; do
    logs=("$D/$a2a-$ov"-*.jsonl)
    printf "%-6s %-8s %10.4f %14.4f %10.3f %12.0f\n" "$a2a" "$ov" "$(median a2a_s "${logs[@]}")" \
      "$(median a2a_exposed_s "${logs[@]}")" "$(median step_s "${logs[@]}")" "$(median tokens_per_s "${logs[@]}")"
  done
  off=$(median a2a_s "$D/$a2a-0"-*.jsonl); exp=$(median a2a_exposed_s "$D/$a2a-1"-*.jsonl)
  awk -v o="$off" -v e="$exp" -v a="$a2a" 'BEGIN{printf "%s: hidden fraction (a2a_s off - exposed on) / a2a_s off = %.0f%%\n", a, 100*(o-e)/o}'
done
