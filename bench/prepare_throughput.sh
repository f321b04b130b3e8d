#!/usr/bin/env bash
# Streaming preparation's throughput and memory: the King James Bible (Debian's
# bible-kjv) repeated to SIZE_MB of text, each copy one document (separated by
# <|endoftext|>), through `bagualu prepare` (GPT-2's tokenizer, numbered shards of 100M
# tokens) and `bagualu tokenizer train` (vocabulary 4096), each at 1 and 2 threads.
# Prints a table: MB/s of text, tokens/s (prepare), seconds, peak RSS (GNU time's
# maximum resident set size).
#
#   bench/prepare_throughput.sh [SIZE_MB]   default 1000 (1 GB); WORK_DIR (default a
#                                           temporary directory) holds corpus and shards
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE_MB=${1:-1000}
BIN=${BIN:-build/bagualu}
W=${WORK_DIR:-$(mktemp -d)}
trap '[ -z "${WORK_DIR:-}" ] && rm -rf "$W"' EXIT
command -v bible >/dev/null || { echo "needs the bible command (Debian package bible-kjv)"; exit 2; }
bible -f "Gen1:1-Rev22:21" </dev/null 2>/dev/null >"$W/kjv.txt"
python3 - "$W" "$SIZE_MB" <<'PY'
import sys
w, mb = sys.argv[1], int(sys.argv[2])
one = open(f"{w}/kjv.txt", "rb").read() + b"<|endoftext|>"
n = mb * 1000 * 1000 // len(one) + 1
with open(f"{w}/corpus.txt", "wb") as f:
    for _ in range(n): f.write(one)
PY
bytes=$(stat -c %s "$W/corpus.txt")
calc() { awk "BEGIN{print $1}"; }
printf "corpus: %.1f MB (%d copies of the KJV), %s\n" "$(calc "$bytes / 1e6")" \
  "$((bytes / $(stat -c %s "$W/kjv.txt")))" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
printf "%-16s %7s %10s %12s %9s %12s\n" step threads "MB/s" "tokens/s" seconds "peak RSS MiB"
for threads in 1 2; do
  rm -rf "$W/out"
  /usr/bin/time -f "%e %M" -o "$W/time" env OMP_NUM_THREADS=$threads "$BIN" prepare --tokenizer gpt2 --out "$W/out" \
    --shard-tokens 100000000 "$W/corpus.txt" >"$W/log"
  read -r sec rss <"$W/time"
  tokens=$(grep -o '[0-9]* tokens$' "$W/log" | awk '{s+=$1} END{print s}')
  printf "%-16s %7d %10.1f %12.0f %9.1f %12.0f\n" prepare "$threads" "$(calc "$bytes / $sec / 1e6")" \
    "$(calc "$tokens / $sec")" "$sec" "$(calc "$rss / 1024")"
  /usr/bin/time -f "%e %M" -o "$W/time" env OMP_NUM_THREADS=$threads "$BIN" tokenizer train --vocab-size 4096 \
    --out "$W/tok.json" "$W/corpus.txt" >/dev/null 2>&1
  read -r sec rss <"$W/time"
  printf "%-16s %7d %10.1f %12s %9.1f %12.0f\n" "tokenizer train" "$threads" "$(calc "$bytes / $sec / 1e6")" \
    "-" "$sec" "$(calc "$rss / 1024")"
done
