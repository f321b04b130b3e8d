#!/usr/bin/env bash
# bagualu import: a Hugging Face directory back into a checkpoint. For a Mixtral-layout
# MoE (with and without grouped-query attention) and a GPT-2-layout dense model:
# export -> import -> export gives the same bytes
# (f32, and bf16 exported from a bf16 import), a sharded index imports as the single
# file does, the imported checkpoint evaluates to the original's loss (same weights:
# bit for bit), trains on with --resume and generates. Every key or tensor the model
# cannot represent (key/value heads that do not divide the heads, sliding window, rope scaling, another
# activation, Mixtral attention biases, a key it does not know, a tensor with no place)
# is one line naming it, exit 2; GPT-2's non-zero biases come back out of an export
# unchanged: nothing is dropped silently.
BIN=$1
source "$(dirname "$0")/../shell_checks.sh"

cat >"$D/moe.json" <<'JSON'
{"vocab_size": 32, "max_position_embeddings": 32, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 4, "intermediate_size": 64, "num_local_experts": 4, "num_experts_per_tok": 2,
 "moe_intermediate_size": 32, "moe_layer_freq": 1, "norm": "rmsnorm", "hidden_act": "swiglu",
 "position_embedding": "rope", "tie_word_embeddings": false}
JSON
cat >"$D/gqa.json" <<'JSON'
{"vocab_size": 32, "max_position_embeddings": 32, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
 "moe_intermediate_size": 32, "moe_layer_freq": 1, "norm": "rmsnorm", "hidden_act": "swiglu",
 "position_embedding": "rope", "tie_word_embeddings": false}
JSON
cat >"$D/dense.json" <<'JSON'
{"vocab_size": 32, "max_position_embeddings": 32, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 4, "intermediate_size": 64, "num_local_experts": 0}
JSON
"$BIN" synth --task copy --vocab 32 --span 8 --tokens 20000 --seed 1 --out "$D/train.bin" >/dev/null &&
"$BIN" synth --task copy --vocab 32 --span 8 --tokens 4000 --seed 2 --out "$D/val.bin" >/dev/null || { echo "synth failed"; exit 1; }
common=(--batch-size 4 --seq-len 16 --threads 2)
loss_of() { "$BIN" eval --checkpoint "$1" --data "$D/val.bin" "${common[@]}" --batches 3 2>&1 | sed -n 's/^loss \([0-9.]*\) .*/\1/p'; }

for m in moe gqa dense; do
  "$BIN" train --config "$D/$m.json" --data "$D/train.bin" "${common[@]}" --steps 6 --lr 3e-3 \
    --save-dir "$D/$m-ck" >"$D/out" 2>&1 || { cat "$D/out"; bad "$m: training failed"; continue; }
  "$BIN" export --checkpoint "$D/$m-ck" --out "$D/$m-hf" >/dev/null 2>"$D/err" || { bad "$m export: $(cat "$D/err")"; continue; }
  if "$BIN" import --from "$D/$m-hf" --out "$D/$m-imp" --step 6 >"$D/out" 2>"$D/err" &&
     "$BIN" export --checkpoint "$D/$m-imp" --out "$D/$m-hf2" >/dev/null 2>>"$D/err" &&
     cmp -s "$D/$m-hf/model.safetensors" "$D/$m-hf2/model.safetensors" &&
     cmp -s "$D/$m-hf/config.json" "$D/$m-hf2/config.json"; then ok
  else bad "$m: export -> import -> export is not the same bytes: $(cat "$D/err")"; fi
  [ "$(cat "$D/$m-imp/latest")" = step_00000006 ] && ok || bad "$m: --step 6 not recorded: $(cat "$D/$m-imp/latest")"
  # bf16: an import of a bf16 export exports to the same bf16 bytes.
  if "$BIN" export --checkpoint "$D/$m-ck" --out "$D/$m-b1" --dtype bf16 >/dev/null 2>"$D/err" &&
     "$BIN" import --from "$D/$m-b1" --out "$D/$m-bimp" >/dev/null 2>>"$D/err" &&
     "$BIN" export --checkpoint "$D/$m-bimp" --out "$D/$m-b2" --dtype bf16 >/dev/null 2>>"$D/err" &&
     cmp -s "$D/$m-b1/model.safetensors" "$D/$m-b2/model.safetensors"; then ok
  else bad "$m: bf16 round trip differs: $(cat "$D/err")"; fi
  a=$(loss_of "$D/$m-ck") b=$(loss_of "$D/$m-imp")
  if [ -n "$a" ] && [ "$a" = "$b" ]; then ok; else bad "$m: eval of the import $b vs the original $a"; fi
  if "$BIN" train --config "$D/$m-imp/config.json" --data "$D/train.bin" "${common[@]}" --steps 8 --save-dir "$D/$m-imp" \
       --resume latest >"$D/out" 2>&1 && [ "$(cat "$D/$m-imp/latest")" = step_00000008 ]; then ok
  else bad "$m: train --resume from the import: $(tail -2 "$D/out")"; fi
  if "$BIN" generate --checkpoint "$D/$m-imp" --prompt-tokens "1 2 3" --max-tokens 4 --seed 1 >"$D/out" 2>&1; then ok
  else bad "$m: generate from the import: $(tail -2 "$D/out")"; fi
