#!/usr/bin/env bash
# Damaged checkpoints and resume edge cases through `bagualu train --resume`:
#   - truncated, bit-flipped (payload and header), missing-tensor, extra-tensor,
#     wrong-shape, wrong-dtype, config-mismatch, seed-mismatch, missing trainer.json or
#     tensor file, corrupt trainer.json, bad `latest` pointer: each is ONE line on stderr
#     naming the file (and the tensor where there is one), exit code 2, and no training;
#   - --resume latest with a corrupt newest checkpoint: an error without --fallback; with
#     --fallback the corrupt one is reported on stderr and the previous one used;
#   - --resume latest with no checkpoint yet starts from scratch; a checkpoint already at
#     the final step exits 0 at once and writes nothing;
#   - SIGINT and SIGTERM: a checkpoint at the next step boundary, exit 0, and resuming
#     reaches byte-identical final weights and optimizer state (cmp) to an uninterrupted run.
# Missing/wrong-shape/wrong-dtype/extra cases are made consistent (checksums recomputed by
# ckpt_tool.py) so that they reach the tensor checks instead of stopping at the checksum.
# Why it can fail: a check missing (the load succeeds or crashes), a message that does not
# name the file/tensor, a wrong exit code, a multi-line message, a signal that kills
# instead of stopping cleanly, a save at the signal that loses state.
BIN=$1
TOOL="python3 $(cd "$(dirname "$0")" && pwd)/ckpt_tool.py"
source "$(dirname "$0")/../shell_checks.sh"

cat >"$D/cfg.json" <<'EOF'
{"vocab_size": 32, "max_position_embeddings": 16, "hidden_size": 16, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 32, "num_local_experts": 4,
 "num_experts_per_tok": 2, "moe_intermediate_size": 16}
EOF
sed 's/"hidden_size": 16/"hidden_size": 32/' "$D/cfg.json" >"$D/cfg_wide.json"
"$BIN" synth --vocab 32 --tokens 20000 --out "$D/data.bin" >/dev/null || { echo "synth failed"; exit 1; }
COMMON=(--config "$D/cfg.json" --data "$D/data.bin" --batch-size 2 --seq-len 8 --threads 1)
train() { "$BIN" train "${COMMON[@]}" "$@"; }

# A good series: step_00000002, step_00000004, latest -> step_00000004.
train --steps 4 --save-dir "$D/s" --save-every 2 >/dev/null 2>"$D/err" || { echo "training failed:"; cat "$D/err"; exit 1; }
GOOD=$D/s/step_00000004
if $TOOL selftest "$GOOD"; then ok; else bad "ckpt_tool's XXH64 disagrees with bagualu's: crafted cases would be meaningless"; fi
expect_code good-resume 0 "resumed from" -- train --steps 6 --resume "$GOOD"

# variant NAME: a fresh copy of the good checkpoint to damage
variant() { rm -rf "$D/v_$1"; cp -r "$GOOD" "$D/v_$1"; echo "$D/v_$1"; }
resume() { train --steps 6 --resume "$1"; }

M=model-00001-of-00001.safetensors; O=optimizer-00001-of-00001.safetensors
T_O=model.layers.0.self_attn.o_proj.weight
T_W1=model.layers.1.block_sparse_moe.experts.2.w1.weight

