#!/usr/bin/env bash
# Step time of this tree against a base commit, measured together: bench_step of both
# builds alternated (A B A B ...), so machine drift hits both alike; prints each pair's
# ratio new/base and their median per precision.
#
#   bench/ab_step.sh [BASE] [PAIRS]       BASE default 5e67fd0 (before issue 13), PAIRS 4
#   CONFIG=configs/m1.json DTYPES="fp32 bf16" STEPS=6 BATCH=8 SEQ=256 THREADS=2
#   BITS_DIR (default /tmp/bagualu-bits) holds the base worktree and its build, as for
#   bench/refactor_bits.sh; NEW_BUILD (default build/) this tree's build.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${1:-5e67fd0}
PAIRS=${2:-4}
CONFIG=${CONFIG:-configs/m1.json}
DTYPES=${DTYPES:-fp32 bf16}
STEPS=${STEPS:-6} BATCH=${BATCH:-8} SEQ=${SEQ:-256} THREADS=${THREADS:-2}
. bench/base_worktree.sh
base_build bench_step
OLD=$base_tree/build/bench/bench_step
NEW=$NEW_BUILD/bench/bench_step
echo "ab_step: $(lscpu | sed -n 's/^Model name: *//p'), new $(git rev-parse --short HEAD) vs base ${base_sha:0:7}"
echo "$CONFIG batch $BATCH x $SEQ, $THREADS threads, $STEPS timed steps per run, $PAIRS pairs"

step_ms() {  # bench_step binary, dtype -> median ms/step of one run
    "$1" --config "$ROOT/$CONFIG" --batch "$BATCH" --seq "$SEQ" --threads "$THREADS" \
        --steps "$STEPS" --warmup 2 --dtype "$2" | sed -n 's/^train step: median \([0-9.]*\) ms.*/\1/p'
}

for dt in $DTYPES; do
    ratios=()
    for ((i = 1; i <= PAIRS; i++)); do
        # Alternate which build goes first, so neither always runs on a warmer machine.
        if ((i % 2)); then a=$(step_ms "$OLD" "$dt"); b=$(step_ms "$NEW" "$dt")
        else b=$(step_ms "$NEW" "$dt"); a=$(step_ms "$OLD" "$dt"); fi
        r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.4f", b / a }')
        ratios+=("$r")
        printf '%s pair %d: base %s ms, new %s ms, new/base %s\n' "$dt" "$i" "$a" "$b" "$r"
    done
    med=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{ v[NR] = $1 } END {
        print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    printf '%s: median new/base over %d pairs %s\n' "$dt" "$PAIRS" "$med"
done
