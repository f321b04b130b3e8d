#!/usr/bin/env bash
# bagualu eval: on a checkpoint it prints the validation loss the training run printed
# for the same parameters, batch shape and batches (both are the mean of model_forward's
# batch losses over the same windows in file order, same threads: equal to the printed
# 4 decimals, in fact bit for bit); perplexity is exp(loss); the batch shape defaults
# to the run's. Every bad input gives one line on stderr and exit code 2.
BIN=$1
source "$(dirname "$0")/../shell_checks.sh"

cat >"$D/tiny.json" <<'EOF'
{"vocab_size": 32, "max_position_embeddings": 32, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 4, "intermediate_size": 64, "num_local_experts": 4,
 "num_experts_per_tok": 2, "moe_intermediate_size": 32, "moe_layer_freq": 1}
EOF
"$BIN" synth --task copy --vocab 32 --span 8 --tokens 20000 --seed 1 --out "$D/train.bin" >/dev/null &&
"$BIN" synth --task copy --vocab 32 --span 8 --tokens 4000 --seed 2 --out "$D/val.bin" >/dev/null &&
"$BIN" train --config "$D/tiny.json" --data "$D/train.bin" --val "$D/val.bin" --steps 12 --batch-size 4 \
  --seq-len 16 --eval-batches 3 --lr 3e-3 --threads 2 --save-dir "$D/ckpt" --log "$D/metrics.jsonl" >"$D/train.log" 2>&1 ||
  { echo "setup failed:"; cat "$D/train.log"; exit 1; }
want=$(sed -n 's/.*val loss after training: \([0-9.]*\).*/\1/p' "$D/train.log")
[ -n "$want" ] || { echo "no final val loss in the training output:"; cat "$D/train.log"; exit 1; }

loss_of() { sed -n 's/^loss \([0-9.]*\) .*/\1/p' "$D/out"; }
"$BIN" eval --checkpoint "$D/ckpt" --data "$D/val.bin" --batch-size 4 --seq-len 16 --batches 3 --threads 2 >"$D/out" 2>"$D/err"
rc=$?
got=$(loss_of)
if [ $rc -eq 0 ] && [ -n "$got" ] && [ "$(printf %.4f "$got")" = "$want" ]; then ok
else bad "eval loss '$got' (exit $rc) vs training's val loss after training $want: $(cat "$D/out" "$D/err")"; fi
# perplexity = exp(loss)
if awk -v l="$got" -v p="$(sed -n 's/.*perplexity \([0-9.]*\).*/\1/p' "$D/out")" \
     'BEGIN { exit !(p > 0 && (p - exp(l)) ^ 2 < 1e-6) }'; then ok; else bad "perplexity is not exp(loss): $(cat "$D/out")"; fi

# Defaults: batch shape from trainer.json; the step directory works as well as the save dir.
"$BIN" eval --checkpoint "$D/ckpt/step_00000012" --data "$D/val.bin" --batches 3 --threads 2 >"$D/out" 2>"$D/err"
if [ "$(loss_of)" = "$got" ] && grep -q "3 batches of 4 x 16 tokens" "$D/out"; then ok
else bad "defaults: $(cat "$D/out" "$D/err") (wanted loss $got over 3 batches of 4 x 16)"; fi
# All batches by default: more windows, still a finite loss.
"$BIN" eval --checkpoint "$D/ckpt" --data "$D/val.bin" --threads 2 >"$D/out" 2>"$D/err"
if grep -q "^loss [0-9]" "$D/out" && grep -q "62 batches of 4 x 16" "$D/out"; then ok
else bad "all batches: $(cat "$D/out" "$D/err")"; fi

# The loss curve of the demo (scripts/plot_loss.sh): well-formed SVG with one point per
# step on each training curve and the validation points given.
printf '0 3.5\n12 %s\n' "$want" >"$D/val.tsv"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if "$ROOT/scripts/plot_loss.sh" "$D/metrics.jsonl" "$D/loss.svg" "$D/val.tsv" &&
   python3 -c 'import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot(); ns = "{http://www.w3.org/2000/svg}"
lines = [len(p.get("points").split()) for p in r.iter(ns + "polyline")]
sys.exit(0 if lines == [12, 12, 2] and len(list(r.iter(ns + "circle"))) == 3 else 1)' "$D/loss.svg"; then ok
else bad "plot_loss.sh: $(head -c 300 "$D/loss.svg" 2>&1)"; fi
expect plot-empty "missing or empty" -- "$ROOT/scripts/plot_loss.sh" "$D/nope.jsonl" "$D/x.svg"

# Bad inputs.
mkdir -p "$D/empty"
cp -r "$D/ckpt" "$D/corrupt"
printf '\x55' | dd of="$D/corrupt/step_00000012/model-00001-of-00001.safetensors" bs=1 seek=3000 conv=notrunc status=none
"$BIN" synth --vocab 64 --tokens 2000 --out "$D/big_ids.bin" >/dev/null
"$BIN" synth --vocab 32 --tokens 10 --out "$D/short.bin" >/dev/null
"$BIN" synth --vocab 32 --tokens 40 --out "$D/few.bin" >/dev/null
cp "$D/val.bin" "$D/magic.bin"
printf '\x39\x30\x00\x00' | dd of="$D/magic.bin" bs=1 seek=0 conv=notrunc status=none
head -c 2000 "$D/val.bin" >"$D/truncated.bin"
E() { "$BIN" eval --threads 2 "$@"; }
expect missing-ckpt "cannot open checkpoint" -- E --checkpoint "$D/nope" --data "$D/val.bin"
expect not-a-ckpt "not a checkpoint" -- E --checkpoint "$D/empty" --data "$D/val.bin"
expect corrupt-ckpt "checksum mismatch" -- E --checkpoint "$D/corrupt" --data "$D/val.bin"
expect missing-data "cannot open token file" -- E --checkpoint "$D/ckpt" --data "$D/nope.bin"
expect big-ids "vocab" -- E --checkpoint "$D/ckpt" --data "$D/big_ids.bin"
expect bad-magic "magic" -- E --checkpoint "$D/ckpt" --data "$D/magic.bin"
expect truncated "truncated.bin" -- E --checkpoint "$D/ckpt" --data "$D/truncated.bin"
expect short "shorter than one" -- E --checkpoint "$D/ckpt" --data "$D/short.bin"
expect few-windows "fewer than one batch" -- E --checkpoint "$D/ckpt" --data "$D/few.bin" --batch-size 8 --seq-len 16
expect long-seq "exceeds the model's context" -- E --checkpoint "$D/ckpt" --data "$D/val.bin" --seq-len 64
expect negative "must be positive" -- E --checkpoint "$D/ckpt" --data "$D/val.bin" --batches -1
expect no-data "missing required flag --data" -- E --checkpoint "$D/ckpt"
expect unknown-flag "unknown flag" -- E --checkpoint "$D/ckpt" --data "$D/val.bin" --colour 1

echo "test_eval: $pass passed, $fail failed"
[ $fail -eq 0 ]