v=$(variant trunc_model); $TOOL truncate "$v/$M" 100
expect_code truncated-model 2 "v_trunc_model/$M: .*" -- resume "$v"
v=$(variant trunc_opt); $TOOL truncate "$v/$O" 4
expect_code truncated-optimizer 2 "v_trunc_opt/$O: .*" -- resume "$v"
v=$(variant trunc_tiny); head -c 5 "$GOOD/$M" >"$v/$M"
expect_code truncated-to-5-bytes 2 "v_trunc_tiny/$M: file too short" -- resume "$v"
v=$(variant flip_payload); $TOOL flip "$v/$M" -3
expect_code bitflip-model-payload 2 "v_flip_payload/$M: checksum mismatch" -- resume "$v"
v=$(variant flip_opt_payload); $TOOL flip "$v/$O" -1000
expect_code bitflip-optimizer-payload 2 "v_flip_opt_payload/$O: checksum mismatch" -- resume "$v"
v=$(variant flip_header); $TOOL flip-header "$v/$O"
expect_code bitflip-optimizer-header 2 "v_flip_header/$O: checksum mismatch" -- resume "$v"
v=$(variant flip_len); $TOOL flip "$v/$M" 5
expect_code bitflip-header-length 2 "v_flip_len/$M: header length" -- resume "$v"
# fp16's loss scale and its count of good steps: present, finite, in range
v=$(variant scale_neg); $TOOL setjson "$v" loss_scale -1
expect_code bad-loss-scale 2 "v_scale_neg/trainer.json: bad \"loss_scale\"" -- resume "$v"
v=$(variant scale_inf); $TOOL setjson "$v" loss_scale 1e999
expect_code infinite-loss-scale 2 "v_scale_inf/trainer.json: bad \"loss_scale\"" -- resume "$v"
v=$(variant scale_steps); $TOOL setjson "$v" loss_scale_good_steps 2.5
expect_code bad-loss-scale-steps 2 "v_scale_steps/trainer.json: bad \"loss_scale_good_steps\"" -- resume "$v"
v=$(variant flip_json); $TOOL flip "$v/trainer.json" 40
expect_code bitflip-trainer-json 2 "v_flip_json/trainer.json: checksum mismatch" -- resume "$v"
v=$(variant missing); $TOOL drop "$v" $M $T_O
expect_code missing-tensor 2 "v_missing/$M: tensor '$T_O' is missing" -- resume "$v"
v=$(variant missing_v); $TOOL drop "$v" $O $T_W1.exp_avg_sq
expect_code missing-optimizer-tensor 2 "v_missing_v/$O: tensor '$T_W1.exp_avg_sq' is missing" -- resume "$v"
v=$(variant missing_step); $TOOL unindex "$v" optimizer step
expect_code missing-step 2 "v_missing_step/optimizer.index.json: missing \"pieces\" or \"step\"" -- resume "$v"
v=$(variant missing_piece); $TOOL unindex "$v" optimizer $T_W1
expect_code missing-optimizer-piece 2 "v_missing_piece/optimizer.index.json: the optimizer state of '$T_W1' is missing" -- resume "$v"
v=$(variant unmapped); $TOOL unindex "$v" model $T_O
expect_code unmapped-tensor 2 "v_unmapped/model.safetensors.index.json: tensor '$T_O' is missing" -- resume "$v"
v=$(variant no_index); rm "$v/optimizer.index.json"
expect_code missing-index 2 "v_no_index/optimizer.index.json: cannot open" -- resume "$v"
v=$(variant no_opt); rm "$v/$O"
expect_code missing-optimizer-file 2 "v_no_opt/$O: cannot open" -- resume "$v"
v=$(variant extra); $TOOL add "$v" $M bogus.weight
expect_code extra-tensor 2 "v_extra/$M: unexpected tensor 'bogus.weight'" -- resume "$v"
v=$(variant shape); $TOOL reshape "$v" $M $T_W1 8,32
expect_code wrong-shape 2 "v_shape/$M: tensor '$T_W1' has shape \[8, 32\], the config gives \[16, 16\]" -- resume "$v"
v=$(variant dtype); $TOOL dtype "$v" $M $T_O I32
expect_code wrong-dtype 2 "v_dtype/$M: tensor '$T_O' has dtype I32, expected F32" -- resume "$v"
v=$(variant dtype_opt); $TOOL dtype "$v" $O $T_O.exp_avg U32
expect_code wrong-dtype-optimizer 2 "v_dtype_opt/$O: tensor '$T_O.exp_avg' has dtype U32, expected F32" -- resume "$v"
expect_code config-mismatch 2 "step_00000004/trainer.json: config mismatch: the checkpoint has hidden_size = 16, the run's config 32" -- \
  "$BIN" train --config "$D/cfg_wide.json" --data "$D/data.bin" --batch-size 2 --seq-len 8 --steps 6 --resume "$GOOD"
expect_code seed-mismatch 2 "step_00000004/trainer.json: the checkpoint's data seed 1337 differs from --seed 7" -- \
  train --steps 6 --seed 7 --resume "$GOOD"
v=$(variant no_json); rm "$v/trainer.json"
expect_code missing-trainer-json 2 "v_no_json/trainer.json: cannot open" -- resume "$v"
v=$(variant no_model); rm "$v/$M"
expect_code missing-model-file 2 "v_no_model/$M: cannot open" -- resume "$v"
expect_code missing-dir 2 "no_such_dir: cannot open checkpoint directory" -- resume "$D/no_such_dir"

# `latest` pointers
lat() { rm -rf "$D/l_$1"; cp -r "$D/s" "$D/l_$1"; echo "$D/l_$1"; }
s=$(lat garbage); echo "garbage" >"$s/latest"
expect_code latest-garbage 2 "l_garbage/latest: does not name a checkpoint directory" -- train --steps 6 --save-dir "$s" --resume latest
s=$(lat dangling); echo "step_00000099" >"$s/latest"
expect_code latest-dangling 2 "l_dangling/latest: names step_00000099, which does not exist" -- train --steps 6 --save-dir "$s" --resume latest
s=$(lat dangling_fb); echo "step_00000099" >"$s/latest"
train --steps 6 --save-dir "$s" --resume latest --fallback >"$D/out" 2>"$D/err"
rc=$?
if [ $rc -eq 0 ] && [ "$(wc -l <"$D/err")" -eq 2 ] && grep -q "l_dangling_fb/latest: names step_00000099, which does not exist" "$D/err" \
   && grep -q "resumed from .*l_dangling_fb/step_00000004 at step 4 (fallback)" "$D/err"; then ok
else bad "latest-dangling --fallback: exit $rc:"; cat "$D/err"; fi

