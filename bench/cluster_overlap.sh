#!/usr/bin/env bash
# How much of the exchange the chunked overlap hides, on the emulated cluster
# (scripts/cluster.sh): P = NODES x RPN ranks at one link rate, the same chunk count
# with --a2a-overlap 0 and 1, runs alternated (the machine is shared), medians over
# every run's steps after 2 warm-up steps. Hidden fraction = (a2a_s without overlap -
# a2a_exposed_s with overlap) / a2a_s without overlap.
# Where the exchange time goes: variant 0p is overlap 0 with --a2a-skew-probe (a timed
# barrier before each all-to-all): a2a_skew_s is waiting for the slowest rank, a2a_s the
# exchange proper after it. cpu/wall: each rank's user+system CPU seconds over its wall
# seconds (whole run, /usr/bin/time), the median over ranks and runs. With 0p and 1p
# (overlap 1 probed: the trip home, opened between the chunks' experts, is not probed)
# the script also prints the hidden fraction of the exchange proper (skew left out).
# Usage: bench/cluster_overlap.sh [build-dir] [steps]
#   env: MODEL=m1 RATE=1gbit NODES=2 RPN=2 CHUNKS=4 BATCH=2 SEQ=128 REPS=3 A2A="flat 2d"
#        VARIANTS="0 1": --a2a-overlap of each run, a suffix p adds the skew probe, o runs
#        with OpenMPI's own TCP settings (CLUSTER_TCP_EAGER=0, see scripts/cluster.sh);
#        EXTRA: more train options
#        VOCAB=n: MODEL's config with that vocabulary (a small one leaves the experts and
#        the exchange to dominate the step); ROUTER=name: its router_type (swipe balances
#        the experts' rows, so that no rank waits for a busier one)
set -euo pipefail
BUILD=${1:-build}
STEPS=${2:-6}
BIN=$(cd "$BUILD" && pwd)/bagualu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLUSTER=$ROOT/scripts/cluster.sh
MODEL=${MODEL:-m1}; RATE=${RATE:-1gbit}; NODES=${NODES:-2}; RPN=${RPN:-2}; CHUNKS=${CHUNKS:-4}
BATCH=${BATCH:-2}; SEQ=${SEQ:-128}; REPS=${REPS:-3}; A2A=${A2A:-flat 2d}; VARIANTS=${VARIANTS:-0 1}
D=$(mktemp -d)
NAME=o$(( $$ % 10000000 ))
trap '"$CLUSTER" down --name $NAME >/dev/null 2>&1; rm -rf "$D"' EXIT
trap 'exit 130' INT TERM  # a signal would skip the EXIT trap: the cluster would be left

# median of field $2 over the steps after 2 warm-up steps of every log given after it
median() { local f=$1; shift; for l in "$@"; do { grep -o "\"$f\":[0-9.e+-]*" "$l" || true; } | cut -d: -f2 | tail -n +3; done |
           sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

CFG=$ROOT/configs/$MODEL.json
if [ -n "${VOCAB:-}" ]; then
  sed "s/\"vocab_size\": *[0-9]*/\"vocab_size\": $VOCAB/" "$CFG" >"$D/model.json"
  CFG=$D/model.json
fi
if [ -n "${ROUTER:-}" ]; then
  sed "s/^{/{\n  \"router_type\": \"$ROUTER\",/" "$CFG" >"$D/router.json"
  CFG=$D/router.json
fi
vocab=$(grep -o '"vocab_size": *[0-9]*' "$CFG" | grep -o '[0-9]*$')
"$BIN" synth --vocab "$vocab" --span 64 --tokens 400000 --out "$D/data.bin" >/dev/null
"$CLUSTER" up "$NODES" --link-rate "$RATE" --name "$NAME" >/dev/null
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; commit $(git -C "$ROOT" rev-parse --short HEAD)"
echo "$MODEL (vocab $vocab), $NODES nodes x $RPN ranks (1 thread each; $((NODES * RPN)) ranks on $(nproc) cores$( [ $((NODES * RPN)) -gt "$(nproc)" ] && echo ": oversubscribed")), link $RATE (no added latency), per-rank batch $BATCH x $SEQ, $CHUNKS chunks, $REPS alternated runs x $STEPS steps"
echo "TCP eager limit and socket buffers ${CLUSTER_TCP_EAGER:-4194304} bytes (variants with o: OpenMPI's defaults)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-6s %-8s %10s %14s %10s %10s %12s %9s\n" a2a overlap a2a_s a2a_exposed_s a2a_skew_s step_s tokens/s cpu/wall
for a2a in $A2A; do
  for r in $(seq "$REPS"); do
    for v in $VARIANTS; do
      probe=(); [[ $v == *p* ]] && probe=(--a2a-skew-probe)
      eager=${CLUSTER_TCP_EAGER:-4194304}; [[ $v == *o* ]] && eager=0
      CLUSTER_TCP_EAGER=$eager OMP_NUM_THREADS=1 "$CLUSTER" run --name "$NAME" "$RPN" -- /usr/bin/time -a -o "$D/cpu-$a2a-$v" \
        -f "%U %S %e" "$BIN" train \
        --config "$CFG" --data "$D/data.bin" --batch-size "$BATCH" \
        --seq-len "$SEQ" --steps "$STEPS" --threads 1 --a2a "$a2a" --a2a-chunks "$CHUNKS" \
        --a2a-overlap "${v//[^01]/}" "${probe[@]}" ${EXTRA:-} --log "$D/$a2a-$v-$r.jsonl" >"$D/out" 2>&1 ||
        { echo "$a2a overlap $v: failed"; tail -3 "$D/out"; exit 1; }
    done
  done
  for v in $VARIANTS; do
    logs=("$D/$a2a-$v"-*.jsonl)
    skew=$(median a2a_skew_s "${logs[@]}"); cpu=$(awk 'NF == 3 {print ($1 + $2) / $3}' "$D/cpu-$a2a-$v" | sort -g |
      awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}')
    printf "%-6s %-8s %10.4f %14.4f %10.4f %10.3f %12.0f %9.2f\n" "$a2a" "$v" "$(median a2a_s "${logs[@]}")" \
      "$(median a2a_exposed_s "${logs[@]}")" "${skew:-0}" "$(median step_s "${logs[@]}")" \
      "$(median tokens_per_s "${logs[@]}")" "$cpu"
  done
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  off=$(median a2a_s "$D/$a2a-0"-*.jsonl); exp=$(median a2a_exposed_s "$D/$a2a-1"-*.jsonl)
  awk -v o="$off" -v e="$exp" -v a="$a2a" 'BEGIN{printf "%s: hidden fraction (a2a_s off - exposed on) / a2a_s off = %.0f%%\n", a, 100*(o-e)/o}'
  if [[ " $VARIANTS " == *" 0p "* && " $VARIANTS " == *" 1p "* ]]; then
    off=$(median a2a_s "$D/$a2a-0p"-*.jsonl); exp=$(median a2a_exposed_s "$D/$a2a-1p"-*.jsonl)
    awk -v o="$off" -v e="$exp" -v a="$a2a" 'BEGIN{printf "%s: skew left out (a2a_s 0p - exposed 1p) / a2a_s 0p = %.0f%%\n", a, 100*(o-e)/o}'
  fi
done
