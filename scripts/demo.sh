#!/usr/bin/env bash
# make demo: from raw English text to a trained Mixture-of-Experts model that writes.
#
#   1. corpus     the King James Bible (Debian's bible-kjv, installed here if missing):
#                 4.2 MB of prose, verse numbers stripped, one document per chapter
#   2. tokenizer  a byte-level BPE of 4096 tokens learned from it (a second or so; a
#                 small vocabulary keeps the embedding and LM head cheap on 2 cores)
#   3. shards     bagualu prepare: train.bin / val.bin (every 20th chapter is validation)
#   4. training   configs/demo_moe.json, 8 experts top-2 in every layer, for about
#                 DEMO_SECONDS (default 210) on DEMO_THREADS (default 2) cores: a short
#                 timing run measures this machine's step time and sets the step count
#   5. results    validation loss before and after (bagualu eval on the checkpoint),
#                 the run report (bagualu report: one HTML page, rewritten during training
#                 too), the loss curve as SVG beside the metrics, and text sampled from the model
#
# Everything lands in out/demo/ (git-ignored). Usage: scripts/demo.sh [path/to/bagualu]
set -euo pipefail
BIN=${1:-build/bagualu}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${DEMO_OUT:-out/demo}
THREADS=${DEMO_THREADS:-2}
SECONDS_TARGET=${DEMO_SECONDS:-210}
CONFIG=$ROOT/configs/demo_moe.json
B=16 T=128 VOCAB=4096
START=$(date +%s)

if [ -t 1 ]; then BOLD=$'\033[1m' DIM=$'\033[2m' RESET=$'\033[0m'; else BOLD='' DIM='' RESET=''; fi
section() { printf '\n%s== %s ==%s\n' "$BOLD" "$1" "$RESET"; }
say() { printf '  %s\n' "$*"; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }
[ -x "$BIN" ] || die "$BIN not found: build first (make build)"
mkdir -p "$OUT"

printf '%sbagualu demo%s: a small Mixture-of-Experts transformer learns English from the King James Bible\n' "$BOLD" "$RESET"

section "1. Corpus"
if ! command -v bible >/dev/null; then
  say "installing the King James Bible (Debian package bible-kjv) ..."
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
      --no-install-recommends bible-kjv; } >"$OUT/apt.log" 2>&1 || die "apt-get install bible-kjv failed (see $OUT/apt.log)"
fi
# "Ge1:1 In the beginning ..." → the verse text, one verse a line; a chapter (verse 1)
# starts a new document, marked the way bagualu prepare splits documents.
bible -f "Gen1:1-Rev22:21" </dev/null 2>/dev/null |
  awk '{ ref = $1; sub(/^[^ ]+ /, ""); split(ref, a, ":"); if (a[2] == "1" && NR > 1) printf "<|endoftext|>"; print }' \
    >"$OUT/kjv.txt"
[ -s "$OUT/kjv.txt" ] || die "the bible command printed nothing"
say "King James Bible: $(wc -l <"$OUT/kjv.txt") verses in $(($(grep -c 'endoftext' "$OUT/kjv.txt") + 1)) chapters, $(awk -v b="$(wc -c <"$OUT/kjv.txt")" 'BEGIN { printf "%.1f", b / 1e6 }') MB  ($OUT/kjv.txt)"
say "${DIM}$(sed -n '1p' "$OUT/kjv.txt")${RESET}"

section "2. Tokenizer"
"$BIN" tokenizer train --vocab-size $VOCAB --out "$OUT/tok.json" "$OUT/kjv.txt" >"$OUT/tokenizer.log" 2>&1 ||
  { cat "$OUT/tokenizer.log"; die "tokenizer training failed"; }
say "byte-level BPE, $VOCAB tokens, learned from the corpus  ($OUT/tok.json)"
example="And God said, Let there be light: and there was light."
pieces=$(printf '%s' "$example" | "$BIN" tokenizer encode --tokenizer "$OUT/tok.json" 2>/dev/null |
  tr -s ' \n' '\n' | grep -v '^$' | while read -r id; do
    printf '%s' "$id" | "$BIN" tokenizer decode --tokenizer "$OUT/tok.json" 2>/dev/null; printf '|'; done)
say "${DIM}${pieces%|}${RESET}"

section "3. Token shards"
"$BIN" prepare --tokenizer "$OUT/tok.json" --out "$OUT/data" "$OUT/kjv.txt" >"$OUT/prepare.log" 2>&1 ||
  { cat "$OUT/prepare.log"; die "preparing the shards failed"; }
sed 's/^ */  /' "$OUT/prepare.log"

section "4. Model"
"$BIN" info --config "$CONFIG" --seq-len $T >"$OUT/info.txt" || die "bad model config $CONFIG"
sed 's/^/  /' "$OUT/info.txt"
say "$(awk -F'[:,]' '{ gsub(/[ "]/, "") } NF >= 2 { v[$1] = $2 } END {
  printf "%s layers, hidden size %s, %s heads; every layer an MoE of %s experts, top-%s routing; %s, %s, %s",
    v["num_hidden_layers"], v["hidden_size"], v["num_attention_heads"], v["num_local_experts"],
    v["num_experts_per_tok"], v["position_embedding"], v["norm"], v["hidden_act"] }' "$CONFIG")"
say "${DIM}config: configs/demo_moe.json${RESET}"

