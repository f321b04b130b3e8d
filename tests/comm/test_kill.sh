#!/usr/bin/env bash
# When one rank dies by SIGKILL mid-exchange, the job must end non-zero within 60 s
# on every surviving rank — never hang. (comm_test_kill_exchange makes rank 1 kill itself.)
. "$(dirname "$0")/dist_launch.sh"
dist_have_mpi || exit 77  # skipped (CTest SKIP_RETURN_CODE), never passed
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
pass=0; fail=0
for np in 2 4; do
  start=$(date +%s)
  # timeout exits 124 if mpirun is still running at 60 s: that is the hang we forbid.
  timeout 60 "${DIST_MPIRUN[@]}" -np $np "$DIST_BIN_DIR/comm_test_kill_exchange" --ranks-per-node 2 >"$LOG" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $secs -lt 60 ] && grep -q "raising SIGKILL" "$LOG"; then
    pass=$((pass+1))
    echo "P=$np: rank 1 killed, mpirun exited $rc after ${secs} s"
  else
    fail=$((fail+1))
    echo "FAIL P=$np: mpirun exited $rc after ${secs} s (want non-zero, not 124, < 60 s)"
    tail -n 20 "$LOG"
  fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
