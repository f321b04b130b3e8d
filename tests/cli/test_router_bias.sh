#!/usr/bin/env bash
# The bias gate end to end: a run saves its biases as
# model.layers.{l}.block_sparse_moe.gate.e_score_correction_bias (F32, model-00001-of-00001.safetensors
# only, none for topk); `bagualu inspect` accepts the checkpoint; eval reads the biases
# (its validation loss equals the one training reported, which routes with them); HF
# export refuses the gate (Mixtral has no bias) with one line, exit 2; sigmoid scores
# with another gate are a config error.
# Why it can fail: the state not written or written for topk (bytes change), the
# checkers not told of the extra tensors (inspect / resume reject the file), eval
# routing without the biases (another loss), export writing a model that routes
# differently.
BIN=$1
source "$(dirname "$0")/../shell_checks.sh"
TOOLS=$(cd "$(dirname "$0")/../train" && pwd)

cat >"$D/bias.json" <<'JSON'
{"vocab_size": 32, "max_position_embeddings": 16, "hidden_size": 16, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 32, "num_local_experts": 4,
 "num_experts_per_tok": 2, "moe_intermediate_size": 16, "norm": "rmsnorm",
 "hidden_act": "swiglu", "position_embedding": "rope", "router_type": "bias",
 "router_score": "sigmoid", "router_bias_update_rate": 0.05}
JSON
sed 's/"router_type": "bias",/"router_type": "topk",/' "$D/bias.json" >"$D/topk_sigmoid.json"
sed 's/, "router_type": "bias",//; s/"router_score": "sigmoid", "router_bias_update_rate": 0.05//; s/"rope" *$/"rope"/' \
  "$D/bias.json" | tr -d '\n' | sed 's/"rope", *}/"rope"}/' >"$D/topk.json"
"$BIN" synth --vocab 32 --tokens 5000 --out "$D/data.bin" >/dev/null || { echo "synth failed"; exit 1; }
"$BIN" synth --vocab 32 --tokens 2000 --seed 3 --out "$D/val.bin" >/dev/null
train() { "$BIN" train --data "$D/data.bin" --val "$D/val.bin" --eval-batches 2 --steps 6 --batch-size 2 \
          --seq-len 8 --threads 1 --lr 1e-2 "$@"; }
train --config "$D/bias.json" --save-dir "$D/bias" --log "$D/bias.jsonl" >"$D/train.out" 2>"$D/err" || bad "bias run: $(cat "$D/err")"
train --config "$D/topk.json" --save-dir "$D/topk" >/dev/null 2>"$D/err" || bad "topk run: $(cat "$D/err")"
S=$D/bias/step_00000006

# The tensors: present in model-00001-of-00001.safetensors, not in the optimizer's; values moved.
python3 - "$S/model-00001-of-00001.safetensors" "$S/optimizer-00001-of-00001.safetensors" "$D/topk/step_00000006/model-00001-of-00001.safetensors" \
  "$D/bias.jsonl" >"$D/py" 2>&1 <<'PY'
import json, struct, sys
def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: (v, b[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]]) for k, v in h.items()}
m, o, t = (tensors(p) for p in sys.argv[1:4])
name = "model.layers.%d.block_sparse_moe.gate.e_score_correction_bias"
vals = []
for l in range(2):
    v, data = m[name % l]
    assert v["dtype"] == "F32" and v["shape"] == [4], v
    vals += struct.unpack("<4f", data)
assert any(x != 0 for x in vals), vals  # a layer may oscillate back to 0; not both
assert not any("e_score_correction_bias" in k for k in o), "bias in the optimizer file"
assert not any("e_score_correction_bias" in k for k in t), "bias in a topk checkpoint"
# The metrics log's last router_bias is the bias the checkpoint holds (%.6g: 6 digits).
logged = [x for layer in [m for m in map(json.loads, open(sys.argv[4])) if "step" in m][-1]["router_bias"] for x in layer]
assert len(logged) == len(vals) and all(abs(a - b) <= 1e-6 * max(1e-3, abs(b)) for a, b in zip(logged, vals)), (logged, vals)
PY
if [ $? -eq 0 ]; then ok; else bad "bias tensors: $(cat "$D/py")"; fi

"$BIN" inspect "$S" >"$D/out" 2>"$D/err" && ok || bad "inspect of a bias checkpoint: $(cat "$D/err")"

# eval routes with the saved biases: the validation loss training reported last, and
# another one from a copy whose biases are zeroed (resealed with ckpt_tool.py).
want=$(sed -n 's/.*val loss after training: \([0-9.]*\).*/\1/p' "$D/train.out")
evalloss() {
  "$BIN" eval --checkpoint "$1" --data "$D/val.bin" --batch-size 2 --seq-len 8 --batches 2 --threads 1 \
    >"$D/out" 2>"$D/err" || bad "eval $1: $(cat "$D/err")"
  grep -o 'loss [0-9.]*' "$D/out" | head -1 | cut -d' ' -f2
}
got=$(evalloss "$D/bias")
if [ -n "$want" ] && [ "$(printf %.4f "$got")" = "$want" ]; then ok
else bad "eval loss '$got' differs from training's last val loss '$want'"; fi
cp -r "$S" "$D/zeroed"
python3 - "$D/zeroed" "$TOOLS" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import ckpt_tool as t
path = sys.argv[1] + "/model-00001-of-00001.safetensors"
meta, ts = t.read_st(path)
ts = [(n, d, s, bytes(len(b)) if n.endswith("e_score_correction_bias") else b) for n, d, s, b in ts]
t.write_st(path, meta, ts)
t.fix_sums(sys.argv[1])
PY
zeroed=$(evalloss "$D/zeroed")
if [ -n "$zeroed" ] && [ "$zeroed" != "$got" ]; then ok
else bad "eval with zeroed biases gives the same loss '$zeroed' as with the saved ones '$got'"; fi

expect_code "export of a bias checkpoint" 2 "router_type bias" -- "$BIN" export --checkpoint "$S" --out "$D/hf"
expect_code "topk with sigmoid scores" 2 "router_score sigmoid applies to router_type bias only" -- \
  "$BIN" train --config "$D/topk_sigmoid.json" --data "$D/data.bin" --steps 1
# noisy_topk has a second router weight (gate_noise) that Mixtral has no place for.
sed 's/}$/, "router_type": "noisy_topk"}/' "$D/topk.json" >"$D/noisy.json"
if grep -q noisy_topk "$D/noisy.json" &&
   "$BIN" train --config "$D/noisy.json" --data "$D/data.bin" --steps 1 --batch-size 2 --seq-len 8 \
     --threads 1 --save-dir "$D/noisy" >/dev/null 2>"$D/err"; then
  expect_code "export of a noisy_topk checkpoint" 2 "gate_noise" -- \
    "$BIN" export --checkpoint "$D/noisy" --out "$D/hf_noisy"
else bad "noisy_topk run: $(cat "$D/err")"; fi
echo "router_bias: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
