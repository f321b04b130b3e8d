#!/usr/bin/env bash
# PyTorch parity: bagualu against a PyTorch reference written from the formulas
# (reference_model.py), on the same weights and batch, for every config in configs/:
# MoE top-1, top-2, top-3 of 8; dense GPT-2 style (LayerNorm+GELU+learned positions) and
# Llama style (RMSNorm+SwiGLU+RoPE); grouped-query attention; shared experts; tied and untied embeddings;
# moe_layer_freq 2. Compared: loss, aux and z losses, logits, routing, every parameter
# gradient, and two AdamW steps (parameters, updates, m and v), each with relative error
# max|bagualu - reference| / max|reference| per tensor <= 1e-4 (why: reference_model.py).
# Then mutants: deliberately wrong references must fail, so the tolerance is shown to
# catch real mistakes. Then `bagualu export`: Mixtral and GPT-2 layouts read back by their
# Hugging Face names reproduce bagualu's logits (f32, bf16, f16), and configs with no
# HF layout, bad flags and a corrupt checkpoint give exit 2 with a clear message.
#
# usage: test_parity.sh BAGUALU_BINARY BUILD_DIR
BIN=$1
BUILD=$2
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3  # Debian's python3-torch is visible to the system python only
REF="$HERE/reference_model.py"
DUMP="$BUILD/tests/parity_dump"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
pass=0
fail=0

if ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
  echo "FAIL: $PY cannot import torch and numpy: install Debian's python3-torch (scripts/setup.sh test does)"
  echo "0 passed, 1 failed"
  exit 1
fi
if [ ! -x "$DUMP" ]; then
  echo "FAIL: $DUMP is not built (target parity_dump)"
  echo "0 passed, 1 failed"
  exit 1
fi

# The reference's modes, collected while bagualu runs and then run in one Python process
# (importing torch takes seconds). Every line it starts with "ok" or "FAIL" is one check;
# indented lines under a FAIL say what differed.
ref_args=()
reference() {
  [ ${#ref_args[@]} -gt 0 ] && ref_args+=("+")
  ref_args+=("$@")
}
run_reference() {
  "$PY" "$REF" "${ref_args[@]}" >"$D/ref.out" 2>&1
  local rc=$?
  cat "$D/ref.out"
  local ok bad
  ok=$(grep -c '^ok ' "$D/ref.out")
  bad=$(grep -c '^FAIL ' "$D/ref.out")
  pass=$((pass + ok))
  fail=$((fail + bad))
  if [ $rc -ne 0 ] && [ "$bad" -eq 0 ]; then
    echo "FAIL: reference_model.py exited $rc"
    fail=$((fail + 1))
  fi
}

# expect_export NAME EXIT PATTERN -- export flags...
expect_export() {
  local name=$1 want=$2 pattern=$3
  shift 4
  "$BIN" export "$@" >"$D/out" 2>"$D/err"
  local rc=$?
  if [ $rc -eq "$want" ] && grep -q -- "$pattern" "$D/err" "$D/out"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL export $name: exit $rc (wanted $want and a line matching: $pattern)"
    cat "$D/out" "$D/err"
  fi
}

# 1. bagualu's side: checkpoint, batch, logits, losses, gradients, AdamW steps.
cases=()
for cfg in "$HERE"/configs/*.json; do
  name=$(basename "$cfg" .json)
  if OMP_NUM_THREADS=2 "$DUMP" "$cfg" 7 4 16 "$D/$name" >"$D/dump.out" 2>&1; then
    cases+=("$D/$name")
  else
    fail=$((fail + 1))
    echo "FAIL parity_dump $name:"
    cat "$D/dump.out"
  fi
done

# 2. Parity, then the mutants (on cases that between them exercise every mutation).
reference parity "${cases[@]}"
reference mutants "$D/moe_top1" "$D/moe_top2" "$D/moe_top3_e8" "$D/dense_gpt2"

# 3. Export, read back by Hugging Face names.
for name in moe_top2 moe_gqa moe_shared moe_shared_dense dense_gpt2 dense_gpt2_untied dense_gpt2_bias; do
  ck="$D/$name/ckpt/step_00000000"
  for dt in f32 bf16 f16; do
    expect_export "$name $dt" 0 "exported" -- --checkpoint "$ck" --format hf --out "$D/$name/hf_$dt" --dtype "$dt"
  done
  reference export "$D/$name/hf_f32" "$D/$name"
  reference export "$D/$name/hf_bf16" "$D/$name" BF16 "$D/$name/hf_f32"
  reference export "$D/$name/hf_f16" "$D/$name" F16 "$D/$name/hf_f32"
done

# A save directory exports its latest checkpoint: the same bytes as naming it.
expect_export "save dir" 0 "step_00000002" -- --checkpoint "$D/moe_top2/ckpt" --out "$D/latest_a"
expect_export "step dir" 0 "exported" -- --checkpoint "$D/moe_top2/ckpt/step_00000002" --out "$D/latest_b"
if cmp -s "$D/latest_a/model.safetensors" "$D/latest_b/model.safetensors" &&
   cmp -s "$D/latest_a/config.json" "$D/latest_b/config.json"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL export: a save directory and its latest step directory export differently"
fi

# 4. What export refuses, with exit 2 and the reason.
ck() { echo "$D/$1/ckpt/step_00000000"; }
expect_export "layernorm moe" 2 'Mixtral, which needs "norm": "rmsnorm"' -- --checkpoint "$(ck moe_top1)" --out "$D/x"
expect_export "moe_layer_freq 2" 2 'exports as DeepSeek-MoE, which needs "norm": "rmsnorm"' -- --checkpoint "$(ck moe_freq2)" --out "$D/x"
expect_export "dense llama" 2 "exports as GPT-2, which needs layernorm, gelu and learned" -- --checkpoint "$(ck dense_llama)" --out "$D/x"
expect_export "bad dtype" 2 'unknown --dtype "f64"' -- --checkpoint "$(ck moe_top2)" --out "$D/x" --dtype f64
expect_export "bad format" 2 'unknown --format "onnx"' -- --checkpoint "$(ck moe_top2)" --out "$D/x" --format onnx
expect_export "missing checkpoint" 2 "not a checkpoint directory" -- --checkpoint "$D/nope" --out "$D/x"
expect_export "missing --out" 2 "missing required flag --out" -- --checkpoint "$(ck moe_top2)"
cp -r "$(ck moe_top2)" "$D/corrupt"
size=$(stat -c %s "$D/corrupt/model-00001-of-00001.safetensors")  # flip a byte of the last tensor's data
printf '\x01' | dd of="$D/corrupt/model-00001-of-00001.safetensors" bs=1 seek=$((size - 10)) conv=notrunc 2>/dev/null
expect_export "corrupt checkpoint" 2 "checksum mismatch" -- --checkpoint "$D/corrupt" --out "$D/x"
if [ -e "$D/x" ]; then
  fail=$((fail + 1))
  echo "FAIL export: a refused export left $D/x behind"
else
  pass=$((pass + 1))
fi

run_reference

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
