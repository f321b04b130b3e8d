#!/usr/bin/env bash
# The communication layer under mpirun: layout, all-to-all (flat, hierarchical,
# chunked, traffic counters), all-reduce, reduce-scatter and all-gather, the MoE dispatchers and the swipe gate at
# P = 1, 2, 3, 4, with emulated nodes of 1 and 2 ranks (--ranks-per-node) and the real
# node; every gate's expert ids, drops and rows per worker against one process
# (comm_test_capacity_layout) at P = 1, 2, 4. Each program checks everything itself;
# a run passes when mpirun exits 0 within its time limit.
. "$(dirname "$0")/dist_launch.sh"
dist_have_mpi || exit 77  # skipped (CTest SKIP_RETURN_CODE), never passed
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
pass=0; fail=0
run() {  # run NP PROGRAM ARGS...
  local np=$1 prog=$2
  shift 2
  if timeout 60 "${DIST_MPIRUN[@]}" -np "$np" "$DIST_BIN_DIR/$prog" "$@" >"$LOG" 2>&1; then
    pass=$((pass+1))
  else
    fail=$((fail+1))
    echo "FAIL: mpirun -np $np $prog $*"
    tail -n 20 "$LOG"
  fi
}
for np in 1 2 3 4; do
  run $np comm_test_layout
  run $np comm_test_layout --ranks-per-node 2
  run $np comm_test_alltoall --ranks-per-node 1   # every rank its own node
  run $np comm_test_allreduce --ranks-per-node 2
  run $np comm_test_reduce_scatter --ranks-per-node 2
  run $np comm_test_grad_reduce --ranks-per-node 2
  run $np comm_test_dispatcher --ranks-per-node 2
  [ $np != 3 ] && run $np comm_test_capacity_layout
  run $np comm_test_swipe
done
run 3 comm_test_alltoall --ranks-per-node 2   # nodes {0,1} {2}: uneven nodes
run 4 comm_test_alltoall --ranks-per-node 2   # two nodes of two: the BaGuaLu case
run 4 comm_test_alltoall                      # the real node: hierarchy degenerates to flat
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
