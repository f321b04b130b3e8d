#!/usr/bin/env bash
# `bagualu plan --json`'s memory equals the "memory" object `bagualu train --log` writes
# on its first line (the run's own report of what it allocated; tests/train/
# test_memory_report ties that to the allocations) at several one-process layouts:
# fp32 and bf16, with and without recomputation, dense and MoE, with a capacity.
# Exact: both come from the same layout routines, so any difference is a bug.
BIN=$1
source "$(dirname "$0")/../shell_checks.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
CFG=$HERE/../../configs
"$BIN" synth --vocab 64 --tokens 20000 --out "$D/t.bin" >/dev/null || { echo "synth failed"; exit 1; }
python3 - "$CFG/tiny_moe.json" "$D" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
d = dict(c, num_local_experts=0); json.dump(d, open(sys.argv[2] + "/dense.json", "w"))
cap = dict(c, capacity_factor=1.25); json.dump(cap, open(sys.argv[2] + "/cap.json", "w"))
PY
same() {  # same NAME CONFIG TRAIN_FLAGS... : plan's memory == train's
  local name=$1 cfg=$2; shift 2
  rm -f "$D/log.jsonl"
  OMP_NUM_THREADS=1 "$BIN" train --config "$cfg" --data "$D/t.bin" --steps 1 --log "$D/log.jsonl" "$@" >/dev/null 2>&1 ||
    { bad "$name: train failed"; return; }
  "$BIN" plan --config "$cfg" --cluster "$HERE/box.json" --json "$@" >"$D/plan.json" 2>"$D/err" ||
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
same moe-fp32 "$CFG/tiny_moe.json" --batch-size 4 --seq-len 32
# The measured side of bench/plan_validate.sh: this model's ~0.5 ms step is logged to the
# microsecond (at 0.1 ms the log's 0.0005 or 0.0006 was a 20% step in the error).
if grep -Eq '"step_s":[0-9]+\.[0-9]{6}[,}]' "$D/log.jsonl"; then ok; else bad "step_s not logged to the microsecond"; fi
same moe-bf16-block "$CFG/tiny_moe.json" --batch-size 2 --seq-len 64 --dtype bf16 --recompute block
same dense "$D/dense.json" --batch-size 4 --seq-len 32
same capacity "$D/cap.json" --batch-size 4 --seq-len 32 --recompute block
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
