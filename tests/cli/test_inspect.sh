#!/usr/bin/env bash
# `bagualu inspect DIR`: config, step, format, tensor count, parameter counts (total, embeddings,
# active per token) and the checksum status of every safetensors file (format 2, and a
# committed format-1 checkpoint); exit 0 when
# intact, 2 (and one stderr line per bad file, naming it) when not.
# Counts are checked against `bagualu info` on the same config (an independent path
# through the parameter table) and against hand-computed embedding sizes.
# Why it can fail: a checksum not verified (a corrupt file reported OK), a wrong count,
# a status mislabelled, a crash or exit 0 on a broken checkpoint.
BIN=$1
TOOL="python3 $(cd "$(dirname "$0")/../train" && pwd)/ckpt_tool.py"
source "$(dirname "$0")/../shell_checks.sh"
check() { local what=$1; shift; if "$@"; then ok; else bad "$what"; fi; }
# checks CONDITION...: a condition with && inside, as one string (eval)
checks() { local what=$1; shift; if eval "$*"; then ok; else bad "$what"; fi; }

cat >"$D/moe.json" <<'EOF'
{"vocab_size": 32, "max_position_embeddings": 16, "hidden_size": 16, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 32, "num_local_experts": 4,
 "num_experts_per_tok": 2, "moe_intermediate_size": 16}
EOF
cat >"$D/dense.json" <<'EOF'
{"vocab_size": 32, "max_position_embeddings": 16, "hidden_size": 16, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 32, "norm": "rmsnorm", "hidden_act": "swiglu",
 "position_embedding": "rope", "tie_word_embeddings": false}
EOF
"$BIN" synth --vocab 32 --tokens 5000 --out "$D/data.bin" >/dev/null || { echo "synth failed"; exit 1; }
CFGS=()
for cfg in moe dense; do
  if "$BIN" train --config "$D/$cfg.json" --data "$D/data.bin" --steps 3 --batch-size 2 --seq-len 8 --threads 1 \
       --save-dir "$D/$cfg" >/dev/null 2>"$D/err"; then CFGS+=("$cfg")
  else bad "training the $cfg config failed: $(cat "$D/err")"; fi
done
[ -d "$D/moe" ] || { echo "inspect: $pass passed, $fail failed"; exit 1; }

M=model-00001-of-00001.safetensors; O=optimizer-00001-of-00001.safetensors
field() { sed -n "s/^$1 *//p" "$D/out"; }
for cfg in "${CFGS[@]}"; do
  "$BIN" inspect "$D/$cfg/step_00000003" >"$D/out" 2>"$D/err"
  rc=$?
  "$BIN" info --config "$D/$cfg.json" >"$D/info"
  want_tensors=$(sed -n 's/^tensors: *\([0-9]*\)$/\1/p' "$D/info")
  want_params=$(sed -n 's/^parameters: *\([0-9]*\) .*/\1/p' "$D/info")
  want_active=$(sed -n 's/^active matmul params: *\([0-9]*\) .*/\1/p' "$D/info")
  checks "$cfg: exit $rc, stderr $(cat "$D/err")" '[ $rc -eq 0 ] && [ ! -s "$D/err" ]'
  check "$cfg: step line: $(field step:)" [ "$(field step:)" = "3 of 3 (6 samples consumed)" ]
  check "$cfg: config line" grep -q '^config: .*"hidden_size": 16, "num_hidden_layers": 2' "$D/out"
  check "$cfg: tensors $(field tensors:) vs info $want_tensors" \
    grep -q "^tensors: *$want_tensors (model files; the optimizer holds m and v of each in $want_tensors pieces)" "$D/out"
  check "$cfg: format line" grep -q "^format: *2 (1 model file, 1 optimizer file)" "$D/out"
  check "$cfg: parameters $(field parameters:) vs info $want_params" grep -q "^parameters: *$want_params total" "$D/out"
  check "$cfg: active $(field 'active per token:') vs info $want_active" \
    grep -q "^active per token: *$want_active matmul parameters" "$D/out"
  check "$cfg: model status" grep -q "^$M: *OK (xxh64 [0-9a-f]\{16\}, $want_tensors tensors)" "$D/out"
  check "$cfg: optimizer status" grep -q "^$O: *OK (xxh64 [0-9a-f]\{16\}, $((2 * want_tensors)) tensors)" "$D/out"
done
# embeddings: token V*C = 32*16 = 512; position (learned) 16*16 = 256; RoPE has none
"$BIN" inspect "$D/moe" >"$D/out" 2>&1
check "moe: embeddings: $(field parameters:)" grep -q "embeddings 768 (token 512, position 256)" "$D/out"
check "save directory resolves latest" grep -q "^checkpoint: *$D/moe/step_00000003$" "$D/out"
check "moe: top-k named" grep -q "top-2 of 4 experts" "$D/out"
if [ -d "$D/dense" ]; then
  "$BIN" inspect "$D/dense/step_00000003" >"$D/out" 2>&1
  check "dense: embeddings: $(field parameters:)" grep -q "embeddings 512 (token 512, position 0)" "$D/out"
  check "dense: labelled dense" grep -q "^active per token: .*dense" "$D/out"
