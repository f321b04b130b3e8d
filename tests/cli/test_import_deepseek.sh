#!/usr/bin/env bash
# bagualu export / import of the DeepSeek-MoE (v1, model_type "deepseek") layout: shared
# experts as one fused FFN, dense layers before the MoE ones (first_k_dense_replace).
# export -> import -> export gives the same bytes (f32; bf16 from a bf16 import), the
# import evaluates to the original's loss, trains on and generates; the fused shared FFN
# is split where DeepSeek's computation says (moving hidden units between the shared
# experts does not change the loss; moving only gate rows does); the training-only keys
# (aux_loss_alpha, seq_aux) are mapped, not dropped; every key or tensor bagualu cannot
# represent is one line naming it, exit 2.
BIN=$1
source "$(dirname "$0")/../shell_checks.sh"

# shared: dense layer 0 then MoE layer 1 (DeepSeek: first_k_dense_replace 1), two shared
# experts, grouped-query attention, no renormalization, per-sequence balance loss.
cat >"$D/shared.json" <<'JSON'
{"vocab_size": 32, "max_position_embeddings": 32, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48, "num_local_experts": 4,
 "num_experts_per_tok": 2, "moe_intermediate_size": 16, "moe_layer_freq": 2, "num_shared_experts": 2,
 "norm_topk_prob": false, "router_aux_loss_scope": "sequence", "norm": "rmsnorm", "hidden_act": "swiglu",
 "position_embedding": "rope", "tie_word_embeddings": false}
JSON
# allmoe: every layer MoE with one shared expert, tied embeddings, renormalized top-k.
cat >"$D/allmoe.json" <<'JSON'
{"vocab_size": 32, "max_position_embeddings": 32, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_local_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
 "num_shared_experts": 1, "norm_topk_prob": true, "router_aux_loss_coef": 0.05, "norm": "rmsnorm",
 "hidden_act": "swiglu", "position_embedding": "rope", "tie_word_embeddings": true}
JSON
# noshared: no shared experts, MoE only in the last of 3 layers: DeepSeek, not Mixtral.
cat >"$D/noshared.json" <<'JSON'
{"vocab_size": 32, "max_position_embeddings": 32, "hidden_size": 32, "num_hidden_layers": 3,
 "num_attention_heads": 4, "intermediate_size": 48, "num_local_experts": 4, "num_experts_per_tok": 1,
 "moe_intermediate_size": 16, "moe_layer_freq": 3, "norm_topk_prob": false, "norm": "rmsnorm",
 "hidden_act": "swiglu", "position_embedding": "rope", "tie_word_embeddings": false}
JSON
"$BIN" synth --task copy --vocab 32 --span 8 --tokens 20000 --seed 1 --out "$D/train.bin" >/dev/null &&
"$BIN" synth --task copy --vocab 32 --span 8 --tokens 4000 --seed 2 --out "$D/val.bin" >/dev/null || { echo "synth failed"; exit 1; }
common=(--batch-size 4 --seq-len 16 --threads 2)
loss_of() { "$BIN" eval --checkpoint "$1" --data "$D/val.bin" "${common[@]}" --batches 3 2>&1 | sed -n 's/^loss \([0-9.]*\) .*/\1/p'; }
key_of() { python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1])).get(sys.argv[2])))' "$1" "$2"; }

for m in shared allmoe noshared; do
  "$BIN" train --config "$D/$m.json" --data "$D/train.bin" "${common[@]}" --steps 6 --lr 3e-3 \
    --save-dir "$D/$m-ck" >"$D/out" 2>&1 || { cat "$D/out"; bad "$m: training failed"; continue; }
  if "$BIN" export --checkpoint "$D/$m-ck" --out "$D/$m-hf" >"$D/out" 2>"$D/err" &&
     grep -q "as DeepseekForCausalLM" "$D/out"; then ok; else bad "$m: not exported as DeepSeek: $(cat "$D/out" "$D/err")"; continue; fi
  if "$BIN" import --from "$D/$m-hf" --out "$D/$m-imp" --step 6 >"$D/out" 2>"$D/err" &&
     "$BIN" export --checkpoint "$D/$m-imp" --out "$D/$m-hf2" >/dev/null 2>>"$D/err" &&
     cmp -s "$D/$m-hf/model.safetensors" "$D/$m-hf2/model.safetensors" &&
     cmp -s "$D/$m-hf/config.json" "$D/$m-hf2/config.json"; then ok
  else bad "$m: export -> import -> export is not the same bytes: $(cat "$D/err")"; fi
  if "$BIN" export --checkpoint "$D/$m-ck" --out "$D/$m-b1" --dtype bf16 >/dev/null 2>"$D/err" &&
     "$BIN" import --from "$D/$m-b1" --out "$D/$m-bimp" >/dev/null 2>>"$D/err" &&
     "$BIN" export --checkpoint "$D/$m-bimp" --out "$D/$m-b2" --dtype bf16 >/dev/null 2>>"$D/err" &&
     cmp -s "$D/$m-b1/model.safetensors" "$D/$m-b2/model.safetensors"; then ok
  else bad "$m: bf16 round trip differs: $(cat "$D/err")"; fi
  a=$(loss_of "$D/$m-ck") b=$(loss_of "$D/$m-imp")
  if [ -n "$a" ] && [ "$a" = "$b" ]; then ok; else bad "$m: eval of the import $b vs the original $a"; fi
