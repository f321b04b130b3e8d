#!/usr/bin/env bash
# Loss-spike rewinds and NaN skips under mpirun (P=2, ZeRO-1): the ranks agree. A
# poisoned batch (global samples [40, 44), the same global batch as one process with
# --batch-size 2) gives one rewind, to step 20, skipping [40, 44): the same step and
# range as at P=1, since positions are global samples. NaN gradients on rank 0 only are
# skipped by every rank (--max-skips stops the job, exit 1, not a hang).
# Why it can fail: ranks that disagree on a spike or a skip (a collective mismatch: a
# hang or a crash), a skipped range that depends on the rank count.
. "$(dirname "$0")/dist_launch.sh"
dist_have_mpi || exit 77
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
SRC=$(cd "$(dirname "$0")/../.." && pwd)
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok   $*"; }
bad() { fail=$((fail+1)); echo "FAIL $*"; }
"$BIN" synth --vocab 64 --tokens 20000 --out "$D/data.bin" >/dev/null || { echo "synth failed"; exit 1; }
A=(train --config "$SRC/configs/tiny_moe.json" --data "$D/data.bin" --seq-len 16 --threads 1 --steps 30
   --save-every 5 --batch-size 1)
BAGUALU_TEST_SPIKE_SAMPLES=40-44 timeout 120 "${DIST_MPIRUN[@]}" -np 2 -x BAGUALU_TEST_SPIKE_SAMPLES "$BIN" "${A[@]}" \
  --spike-rewind 6 --spike-window 8 --spike-patience 2 --save-dir "$D/s" --log "$D/s.jsonl" >"$D/out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "spike run" || { bad "spike run exit $rc"; tail -5 "$D/out"; }
r=$(grep -o '"rewind":[^}]*}' "$D/s.jsonl")
[ "$r" = '"rewind":{"to_step":20,"skip_samples":[40,44]}' ] && ok "one rewind to step 20, [40, 44)" || bad "rewinds: $r"
BAGUALU_TEST_NAN_STEPS=7-100 timeout 120 "${DIST_MPIRUN[@]}" -np 2 -x BAGUALU_TEST_NAN_STEPS "$BIN" "${A[@]}" \
  --max-skips 3 --save-dir "$D/n" >"$D/out" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "3 steps in a row skipped" "$D/out" && [ "$(cat "$D/n/latest")" = step_00000005 ]
then ok "max-skips at P=2"; else bad "max-skips at P=2: exit $rc, latest $(cat "$D/n/latest")"; tail -3 "$D/out"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