fi

# expect_bad NAME DIR STATUS_LINE_PATTERN STDERR_PATTERN
expect_bad() {
  "$BIN" inspect "$2" >"$D/out" 2>"$D/err"
  local rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$D/err")" -eq 1 ] && grep -q -- "$3" "$D/out" && grep -q -- "$4" "$D/err"; then ok
  else bad "$1: exit $rc, stdout:"; cat "$D/out"; echo "stderr:"; cat "$D/err"; fi
}
variant() { rm -rf "$D/v_$1"; cp -r "$D/moe/step_00000003" "$D/v_$1"; echo "$D/v_$1"; }
v=$(variant flip); $TOOL flip "$v/$M" -3
expect_bad model-bitflip "$v" "^$M: *MISMATCH (file xxh64 [0-9a-f]*, trainer.json records" \
  "v_flip/$M: checksum mismatch"
check "model-bitflip: optimizer still OK" grep -q "^$O: *OK" "$D/out"
v=$(variant flip_opt); $TOOL flip-header "$v/$O"
expect_bad optimizer-header-bitflip "$v" "^$O: *MISMATCH" "v_flip_opt/$O: checksum mismatch"
check "optimizer-bitflip: model still OK" grep -q "^$M: *OK" "$D/out"
v=$(variant trunc); $TOOL truncate "$v/$M" 64
expect_bad truncated "$v" "^$M: *MISMATCH" "v_trunc/$M: checksum mismatch"
v=$(variant drop); $TOOL drop "$v" $M model.norm.weight
expect_bad missing-tensor "$v" "^$M: *INVALID" "v_drop/$M: tensor 'model.norm.weight' is missing"
v=$(variant nofile); rm "$v/$O"
expect_bad missing-file "$v" "^$O: *MISSING" "v_nofile/$O: missing"
# A sharded checkpoint's indexes: a tensor missing from the Hugging Face index.
v=$(variant noidx)
python3 - "$v" "$(dirname "${TOOL#python3 }")" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
import ckpt_tool as t
p = sys.argv[1] + "/model.safetensors.index.json"
j = json.load(open(p)); del j["weight_map"]["model.norm.weight"]; json.dump(j, open(p, "w"))
t.fix_sums(sys.argv[1])
PY
"$BIN" inspect "$v" >"$D/out" 2>"$D/err"; rc=$?
checks "index without a tensor: exit $rc, $(cat "$D/err")" \
  '[ $rc -eq 2 ] && [ "$(wc -l <"$D/err")" -eq 1 ] && grep -q "v_noidx/model.safetensors.index.json: tensor .model.norm.weight. is missing" "$D/err"'
# A checkpoint of format 1 (made by the build before format 2) still reads.
"$BIN" inspect "$(dirname "$0")/../train/fixtures/ckpt_v1/step_00000002" >"$D/out" 2>"$D/err"; rc=$?
checks "format 1: exit $rc, $(cat "$D/err")" '[ $rc -eq 0 ] && grep -q "^format: *1 (1 model file, 1 optimizer file)" "$D/out" &&
  grep -q "^model.safetensors: *OK (xxh64 [0-9a-f]\{16\}, 17 tensors)" "$D/out" &&
  grep -q "^optimizer.safetensors: *OK (xxh64 [0-9a-f]\{16\}, 35 tensors)" "$D/out"'
v=$(variant json); $TOOL flip "$v/trainer.json" 30
"$BIN" inspect "$v" >"$D/out" 2>"$D/err"; rc=$?
checks "corrupt trainer.json: exit $rc, $(cat "$D/err")" \
  '[ $rc -eq 2 ] && [ "$(wc -l <"$D/err")" -eq 1 ] && grep -q "v_json/trainer.json: checksum mismatch" "$D/err"'

"$BIN" inspect >/dev/null 2>"$D/err"; rc=$?
checks "no argument: exit $rc" '[ $rc -eq 2 ] && grep -q "missing the checkpoint directory" "$D/err"'
"$BIN" inspect "$D/moe" extra >/dev/null 2>"$D/err"; rc=$?
checks "two arguments: exit $rc" '[ $rc -eq 2 ] && grep -q "unexpected argument \"extra\"" "$D/err"'
"$BIN" inspect "$D/nope" >/dev/null 2>"$D/err"; rc=$?
checks "missing directory: exit $rc" '[ $rc -eq 2 ] && grep -q "nope: cannot open checkpoint directory" "$D/err"'
"$BIN" inspect --help >"$D/out"; rc=$?
checks "--help: exit $rc" '[ $rc -eq 0 ] && grep -q "usage: bagualu inspect DIR" "$D/out"'

echo "inspect: $pass passed, $fail failed"
[ $fail -eq 0 ]