done
for m in shared allmoe; do
  if "$BIN" train --config "$D/$m-imp/config.json" --data "$D/train.bin" "${common[@]}" --steps 8 --save-dir "$D/$m-imp" \
       --resume latest >"$D/out" 2>&1 && [ "$(cat "$D/$m-imp/latest")" = step_00000008 ]; then ok
  else bad "$m: train --resume from the import: $(tail -2 "$D/out")"; fi
  if "$BIN" generate --checkpoint "$D/$m-imp" --prompt-tokens "1 2 3" --max-tokens 4 --seed 1 >"$D/out" 2>&1; then ok
  else bad "$m: generate from the import: $(tail -2 "$D/out")"; fi
done

# The layout as DeepSeek's code reads it: names, fused shapes, the layer pattern keys.
python3 - "$D" <<'PY' && ok || bad "DeepSeek names, shapes or layer keys wrong"
import json, struct, sys
d = sys.argv[1]
def header(m):
    b = open(f"{d}/{m}-hf/model.safetensors", "rb").read(); n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None); return h
h, c = header("shared"), json.load(open(f"{d}/shared-hf/config.json"))
assert c["model_type"] == "deepseek" and c["architectures"] == ["DeepseekForCausalLM"]
assert (c["first_k_dense_replace"], c["moe_layer_freq"], c["n_shared_experts"], c["n_routed_experts"]) == (1, 1, 2, 4)
assert (c["intermediate_size"], c["moe_intermediate_size"], c["num_key_value_heads"]) == (48, 16, 2)
assert c["norm_topk_prob"] is False and c["seq_aux"] is True and c["scoring_func"] == "softmax"
assert h["model.layers.0.mlp.gate_proj.weight"]["shape"] == [48, 32]
assert h["model.layers.1.mlp.gate.weight"]["shape"] == [4, 32]
assert h["model.layers.1.mlp.experts.3.down_proj.weight"]["shape"] == [32, 16]
assert h["model.layers.1.mlp.shared_experts.gate_proj.weight"]["shape"] == [32, 32]
assert h["model.layers.1.mlp.shared_experts.down_proj.weight"]["shape"] == [32, 32]
assert not [k for k in h if "block_sparse_moe" in k or "shared_experts.0" in k]
c = json.load(open(f"{d}/allmoe-hf/config.json"))
assert (c["first_k_dense_replace"], c["n_shared_experts"], c["seq_aux"], c["aux_loss_alpha"]) == (0, 1, False, 0.05)
assert "lm_head.weight" not in header("allmoe")
c = json.load(open(f"{d}/noshared-hf/config.json"))
assert (c["first_k_dense_replace"], c["moe_layer_freq"], c["n_shared_experts"]) == (2, 1, None)
PY

