#!/usr/bin/env bash
# Checkpoints of format_version 1 (one model.safetensors + optimizer.safetensors, made by
# the build before format 2: tests/train/fixtures/ckpt_v1, step 2 of a 4-step run with
# seed 7 on `bagualu synth --vocab 16 --tokens 2000`) still load: resuming to step 4
# gives a model file byte-identical to the one that build wrote at step 4
# (model_step4_ref.safetensors; at P=1 format 2's one model file has the same bytes), and
# eval/inspect read it.
# Why it can fail: format 1 refused, its tensors or optimizer step read wrongly.
BIN=$1
F=$(cd "$(dirname "$0")" && pwd)/fixtures/ckpt_v1
source "$(dirname "$0")/../shell_checks.sh"
"$BIN" synth --vocab 16 --tokens 2000 --out "$D/data.bin" >/dev/null || { echo "synth failed"; exit 1; }
C=(--config "$F/cfg.json" --data "$D/data.bin" --batch-size 2 --seq-len 8 --threads 1 --seed 7)
# The reference was computed with oneDNN's f32 GEMM: the resume uses it too.
if BAGUALU_GEMM=onednn "$BIN" train "${C[@]}" --steps 4 --resume "$F/step_00000002" --save-dir "$D/s" >/dev/null 2>"$D/err" &&
   grep -q "resumed from .*ckpt_v1/step_00000002 at step 2" "$D/err"; then ok
else bad "resume from format 1: $(cat "$D/err")"; fi
# The reference bits hold for the CPU and build type that made them (-march=native,
# oneDNN's per-ISA kernels, optimisation level): elsewhere the load is still checked above
# and by eval below, the bytes are not.
here=$(lscpu | grep -E "^(Model name|CPU family|Model):" | sed 's/  */ /g')
if [ "$here" != "$(cat "$F/cpu.txt")" ] || grep -q "^BG_SANITIZE:BOOL=ON" "$2/CMakeCache.txt" 2>/dev/null; then
  echo "note: not comparing bytes with the reference (made on $(head -1 "$F/cpu.txt"), a Release build)"
elif cmp -s "$D/s/step_00000004/model-00001-of-00001.safetensors" "$F/model_step4_ref.safetensors"; then ok
else bad "the resumed run's step-4 model differs from the old build's"; fi
"$BIN" eval --checkpoint "$F/step_00000002" --data "$D/data.bin" --batches 1 >"$D/out" 2>"$D/err" && ok ||
  bad "eval of a format-1 checkpoint: $(cat "$D/err")"
echo "checkpoint_v1: $pass passed, $fail failed"
[ $fail -eq 0 ]
