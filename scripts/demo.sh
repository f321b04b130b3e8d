#!/usr/bin/env bash
# make demo: train a small MoE transformer on a synthetic copy task and show it learn.
# The copy task repeats each random 16-token segment once: the first copy is
# unpredictable (ln 64 = 4.16 nats), the second fully predictable, so a model that
# learned to copy approaches ln(64)/2 = 2.08 nats; an untrained one sits at 4.16.
set -euo pipefail
BIN=${1:-build/bagualu}
OUT=out/demo
mkdir -p "$OUT"
"$BIN" synth --task copy --vocab 64 --span 16 --tokens 400000 --seed 1 --out "$OUT/train.bin"
"$BIN" synth --task copy --vocab 64 --span 16 --tokens 40000 --seed 2 --out "$OUT/val.bin"
"$BIN" info --config configs/tiny_moe.json
"$BIN" train --config configs/tiny_moe.json --data "$OUT/train.bin" --val "$OUT/val.bin" \
  --batch-size 16 --seq-len 64 --steps 600 --lr 3e-3 --warmup 50 --weight-decay 0.1 \
  --clip 1.0 --seed 1337 --threads "$(nproc)" --log "$OUT/metrics.jsonl" --eval-every 200
echo "metrics: $OUT/metrics.jsonl"
