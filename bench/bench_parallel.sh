#!/usr/bin/env bash
# Issue 5's benchmark: M1 trained at P=2 ranks x 1 thread (expert-parallel 2) beside
# P=1 x 2 threads on the same global batch (8 x 256 tokens), in one run; the ratio
# of throughputs and the share of step time spent communicating. Then flat vs
# hierarchical all-to-all message counts and bytes at P=4 with 2 emulated nodes.
# Usage: bench/bench_parallel.sh [build-dir] [steps]
set -euo pipefail
BUILD=${1:-build}
STEPS=${2:-12}
BIN=$BUILD/bagualu
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
MPIRUN=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe --bind-to none)
"$BIN" synth --vocab 50257 --span 64 --tokens 2000000 --out "$D/t.bin" >/dev/null
args=(--config configs/m1.json --data "$D/t.bin" --seq-len 256 --steps "$STEPS" --lr 1e-4)

# median of a JSON field over the steps after the first two (warm-up)
median() { grep -o "\"$2\":[0-9.e+-]*" "$1" | cut -d: -f2 | tail -n +3 | sort -g |
           awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

"$BIN" train "${args[@]}" --batch-size 8 --threads 2 --log "$D/p1.jsonl" >/dev/null
"${MPIRUN[@]}" -np 2 "$BIN" train "${args[@]}" --batch-size 4 --threads 1 --expert-parallel 2 \
  --log "$D/p2.jsonl" >/dev/null
t1=$(median "$D/p1.jsonl" tokens_per_s)
t2=$(median "$D/p2.jsonl" tokens_per_s)
s2=$(median "$D/p2.jsonl" step_s)
a2=$(median "$D/p2.jsonl" a2a_s)
r2=$(median "$D/p2.jsonl" allreduce_s)
echo "M1, global batch 8 x 256, $STEPS steps (medians after 2 warm-up steps)"
printf "  P=1 x 2 threads:            %8.0f tokens/s\n" "$t1"
printf "  P=2 x 1 thread (EP=2):      %8.0f tokens/s   = %.2f x P=1 x 2 threads\n" "$t2" \
  "$(awk -v a="$t2" -v b="$t1" 'BEGIN{print a/b}')"
printf "  P=2 communication share:    %.1f%% of the step (all-to-all %.0f ms, all-reduce %.0f ms of %.0f ms; rank 0)\n" \
  "$(awk -v a="$a2" -v r="$r2" -v s="$s2" 'BEGIN{print 100*(a+r)/s}')" \
  "$(awk -v a="$a2" 'BEGIN{print a*1000}')" "$(awk -v a="$r2" 'BEGIN{print a*1000}')" \
  "$(awk -v a="$s2" 'BEGIN{print a*1000}')"
echo
echo "flat vs hierarchical all-to-all, P=4, 2 emulated nodes of 2 ranks (bench_a2a):"
"${MPIRUN[@]}" -np 4 "$BUILD/bench/bench_a2a" --ranks-per-node 2 2>&1 | grep -v "^$" | sed -n '1,20p'