done

# A sharded index (two files) imports as the single file does.
python3 - "$D/moe-hf" "$D/moe-shard" <<'PY'
import json, os, struct, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst)
b = open(f"{src}/model.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); data = b[8 + n:]
h.pop("__metadata__", None)
names = sorted(h, key=lambda k: h[k]["data_offsets"][0])
def write(path, part):
    hdr, off, blobs = {}, 0, []
    for k in part:
        s, e = h[k]["data_offsets"]; blobs.append(data[s:e])
        hdr[k] = {"dtype": h[k]["dtype"], "shape": h[k]["shape"], "data_offsets": [off, off + e - s]}; off += e - s
    hdr["__metadata__"] = {"format": "pt"}
    t = json.dumps(hdr).encode(); t += b" " * (-len(t) % 8)
    open(path, "wb").write(struct.pack("<Q", len(t)) + t + b"".join(blobs))
half = len(names) // 2
files = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
for f, part in files.items(): write(f"{dst}/{f}", part)
json.dump({"metadata": {}, "weight_map": {k: f for f, p in files.items() for k in p}}, open(f"{dst}/model.safetensors.index.json", "w"))
os.link(f"{src}/config.json", f"{dst}/config.json")
PY
if "$BIN" import --from "$D/moe-shard" --out "$D/shard-imp" >/dev/null 2>"$D/err" &&
   "$BIN" export --checkpoint "$D/shard-imp" --out "$D/shard-hf" >/dev/null 2>>"$D/err" &&
   cmp -s "$D/moe-hf/model.safetensors" "$D/shard-hf/model.safetensors"; then ok
else bad "sharded index: $(cat "$D/err")"; fi

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
exec(edit)
hdr, off, blobs = {}, 0, []
for k, (dt, shape, raw) in t.items():
    hdr[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}; off += len(raw); blobs.append(raw)
s = json.dumps(hdr).encode(); s += b" " * (-len(s) % 8)
open(f"{dst}/model.safetensors", "wb").write(struct.pack("<Q", len(s)) + s + b"".join(blobs))
json.dump(c, open(f"{dst}/config.json", "w"))
PY
}
refuse() {  # name pattern src edit
  variant "$3" "bad-$1" "$4" && expect "$1" "$2" -- "$BIN" import --from "$D/bad-$1" --out "$D/bad-$1-ck"
  [ ! -e "$D/bad-$1-ck/latest" ] && ok || bad "$1: a checkpoint was written anyway"
}
refuse gqa-divide 'num_key_value_heads (3) must be positive and divide num_attention_heads (4)' moe-hf 'c["num_key_value_heads"] = 3'
refuse gqa-default 'num_key_value_heads (8) must' moe-hf 'del c["num_key_value_heads"]'  # MixtralConfig's default: 8
refuse sliding 'key "sliding_window"' moe-hf 'c["sliding_window"] = 4096'
refuse rope-scaling 'key "rope_scaling"' moe-hf 'c["rope_scaling"] = {"type": "linear", "factor": 2.0}'
refuse activation 'key "hidden_act" is gelu' moe-hf 'c["hidden_act"] = "gelu"'
refuse attention-bias 'key "attention_bias"' moe-hf 'c["attention_bias"] = True'
refuse shared-gate 'key "shared_expert_gate"' moe-hf 'c["shared_expert_gate"] = True'
refuse qwen 'tensor "mlp.shared_expert_gate.weight" of Qwen2-MoE' moe-hf 'c["model_type"] = "qwen2_moe"'
# A Mixtral config relabelled DeepSeek: refused by its first key DeepSeek's config lacks
# (DeepSeek itself: test_import_deepseek.sh).
refuse deepseek 'key "head_dim" is not something' moe-hf 'c["model_type"] = "deepseek"'
refuse llama 'key "model_type" is "llama": import reads mixtral, deepseek and gpt2' moe-hf 'c["model_type"] = "llama"'
refuse gpt2-gelu 'key "activation_function" is gelu' dense-hf 'c["activation_function"] = "gelu"'
refuse extra-tensor 'tensor "model.layers.0.self_attn.q_proj.bias" has no place' moe-hf \
  't["model.layers.0.self_attn.q_proj.bias"] = ("F32", [32], struct.pack("<32f", *([0.5] * 32)))'
