#!/usr/bin/env bash
# The link and reduction probe `plan --calibrate` reads (plan/probe.c) under mpirun at 2
# ranks: one line of seven numbers, "bandwidth latency gap sync bulk reduce exchange",
# with the link's bandwidth, latency and the gradient reduction's transfer rate
# positive, the gap not negative, (one node) sync and the exchanging link rate 0, and
# the sum's rate not negative (0: lost in the noise). No rate is checked against a figure: they are this machine's. Skipped (77)
# in a build without MPI.
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../comm/dist_launch.sh"
dist_have_mpi || exit 77
source "$HERE/../shell_checks.sh"
OMP_NUM_THREADS=1 timeout 120 "${DIST_MPIRUN[@]}" -np 2 "$BIN" plan-probe >"$D/out" 2>"$D/err" ||
  bad "plan-probe failed: $(tail -2 "$D/err")"
if awk 'NF != 7 { exit 1 } { exit !($1 > 0 && $2 > 0 && $3 >= 0 && $4 == 0 && $5 > 0 && $6 >= 0 && $7 == 0) }' "$D/out" &&
   [ "$(wc -l <"$D/out")" = 1 ]
then ok; else bad "plan-probe printed: $(cat "$D/out")"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