# a corrupt newest checkpoint under `latest`
s=$(lat corrupt); $TOOL flip "$s/step_00000004/$M" -3
expect_code latest-corrupt 2 "l_corrupt/step_00000004/$M: checksum mismatch" -- train --steps 6 --save-dir "$s" --resume latest
train --steps 6 --save-dir "$s" --resume latest --fallback --save-every 2 >"$D/out" 2>"$D/err"
rc=$?
if [ $rc -eq 0 ] && grep -q "l_corrupt/step_00000004/$M: checksum mismatch.*trying an older checkpoint" "$D/err" \
   && grep -q "resumed from .*l_corrupt/step_00000002 at step 2 (fallback)" "$D/err" \
   && [ "$(cat "$s/latest")" = step_00000006 ] && "$BIN" inspect "$s/step_00000004" >/dev/null 2>&1; then
  ok  # (and step_00000004 was saved again, replacing the corrupt one)
else
  bad "latest-corrupt --fallback: exit $rc, stderr:"; cat "$D/err"
fi
s=$(lat all_corrupt); $TOOL flip "$s/step_00000004/$M" -3; $TOOL flip "$s/step_00000002/$O" -3
train --steps 6 --save-dir "$s" --resume latest --fallback >"$D/out" 2>"$D/err"
rc=$?
if [ $rc -eq 2 ] && [ "$(tail -n1 "$D/err")" = "bagualu: $s: no loadable checkpoint" ] \
   && grep -q "step_00000002/$O: checksum mismatch" "$D/err"; then ok; else bad "all corrupt --fallback: exit $rc:"; cat "$D/err"; fi
s=$(lat no_pointer); rm "$s/latest"
train --steps 6 --save-dir "$s" --resume latest >"$D/out" 2>"$D/err"
rc=$?
if [ $rc -eq 0 ] && grep -q "no \"latest\" in .*: using the newest step directory .*step_00000004" "$D/err" \
   && grep -q "resumed from .*step_00000004 at step 4" "$D/err"; then ok
else bad "no latest pointer: exit $rc:"; cat "$D/err"; fi

# no checkpoint yet: from scratch; already at the final step: exit 0 at once, nothing written
expect_code latest-none-yet 0 "no checkpoint in .*fresh yet: starting from scratch" -- train --steps 2 --save-dir "$D/fresh" --resume latest
before=$(ls -lR --time-style=full-iso "$D/s")
expect_code at-final-step 0 "resumed from .*step_00000004 at step 4" -- train --steps 4 --save-dir "$D/s" --resume latest
if grep -q "nothing to do" "$D/out" && ! grep -q "^step " "$D/out" && [ "$before" = "$(ls -lR --time-style=full-iso "$D/s")" ]; then
  ok; else bad "at-final-step: trained or wrote something:"; cat "$D/out"; fi

# SIGINT / SIGTERM: checkpoint at the next step boundary, exit 0, resume to the same bytes
STEPS=1500
train --steps $STEPS --save-dir "$D/ref" >/dev/null 2>&1 || bad "reference run failed"
for sig in INT TERM; do
  S=$D/sig_$sig
  # (bagualu itself in the background, not a shell function: $! must be its pid)
  "$BIN" train "${COMMON[@]}" --steps $STEPS --save-dir "$S" --save-every 50 --resume latest >"$D/out" 2>"$D/err" &
  pid=$!
  for _ in $(seq 1 2000); do [ -e "$S/latest" ] && break; sleep 0.01; done  # training is under way
  kill -$sig $pid
  wait $pid
  rc=$?
  stopped=$(sed -n 's/^stopped by signal at step \([0-9]*\)$/\1/p' "$D/out")
  want=$(printf 'step_%08d' "${stopped:-0}")
  if [ $rc -eq 0 ] && [ -n "$stopped" ] && [ "$stopped" -lt $STEPS ] && [ "$(cat "$S/latest")" = "$want" ] \
     && ! grep -q "^bagualu:" "$D/err" && "$BIN" inspect "$S" >/dev/null 2>&1; then
    ok
  else
    bad "SIG$sig: exit $rc, stopped at '${stopped}', latest $(cat "$S/latest" 2>/dev/null), stderr: $(cat "$D/err")"
  fi
  train --steps $STEPS --save-dir "$S" --resume latest >/dev/null 2>"$D/err" || bad "SIG$sig: resume failed: $(cat "$D/err")"
  final=$(printf 'step_%08d' $STEPS)
  if cmp -s "$D/ref/$final/$M" "$S/$final/$M" && cmp -s "$D/ref/$final/$O" "$S/$final/$O"; then ok
  else bad "SIG$sig: stop at step $stopped + resume does not reproduce the uninterrupted run's final files"; fi
  echo "SIG$sig: stopped at step $stopped of $STEPS with a checkpoint, resumed to identical final files"
done

echo "checkpoint_errors: $pass passed, $fail failed"
[ $fail -eq 0 ]