# k_proj of 4 heads where the config says 2, and of 1 head where it says 2
refuse gqa-shapes "k_proj.weight': expected shape \\[16, 32\\], file has \\[32, 32\\]" moe-hf 'c["num_key_value_heads"] = 2'
refuse gqa-shapes2 "v_proj.weight': expected shape \\[16, 32\\], file has \\[8, 32\\]" gqa-hf \
  't["model.layers.1.self_attn.v_proj.weight"] = ("F32", [8, 32], bytes(4 * 8 * 32))'
# The GQA model's k/v are what Mixtral's config says: 2 heads of 8.
python3 - "$D/gqa-hf" <<'PY' && ok || bad "gqa export: k_proj/v_proj shapes or num_key_value_heads wrong"
import json, struct, sys
b = open(f"{sys.argv[1]}/model.safetensors", "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
c = json.load(open(f"{sys.argv[1]}/config.json"))
assert c["num_key_value_heads"] == 2 and c["num_attention_heads"] == 4
assert all(h[f"model.layers.{l}.self_attn.{p}_proj.weight"]["shape"] == [16, 32] for l in (0, 1) for p in "kv")
assert h["model.layers.0.self_attn.q_proj.weight"]["shape"] == [32, 32]
PY
# GPT-2's biases are parameters: non-zero ones come back out of an export unchanged
# (dropping one would export zeros there), and they change the model's loss.
variant dense-hf gpt2-bias '
t["transformer.h.1.mlp.c_fc.bias"] = ("F32", [64], struct.pack("<64f", *[0.01 * i for i in range(64)]))
t["transformer.h.0.attn.c_attn.bias"] = ("F32", [96], struct.pack("<96f", *[0.3 - 0.005 * i for i in range(96)]))
t["transformer.h.0.attn.c_proj.bias"] = ("F32", [32], struct.pack("<32f", *([0.2] * 32)))
t["transformer.h.1.mlp.c_proj.bias"] = ("F32", [32], struct.pack("<32f", *([-0.1] * 32)))'
if "$BIN" import --from "$D/gpt2-bias" --out "$D/gpt2-bias-ck" >/dev/null 2>"$D/err" &&
   "$BIN" export --checkpoint "$D/gpt2-bias-ck" --out "$D/gpt2-bias-hf" >/dev/null 2>>"$D/err" &&
   python3 - "$D/gpt2-bias/model.safetensors" "$D/gpt2-bias-hf/model.safetensors" 2>>"$D/err" <<'PY'
import json, struct, sys
def tensors(path):
    b = open(path, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
bad = [k for k in a if a[k] != b.get(k)] + [k for k in b if k not in a]
sys.exit(f"differ: {bad}" if bad else 0)
PY
then ok; else bad "GPT-2 biases did not survive import -> export: $(cat "$D/err")"; fi
a=$(loss_of "$D/dense-imp") b=$(loss_of "$D/gpt2-bias-ck")
if [ -n "$b" ] && [ "$a" != "$b" ]; then ok; else bad "non-zero biases do not change the loss ($a vs $b)"; fi

expect no-config "config.json: cannot open" -- "$BIN" import --from "$D/nowhere" --out "$D/x"

echo "test_import: $pass passed, $fail failed"
[ $fail -eq 0 ]
