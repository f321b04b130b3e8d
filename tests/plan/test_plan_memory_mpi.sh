#!/usr/bin/env bash
# As test_plan_memory.sh, under mpirun: `bagualu plan --json --ranks P` against the
# "memory" of `bagualu train --log` (each component the largest over the ranks) at
# P = 2 and 4, EP 1, 2 and 4, ZeRO-1 on and off, flat and hierarchical exchange,
# dropless and with a capacity. Exact. Skipped (77) in a build without MPI.
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../comm/dist_launch.sh"
dist_have_mpi || exit 77
source "$HERE/../shell_checks.sh"
CFG=$HERE/../../configs
"$BIN" synth --vocab 64 --tokens 20000 --out "$D/t.bin" >/dev/null || { echo "synth failed"; exit 1; }
python3 - "$CFG/tiny_moe.json" "$D" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
json.dump(dict(c, capacity_factor=1.25), open(sys.argv[2] + "/cap.json", "w"))
PY
same() {  # same NAME P CONFIG FLAGS...
  local name=$1 np=$2 cfg=$3; shift 3
  rm -f "$D/log.jsonl"
  timeout 120 "${DIST_MPIRUN[@]}" -np "$np" "$BIN" train --config "$cfg" --data "$D/t.bin" --steps 1 \
    --log "$D/log.jsonl" "$@" >"$D/train.out" 2>&1 || { bad "$name: train failed: $(tail -2 "$D/train.out")"; return; }
  "$BIN" plan --config "$cfg" --cluster "$HERE/box.json" --ranks "$np" --json "$@" >"$D/plan.json" 2>"$D/err" ||
    { bad "$name: plan failed: $(cat "$D/err")"; return; }
  if python3 - "$D/log.jsonl" "$D/plan.json" <<'PY'
import json, sys
m = next(json.loads(l)["memory"] for l in open(sys.argv[1]) if "\"memory\"" in l)
p = json.load(open(sys.argv[2]))["memory"]
diff = {k: (m[k], p.get(k)) for k in m if m[k] != p.get(k)}
if diff: print(diff); sys.exit(1)
PY
  then ok; else bad "$name: memory differs (train, plan) above"; fi
}
same p2-ep2 2 "$CFG/tiny_moe.json" --batch-size 2 --seq-len 32
same p2-ep1-zero0 2 "$CFG/tiny_moe.json" --batch-size 2 --seq-len 32 --expert-parallel 1 --zero 0
same p4-ep2-hier 4 "$CFG/tiny_moe.json" --batch-size 2 --seq-len 32 --expert-parallel 2 --a2a hierarchical --ranks-per-node 2
same p4-ep4-cap-block 4 "$D/cap.json" --batch-size 2 --seq-len 32 --recompute block
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