section "5. Training"
# A few steps to time this machine, then as many steps as fit the time budget.
rm -rf "$OUT/ckpt" "$OUT/metrics.jsonl" "$OUT/calibrate.jsonl" "$OUT/loss.svg" "$OUT/report.html"
TRAIN_FLAGS=(--config "$CONFIG" --data "$OUT/data/train.bin" --batch-size $B --seq-len $T
  --lr 3e-3 --min-lr 3e-4 --weight-decay 0.1 --clip 1.0 --seed 1337 --threads "$THREADS")
"$BIN" train "${TRAIN_FLAGS[@]}" --steps 6 --warmup 1 --log "$OUT/calibrate.jsonl" >/dev/null 2>&1 ||
  die "the timing run failed: $BIN train ${TRAIN_FLAGS[*]} --steps 6"
step_s=$(sed -n 's/.*"step":\([3-6]\),.*"step_s":\([0-9.]*\).*/\2/p' "$OUT/calibrate.jsonl" | sort -g | sed -n 2p)
STEPS=$(awk -v s="$step_s" -v t="$SECONDS_TARGET" 'BEGIN { n = int(t / (s * 1.04) / 10) * 10; print (n < 100 ? 100 : (n > 3000 ? 3000 : n)) }')
EVAL_EVERY=$(( (STEPS / 5 + 9) / 10 * 10 ))
say "$(awk -v s="$step_s" -v n="$STEPS" -v b=$B -v t=$T -v th="$THREADS" -v e="$EVAL_EVERY" 'BEGIN {
  printf "this machine: %.2f s per step of %d x %d tokens on %s threads -> %d steps (about %.1f min), validation every %d", s, b, t, th, n, n * s * 1.04 / 60, e }')"
echo
TRAIN_CMD=("$BIN" train "${TRAIN_FLAGS[@]}" --val "$OUT/data/val.bin" --steps "$STEPS" --warmup $((STEPS / 20))
  --eval-every "$EVAL_EVERY" --eval-batches 8 --save-dir "$OUT/ckpt" --log "$OUT/metrics.jsonl"
  --report "$OUT/report.html" --report-every "$EVAL_EVERY")
# On a terminal the trainer redraws one progress line; `script` gives it one while
# keeping a copy of the output for the validation points of the plot.
if [ -t 1 ] && command -v script >/dev/null; then
  script -qfec "$(printf '%q ' "${TRAIN_CMD[@]}")" /dev/null | tee "$OUT/train.log" ||
    die "training failed (see $OUT/train.log)"
else
  "${TRAIN_CMD[@]}" 2>&1 | tee "$OUT/train.log" || die "training failed (see $OUT/train.log)"
fi

section "6. Results"
tr '\r' '\n' <"$OUT/train.log" | awk -v steps="$STEPS" '
  /val loss before training:/ { print 0, $NF }
  /^ *step [0-9]+: val loss/ { s = $2; sub(":", "", s); print s, $NF }
  /val loss after training:/ { print steps, $NF }' >"$OUT/val.tsv"
before=$(awk 'NR == 1 { print $2 }' "$OUT/val.tsv")
"$BIN" eval --checkpoint "$OUT/ckpt" --data "$OUT/data/val.bin" --batches 8 --threads "$THREADS" >"$OUT/eval.txt" 2>&1 ||
  { cat "$OUT/eval.txt"; die "eval failed"; }
after=$(sed -n 's/^loss \([0-9.]*\) .*/\1/p' "$OUT/eval.txt")
awk -v b="$before" -v a="$after" -v v=$VOCAB 'BEGIN {
  printf "  validation loss  %.3f -> %.3f nats/token   (perplexity %.0f -> %.1f; a uniform guess over %d tokens: %.3f)\n",
    b, a, exp(b), exp(a), v, log(v) }'
say "${DIM}$(head -1 "$OUT/eval.txt")${RESET}"
PLOT_TITLE="bagualu demo: MoE transformer on the King James Bible" \
  "$ROOT/scripts/plot_loss.sh" "$OUT/metrics.jsonl" "$OUT/loss.svg" "$OUT/val.tsv"
"$BIN" report "$OUT/metrics.jsonl" --out "$OUT/report.html" >/dev/null || die "bagualu report failed"
say "run report:  $OUT/report.html  (open it in a browser: loss, throughput, expert load, memory)"
say "loss curve:  $OUT/loss.svg"
say "metrics:     $OUT/metrics.jsonl  (one JSON object per step)"
say "checkpoint:  $OUT/ckpt/$(cat "$OUT/ckpt/latest")"

section "7. Samples  (temperature 0.8, top-k 40, seed 1)"
sample() {
  if [ -n "$1" ]; then printf '\n  %sprompt: "%s"%s\n' "$DIM" "$1" "$RESET"; else printf '\n  %sno prompt: a new chapter%s\n' "$DIM" "$RESET"; fi
  "$BIN" generate --checkpoint "$OUT/ckpt" --tokenizer "$OUT/tok.json" --prompt "$1" --max-tokens "$2" \
    --temperature 0.8 --top-k 40 --top-p 1 --seed 1 2>"$OUT/generate.err" |
    fold -s -w 92 | sed "s/^/  ${BOLD}|${RESET} /" || die "generate failed: $(cat "$OUT/generate.err")"
}
sample "In the beginning" 80
sample "And Jesus said unto them," 80
sample "The LORD is my shepherd;" 60
sample "" 80
say "${DIM}$(tail -1 "$OUT/generate.err")${RESET}"

END=$(date +%s)
section "Done in $(( (END - START) / 60 ))m$(printf '%02d' $(( (END - START) % 60 )))s"
say "more text:  $BIN generate --checkpoint $OUT/ckpt --tokenizer $OUT/tok.json --prompt \"...\""
