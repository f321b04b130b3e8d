#!/usr/bin/env bash
# The bias gate across layouts: comm_test_router_bias_layout trains a tiny bias-gate
# model for 8 steps at P=1 and in parallel layouts. Each run checks itself that every
# rank holds rank 0's biases bit for bit after every step; here the biases of every
# layout must equal one process's exactly (they are sums of ±rate driven by integer
# counts, so any routing difference shows as a whole step of rate), and the losses
# agree within a relative 1e-5 (only reduction order differs, as test_layout_equivalence.sh).
. "$(dirname "$0")/dist_launch.sh"
dist_have_mpi || exit 77  # skipped (CTest SKIP_RETURN_CODE), never passed
PROG=$DIST_BIN_DIR/comm_test_router_bias_layout
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
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
# Checkpoints across rank counts with `bagualu train`: 4 steps at P=2 (EP=2) saved, then
# resumed at P=1 to step 8, equals 8 steps at P=1: the saved biases (replicated, written
# by rank 0) load on any layout (a constant LR: the schedule does not depend on --steps).
# Compared: the final biases exactly, losses within 1e-5.
TOOLS=$(cd "$(dirname "$0")/../train" && pwd)
"$BIN" synth --vocab 32 --tokens 8000 --out "$D/t.bin" >/dev/null
cat >"$D/bias.json" <<'JSON'
{"vocab_size": 32, "max_position_embeddings": 16, "hidden_size": 16, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 32, "num_local_experts": 4,
 "num_experts_per_tok": 2, "moe_intermediate_size": 16, "router_type": "bias",
 "router_score": "sigmoid", "router_bias_update_rate": 0.02}
JSON
common() { echo --config "$D/bias.json" --data "$D/t.bin" --seq-len 8 --threads 1 --lr 1e-2 --min-lr 1e-2 --warmup 0; }
if "$BIN" train $(common) --steps 8 --batch-size 4 --save-dir "$D/p1" --log "$D/p1.jsonl" >/dev/null 2>"$D/err" &&
   timeout 60 "${DIST_MPIRUN[@]}" -np 2 "$BIN" train $(common) --steps 4 --batch-size 2 --expert-parallel 2 \
     --save-dir "$D/p2" >/dev/null 2>"$D/err" &&
   "$BIN" train $(common) --steps 8 --batch-size 4 --save-dir "$D/p2" --resume latest --log "$D/r.jsonl" \
     >/dev/null 2>"$D/err"; then
  if python3 - "$D/p1/step_00000008" "$D/p2/step_00000008" "$TOOLS" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
import ckpt_tool as t
a, b = ({n: x for n, _, _, x in t.read_st(d + "/model-00001-of-00001.safetensors")[1] if n.endswith("correction_bias")}
        for d in sys.argv[1:3])
sys.exit(0 if len(a) == 2 and a == b and any(any(v) for v in a.values()) else 1)
PY
  then pass=$((pass+1)); echo "ok   P=2 -> P=1 resume: final biases equal an uninterrupted P=1 run's"
  else fail=$((fail+1)); echo "FAIL P=2 -> P=1 resume: final biases differ"; fi
  worst=$(paste <(grep -o '"loss":[0-9.e+-]*' "$D/p1.jsonl" | tail -4 | cut -d: -f2) \
                <(grep -o '"loss":[0-9.e+-]*' "$D/r.jsonl" | cut -d: -f2) |
          awk '{d=$1-$2; if(d<0)d=-d; r=d/$1; if(r>w)w=r} END{printf "%.3g", w+0}')
  if awk -v w="$worst" 'BEGIN { exit !(w <= 1e-5) }'; then
    pass=$((pass+1)); echo "ok   P=2 -> P=1 resume: losses of steps 5-8 match (worst relative $worst)"
  else fail=$((fail+1)); echo "FAIL P=2 -> P=1 resume: losses differ (worst relative $worst)"; fi
else
  fail=$((fail+1)); echo "FAIL bagualu train with the bias gate: $(tail -3 "$D/err")"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
