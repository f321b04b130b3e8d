#!/usr/bin/env bash
# The bias gate across layouts: comm_test_router_bias_layout trains a tiny bias-gate
# model for 8 steps at P=1 and in parallel layouts. Each run checks itself that every
# rank holds rank 0's biases bit for bit after every step; here the biases of every
# layout must equal one process's exactly (they are sums of ±rate driven by integer
# counts, so any routing difference shows as a whole step of rate), and the losses
# agree within a relative 1e-5 (only reduction order differs, as test_layout_equivalence.sh).
. "$(dirname "$0")/dist_launch.sh"
dist_have_mpi || exit 0
PROG=$DIST_BIN_DIR/comm_test_router_bias_layout
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
pass=0; fail=0

run() {  # run OUT NP ARGS...
  local out=$1 np=$2; shift 2
  if ! timeout 60 "${DIST_MPIRUN[@]}" -np "$np" "$PROG" --out "$D/$out" "$@" >"$D/log" 2>&1; then
    echo "FAIL: -np $np $*"; tail -5 "$D/log"; fail=$((fail+1)); return 1
  fi
}

run ref.txt 1
for args in "2 --ep 2" "2 --ep 1" "4 --ep 2"; do
  set -- $args; np=$1; shift
  name="p$np${*// /_}.txt"
  run "$name" "$np" "$@" || continue
  if cmp -s <(grep '^bias' "$D/ref.txt") <(grep '^bias' "$D/$name"); then
    pass=$((pass+1)); echo "ok   P=$np $*: biases equal one process's at every step"
  else
    fail=$((fail+1)); echo "FAIL P=$np $*: biases differ from one process's"
    diff <(grep '^bias' "$D/ref.txt") <(grep '^bias' "$D/$name") | head -4
  fi
  worst=$(paste <(grep '^loss' "$D/ref.txt") <(grep '^loss' "$D/$name") |
          awk '{d=$3-$6; if(d<0)d=-d; r=d/$3; if(r>w)w=r} END{printf "%.3g", w+0}')
  if awk -v w="$worst" 'BEGIN { exit !(w <= 1e-5) }'; then
    pass=$((pass+1)); echo "ok   P=$np $*: losses match (worst relative $worst)"
  else
    fail=$((fail+1)); echo "FAIL P=$np $*: losses differ (worst relative $worst)"
  fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
