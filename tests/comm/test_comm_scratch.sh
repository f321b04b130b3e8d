#!/usr/bin/env bash
# The memory report's communicators' scratch (model/memory_plan.c, comm/dist.h's size
# functions) against what the run's communicators hold after it (the step lines'
# comm_scratch_hwm, rank 0): equal for the gradient reductions (all-reduce at --zero 0,
# reduce-scatter at --zero 1, on the world and the expert-data-parallel group; with
# --grad-overlap 1 the overlapped reduction's receive slots instead) up to
# the scalar statistics' all-reduces (SCALARS bytes); never above the report with a
# hierarchical or 2d exchange, whose scratch the report bounds. Why it can fail: a size
# function that drifts from the allocation, a communicator the report forgets.
. "$(dirname "$0")/dist_launch.sh"
dist_have_mpi || exit 77
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok   $*"; }
bad() { fail=$((fail+1)); echo "FAIL $*"; }
# The scalar statistics (losses, norms, counts: at most a few hundred doubles) share the
# reduction slot of each communicator; the report leaves them out.
SCALARS=16384

"$BIN" synth --vocab 64 --tokens 20000 --out "$D/t.bin" >/dev/null
CFG=$(cd "$(dirname "$0")/../../configs" && pwd)/tiny_moe.json
for run in "2 exact --expert-parallel 2 --zero 0" "2 exact --expert-parallel 2 --zero 1" \
           "4 exact --expert-parallel 2 --zero 1" "2 exact --expert-parallel 2 --zero 0 --grad-overlap 1" \
           "4 exact --expert-parallel 2 --zero 1 --grad-overlap 1" "4 bound --expert-parallel 4 --zero 0 --ranks-per-node 2 --a2a hierarchical" \
           "4 bound --expert-parallel 4 --zero 1 --ranks-per-node 2 --a2a 2d"; do
  set -- $run; np=$1; kind=$2; shift 2
  name="P=$np $*"
  if ! timeout 120 "${DIST_MPIRUN[@]}" -np "$np" "$BIN" train --config "$CFG" --data "$D/t.bin" --threads 1 \
       --steps 3 --seq-len 32 --batch-size $((8 / np)) --log "$D/log.jsonl" "$@" >"$D/out" 2>"$D/err"; then
    bad "$name: run failed: $(tail -2 "$D/err")"; continue
  fi
  report=$(grep -o '"comm_scratch":[0-9]*' "$D/log.jsonl" | head -1 | cut -d: -f2)
  held=$(grep '"step"' "$D/log.jsonl" | tail -1 | grep -o '"comm_scratch_hwm":[0-9]*' | cut -d: -f2)
  if [ -z "$report" ] || [ -z "$held" ] || [ "$report" -eq 0 ]; then
    bad "$name: report '$report', held '$held'"
  elif [ $kind = exact ] && [ "$held" -ge "$report" ] && [ "$held" -le $((report + SCALARS)) ]; then
    ok "$name: communicators hold $held bytes, the report says $report (+ scalars)"
  elif [ $kind = bound ] && [ "$held" -le $((report + SCALARS)) ] && [ "$held" -gt 0 ]; then
    ok "$name: communicators hold $held bytes, within the report's bound $report"
  else
    bad "$name: communicators hold $held bytes, the report says $report ($kind)"
  fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