# variant SRC NAME 'python statement on c (config dict) and t (tensors: name -> (dtype, shape, bytes))'
variant() {
  python3 - "$D/$1" "$D/$2" "$3" <<'PY'
import json, os, struct, sys
src, dst, edit = sys.argv[1:4]
os.makedirs(dst)
b = open(f"{src}/model.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); data = b[8 + n:]
h.pop("__metadata__", None)
t = {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in h.items()}
c = json.load(open(f"{src}/config.json"))
def rows(name):  # an F32 matrix as a list of rows of floats
    dt, (r, k), raw = t[name]; v = struct.unpack(f"<{r * k}f", raw); return [list(v[i * k:(i + 1) * k]) for i in range(r)]
def put(name, m):
    t[name] = ("F32", [len(m), len(m[0])], struct.pack(f"<{len(m) * len(m[0])}f", *[x for row in m for x in row]))
exec(edit)
hdr, off, blobs = {}, 0, []
for k, (dt, shape, raw) in t.items():
    hdr[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}; off += len(raw); blobs.append(raw)
s = json.dumps(hdr).encode(); s += b" " * (-len(s) % 8)
open(f"{dst}/model.safetensors", "wb").write(struct.pack("<Q", len(s)) + s + b"".join(blobs))
json.dump(c, open(f"{dst}/config.json", "w"))
PY
}
# The fused shared FFN's hidden units are interchangeable: swapping units of expert 0
# with units of expert 1 in gate and up rows and down columns is the same function, so
# the same loss (to rounding: the sums group differently); with up rows scaled by 4 and
# down columns by 1/4 too. Swapping the gate rows alone is another function: the check
# can fail. down_proj and lm_head are scaled up first (big) so that the shared experts weigh in
# the loss.
edit='
S = "model.layers.1.mlp.shared_experts."
g, u, dn = rows(S + "gate_proj.weight"), rows(S + "up_proj.weight"), rows(S + "down_proj.weight")
pairs = [(i, 16 + (i * 7) % 16) for i in range(0, 16, 2)]
dn = [[x * 20 for x in r] for r in dn]
put("lm_head.weight", [[x * 50 for x in r] for r in rows("lm_head.weight")])
def swap_rows(m):
    for i, j in pairs: m[i], m[j] = m[j], m[i]
    return m
def swap_cols(m):
    for r in m:
        for i, j in pairs: r[i], r[j] = r[j], r[i]
    return m'
variant shared-hf big "$edit"'
put(S + "down_proj.weight", dn)'
variant shared-hf perm "$edit"'
put(S + "gate_proj.weight", swap_rows(g))
put(S + "up_proj.weight", [[4 * x for x in r] for r in swap_rows(u)])
put(S + "down_proj.weight", [[x / 4 for x in r] for r in swap_cols(dn)])'
variant shared-hf perm-gate "$edit"'
put(S + "gate_proj.weight", swap_rows(g))
put(S + "down_proj.weight", dn)'
for v in big perm perm-gate; do
  "$BIN" import --from "$D/$v" --out "$D/$v-ck" >/dev/null 2>"$D/err" || bad "$v: import failed: $(cat "$D/err")"
done
a=$(loss_of "$D/big-ck") b=$(loss_of "$D/perm-ck") g=$(loss_of "$D/perm-gate-ck")
echo "fused shared experts: loss $a, units moved $b, gate rows only $g"
if python3 -c "import sys; a, b, g = map(float, sys.argv[1:]); sys.exit(not (abs(a - b) < 1e-4 and abs(a - g) > 1e-2))" "$a" "$b" "$g"
then ok; else bad "fused shared experts split wrongly: loss $a, units moved $b (want equal), gate rows only $g (want different)"; fi

# Training-only keys are mapped: DeepSeek's aux loss is bagualu's, batch-wide or per sequence.
variant shared-hf aux 'c["aux_loss_alpha"] = 0.125; c["seq_aux"] = False; del c["norm_topk_prob"]'
if "$BIN" import --from "$D/aux" --out "$D/aux-ck" >/dev/null 2>"$D/err" &&
   [ "$(key_of "$D/aux-ck/config.json" router_aux_loss_coef)" = 0.125 ] &&
   [ "$(key_of "$D/aux-ck/config.json" router_aux_loss_scope)" = '"batch"' ] &&
   [ "$(key_of "$D/aux-ck/config.json" norm_topk_prob)" = false ] &&
   [ "$(key_of "$D/shared-imp/config.json" router_aux_loss_scope)" = '"sequence"' ]; then ok
else bad "aux_loss_alpha / seq_aux / norm_topk_prob's default not mapped: $(cat "$D/err" "$D/aux-ck/config.json")"; fi
# DeepSeek ignores norm_topk_prob at top-1; RoPE's inv_freq buffers are skipped.
variant noshared-hf top1 'c["norm_topk_prob"] = True
t["model.layers.0.self_attn.rotary_emb.inv_freq"] = ("F32", [4], struct.pack("<4f", 1, 0.1, 0.01, 0.001))'
if "$BIN" import --from "$D/top1" --out "$D/top1-ck" >/dev/null 2>"$D/err" &&
   [ "$(key_of "$D/top1-ck/config.json" norm_topk_prob)" = false ]; then ok
else bad "top-1 norm_topk_prob or inv_freq: $(cat "$D/err")"; fi

refuse() {  # name pattern src edit
  variant "$3" "bad-$1" "$4" && expect "$1" "$2" -- "$BIN" import --from "$D/bad-$1" --out "$D/bad-$1-ck"
  [ ! -e "$D/bad-$1-ck/latest" ] && ok || bad "$1: a checkpoint was written anyway"
}
refuse scaling 'key "routed_scaling_factor" must be 1' shared-hf 'c["routed_scaling_factor"] = 2.5'
refuse scoring 'key "scoring_func" is sigmoid' shared-hf 'c["scoring_func"] = "sigmoid"'
refuse topk-method 'key "topk_method" is group_limited_greedy' shared-hf 'c["topk_method"] = "group_limited_greedy"'
refuse n-group 'key "n_group" must be 1' shared-hf 'c["n_group"] = 2'
refuse rope-scaling 'key "rope_scaling"' shared-hf 'c["rope_scaling"] = {"type": "linear", "factor": 2.0}'
refuse activation 'key "hidden_act" is gelu' shared-hf 'c["hidden_act"] = "gelu"'
refuse attention-bias 'key "attention_bias"' shared-hf 'c["attention_bias"] = True'
refuse attn-dropout 'key "attention_dropout"' shared-hf 'c["attention_dropout"] = 0.1'
refuse unknown 'key "q_lora_rank" is not something' shared-hf 'c["q_lora_rank"] = 16'
refuse no-experts 'missing key "n_routed_experts"' shared-hf 'del c["n_routed_experts"]'
# DeepSeek's MoE layers 0, 2 of 4 (moe_layer_freq 2): bagualu's every-f-th are 1, 3.
refuse pattern 'key "first_k_dense_replace" (0) with "moe_layer_freq" (2)' shared-hf \
  'c["first_k_dense_replace"] = 0; c["moe_layer_freq"] = 2; c["num_hidden_layers"] = 4'
refuse shared-gate 'tensor "model.layers.1.mlp.shared_expert_gate.weight" has no place' shared-hf \
  't["model.layers.1.mlp.shared_expert_gate.weight"] = ("F32", [1, 32], bytes(4 * 32))'
# The fused width is n_shared_experts × moe_intermediate_size.
refuse shared-width "shared_experts.gate_proj.weight': expected shape \\[16, 32\\], file has \\[32, 32\\]" shared-hf 'c["n_shared_experts"] = 1'
refuse shared-count "shared_experts.gate_proj.weight': expected shape \\[32, 32\\], file has \\[16, 32\\]" allmoe-hf 'c["n_shared_experts"] = 2'

# What export refuses: MoE layers DeepSeek cannot place, and DeepSeek-only mismatches.
cat >"$D/freq2.json" <<'JSON'
{"vocab_size": 32, "max_position_embeddings": 32, "hidden_size": 32, "num_hidden_layers": 4,
 "num_attention_heads": 4, "intermediate_size": 48, "num_local_experts": 4, "num_experts_per_tok": 2,
 "moe_intermediate_size": 16, "moe_layer_freq": 2, "num_shared_experts": 1, "norm": "rmsnorm",
 "hidden_act": "swiglu", "position_embedding": "rope"}
JSON
sed 's/"norm": "rmsnorm"/"norm": "layernorm"/; s/"moe_layer_freq": 2/"moe_layer_freq": 1/' "$D/freq2.json" >"$D/ln.json"
sed 's/"moe_layer_freq": 2/"moe_layer_freq": 1, "router_groups": 2, "router_topk_groups": 1/' "$D/freq2.json" >"$D/groups.json"
for m in freq2 ln groups; do
  "$BIN" train --config "$D/$m.json" --data "$D/train.bin" "${common[@]}" --steps 1 --save-dir "$D/$m-ck" >"$D/out" 2>&1 ||
    bad "$m: training failed: $(tail -2 "$D/out")"
done
expect export-freq2 'moe_layer_freq 2 of 4 layers' -- "$BIN" export --checkpoint "$D/freq2-ck" --out "$D/x"
expect export-groups "top-k is over all experts (router_groups 2, router_topk_groups 1)" -- "$BIN" export --checkpoint "$D/groups-ck" --out "$D/x"
expect export-layernorm 'exports as DeepSeek-MoE, which needs "norm": "rmsnorm"' -- "$BIN" export --checkpoint "$D/ln-ck" --out "$D/x"

echo "test_import_deepseek: $pass passed, $fail failed"
[ $fail -eq 0 ]
