#!/usr/bin/env bash
# The tokenizer and prepare commands end to end:
#  - tokenizer train: writes a tok.json that encodes and decodes text and random
#    bytes back exactly; the same input gives the same file (deterministic);
#  - prepare: train.bin / val.bin in llm.c's layout; every document starts with
#    <|endoftext|>; train and val together decode back to the documents (a few long
#    documents: each split at its last 10%; many documents: every tenth goes to val);
#    a vocabulary over 65,536 gives version 2 (uint32) shards; a progress bar on a tty;
#  - bad input: one line on stderr naming the problem, exit code 2.
# Usage: test_tokenizer_cli.sh BAGUALU_BINARY BUILD_DIR
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
source "$(dirname "$0")/../shell_checks.sh"

# Text: the KJV when installed (it is, under make test), else this repository's C sources.
if command -v bible >/dev/null; then
  bible -f "Gen1:1-Rev22:21" </dev/null 2>/dev/null | head -c 600000 | sed '$d' >"$D/corpus.txt"
else
  echo "note: bible-kjv not installed; using the C sources as text"
  cat "$ROOT"/src/*/*.c | head -c 600000 >"$D/corpus.txt"
fi
head -c 200000 "$D/corpus.txt" | sed '$d' >"$D/a.txt"
tail -c 150000 "$D/corpus.txt" | sed '1d' >"$D/b.txt"

# ---- train ----
"$BIN" tokenizer train --vocab-size 2000 --out "$D/tok.json" "$D/corpus.txt" >"$D/train.out" 2>"$D/train.err"
check "train exits 0" [ $? -eq 0 ]
check "train reports what it wrote" grep -q "wrote .*tok.json: 2000 tokens" "$D/train.out"
"$BIN" tokenizer train --vocab-size 2000 --out "$D/tok2.json" "$D/corpus.txt" >/dev/null 2>&1
check "training is deterministic" cmp -s "$D/tok.json" "$D/tok2.json"
check "tok.json names its format" grep -q '"format": "bagualu-bpe"' "$D/tok.json"
"$BIN" tokenizer encode --tokenizer "$D/tok.json" "$D/corpus.txt" >"$D/ids.txt"
"$BIN" tokenizer decode --tokenizer "$D/tok.json" "$D/ids.txt" >"$D/back.txt"
check "trained tokenizer: decode(encode(text)) == text" cmp -s "$D/back.txt" "$D/corpus.txt"
words=$(wc -w <"$D/ids.txt"); bytes=$(wc -c <"$D/corpus.txt")
check "trained tokenizer compresses ($bytes bytes -> $words tokens)" [ $((bytes / words)) -ge 3 ]
head -c 100000 /dev/urandom >"$D/random.bin"
printf 'a\0b\xff\xfe<|endoftext|>\n' >>"$D/random.bin"
"$BIN" tokenizer encode --tokenizer "$D/tok.json" "$D/random.bin" | "$BIN" tokenizer decode --tokenizer "$D/tok.json" >"$D/random.back"
check "random bytes round-trip with the trained tokenizer" cmp -s "$D/random.bin" "$D/random.back"
printf '' | "$BIN" tokenizer encode --tokenizer "$D/tok.json" >"$D/empty.ids"
check "empty standard input encodes to an empty line" [ "$(cat "$D/empty.ids")" = "" ]

# ---- prepare: a few long documents (files, and a marker inside one) ----
{ cat "$D/a.txt"; printf '<|endoftext|>'; head -c 50000 "$D/b.txt"; } >"$D/ab.txt"
"$BIN" prepare --tokenizer "$D/tok.json" --out "$D/few" --val-fraction 0.1 "$D/ab.txt" "$D/b.txt" >"$D/prep.out" 2>&1
check "prepare (few documents) exits 0" [ $? -eq 0 ]
"$BIN" tokenizer decode --tokenizer "$D/tok.json" "$D/few/train.bin" >"$D/few.train.txt"
"$BIN" tokenizer decode --tokenizer "$D/tok.json" "$D/few/val.bin" >"$D/few.val.txt"
python3 - "$D" "$ROOT" <<'PY' && ok || bad "prepare (few documents): shard layout or content"
import struct, sys
d = sys.argv[1]
def shard(path, vocab):
    raw = open(path, "rb").read()
    h = struct.unpack("<256i", raw[:1024])
    assert h[0] == 20240520 and h[1] == 1, h[:3]
    assert len(raw) == 1024 + 2 * h[2], "size matches the header"
    toks = struct.unpack(f"<{h[2]}H", raw[1024:])
    assert toks[0] == vocab - 1, "starts with <|endoftext|>"
    return toks
train, val = shard(f"{d}/few/train.bin", 2000), shard(f"{d}/few/val.bin", 2000)
assert train.count(1999) == 3 and val.count(1999) == 3, "three documents in each split"
frac = len(val) / (len(train) + len(val))
assert 0.08 < frac < 0.12, frac
E = "<|endoftext|>"
docs = open(f"{d}/ab.txt").read().split(E) + [open(f"{d}/b.txt").read()]
heads = open(f"{d}/few.train.txt").read().split(E)[1:]
tails = open(f"{d}/few.val.txt").read().split(E)[1:]
assert [h + t for h, t in zip(heads, tails)] == docs, "train head + val tail == each document"
PY

# ---- prepare: many documents (every tenth goes to val whole) ----
for i in $(seq 0 49); do printf 'Document %d. ' "$i"; sed -n "$((i * 20 + 1)),$((i * 20 + 20))p" "$D/a.txt"; printf '<|endoftext|>'; done >"$D/many.txt"
"$BIN" prepare --tokenizer "$D/tok.json" --out "$D/many" --val-fraction 0.1 "$D/many.txt" >/dev/null 2>&1
check "prepare (many documents) exits 0" [ $? -eq 0 ]
"$BIN" tokenizer decode --tokenizer "$D/tok.json" "$D/many/val.bin" >"$D/many.val.txt"
"$BIN" tokenizer decode --tokenizer "$D/tok.json" "$D/many/train.bin" >"$D/many.train.txt"
python3 - "$D" <<'PY' && ok || bad "prepare (many documents): val holds documents 9, 19, 29, 39, 49"
import sys
d, E = sys.argv[1], "<|endoftext|>"
docs = [x for x in open(f"{d}/many.txt").read().split(E) if x]
val = open(f"{d}/many.val.txt").read().split(E)[1:]
train = open(f"{d}/many.train.txt").read().split(E)[1:]
assert val == [docs[i] for i in (9, 19, 29, 39, 49)], [v[:12] for v in val]
assert train == [x for i, x in enumerate(docs) if i % 10 != 9]
PY

# GPT-2's files (fetched with npm): tests/data/test_tokenizer_gpt2.sh, skipped where they cannot be had.

# ---- a vocabulary over 65,536: version 2 (uint32) shards ----
python3 - "$D/big.json" <<'PY'
import json, sys
merges = [[a, b] for a in range(256) for b in range(256)]
json.dump({"format": "bagualu-bpe", "version": 1, "pretokenizer": "gpt2", "vocab_size": 257 + len(merges),
           "merges": merges, "special_tokens": {"<|endoftext|>": 256 + len(merges)}}, open(sys.argv[1], "w"))
PY
"$BIN" prepare --tokenizer "$D/big.json" --out "$D/big" --val-fraction 0 "$D/b.txt" >"$D/big.out" 2>&1
check "vocabulary 65793 gives uint32 tokens" grep -q "vocabulary 65793, uint32" "$D/big.out"
check "version 2 header" python3 -c "import struct; r=open('$D/big/train.bin','rb').read(); h=struct.unpack('<iii',r[:12]); assert h[:2]==(20240520,2) and len(r)==1024+4*h[2] and struct.unpack('<I',r[1024:1028])[0]==65792"
check "--val-fraction 0 writes no val.bin" [ ! -e "$D/big/val.bin" ]
"$BIN" tokenizer decode --tokenizer "$D/big.json" "$D/big/train.bin" | tail -c +14 >"$D/big.back"
check "uint32 shard decodes back to the text" cmp -s "$D/big.back" "$D/b.txt"

# ---- the progress bar on a terminal ----
if command -v script >/dev/null; then
  script -qec "'$BIN' prepare --tokenizer '$D/tok.json' --out '$D/tty' '$D/a.txt'" /dev/null >"$D/tty.out" 2>&1
  check "prepare shows a progress bar on a terminal" grep -q "tokenizing \[#*\] 100%" "$D/tty.out"
  "$BIN" prepare --tokenizer "$D/tok.json" --out "$D/tty" "$D/a.txt" 2>"$D/notty.err" >/dev/null
  check "and no bar when stderr is not a terminal" [ ! -s "$D/notty.err" ]
fi

# ---- bad input: one line, exit 2 ----
: >"$D/empty.txt"
# A fixed first byte: random data that happened to start with "{" would read as JSON.
{ printf '\001'; head -c 5000 /dev/urandom; printf '\0'; } >"$D/binary.bin"
printf '{"format": "sentencepiece", "model": "x"}' >"$D/other.json"
expect train-empty "empty file" -- "$BIN" tokenizer train --vocab-size 300 --out "$D/t.json" "$D/empty.txt"
expect train-binary "binary file" -- "$BIN" tokenizer train --vocab-size 300 --out "$D/t.json" "$D/binary.bin"
expect train-missing "cannot open" -- "$BIN" tokenizer train --vocab-size 300 --out "$D/t.json" "$D/nope.txt"
expect train-small-vocab "vocab-size must be" -- "$BIN" tokenizer train --vocab-size 100 --out "$D/t.json" "$D/a.txt"
expect train-no-files "no input text files" -- "$BIN" tokenizer train --vocab-size 300 --out "$D/t.json"
expect train-no-out "missing required flag --out" -- "$BIN" tokenizer train --vocab-size 300 "$D/a.txt"
expect unknown-format "unknown tokenizer format" -- "$BIN" tokenizer encode --tokenizer "$D/other.json" "$D/a.txt"
expect binary-tokenizer "unknown tokenizer format" -- "$BIN" tokenizer encode --tokenizer "$D/binary.bin" "$D/a.txt"
expect missing-tokenizer "cannot open" -- "$BIN" tokenizer encode --tokenizer "$D/nope.json" "$D/a.txt"
expect dir-no-tokenizer "no tokenizer here" -- "$BIN" tokenizer encode --tokenizer "$D" "$D/a.txt"
head -c 3000 "$D/tok.json" >"$D/cut.json"
expect truncated-tokenizer "not valid JSON" -- "$BIN" tokenizer encode --tokenizer "$D/cut.json" "$D/a.txt"
echo "1 2 70000" >"$D/ids_range.txt"
expect id-out-of-range "out of range" -- "$BIN" tokenizer decode --tokenizer "$D/tok.json" "$D/ids_range.txt"
echo "1 2 x3" >"$D/ids_junk.txt"
expect ids-junk "expected token ids" -- "$BIN" tokenizer decode --tokenizer "$D/tok.json" "$D/ids_junk.txt"
expect shard-ids-range "out of range" -- "$BIN" tokenizer decode --tokenizer "$D/tok.json" "$D/big/train.bin"
expect encode-missing-input "cannot open" -- "$BIN" tokenizer encode --tokenizer "$D/tok.json" "$D/nope.txt"
expect unknown-subcommand "unknown subcommand" -- "$BIN" tokenizer frobnicate
expect no-subcommand "missing subcommand" -- "$BIN" tokenizer
expect prepare-empty "empty file" -- "$BIN" prepare --tokenizer "$D/tok.json" --out "$D/p" "$D/empty.txt"
expect prepare-binary "binary file" -- "$BIN" prepare --tokenizer "$D/tok.json" --out "$D/p" "$D/binary.bin"
expect prepare-missing "cannot open" -- "$BIN" prepare --tokenizer "$D/tok.json" --out "$D/p" "$D/nope.txt"
expect prepare-fraction "val-fraction must be" -- "$BIN" prepare --tokenizer "$D/tok.json" --out "$D/p" --val-fraction 0.9 "$D/a.txt"
expect prepare-format "unknown tokenizer format" -- "$BIN" prepare --tokenizer "$D/other.json" --out "$D/p" "$D/a.txt"
expect prepare-no-files "no input text files" -- "$BIN" prepare --tokenizer "$D/tok.json" --out "$D/p"
printf '<|endoftext|><|endoftext|>' >"$D/only_markers.txt"
expect prepare-no-text "hold no text" -- "$BIN" prepare --tokenizer "$D/tok.json" --out "$D/p" "$D/only_markers.txt"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
