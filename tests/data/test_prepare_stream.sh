#!/usr/bin/env bash
# Streaming `prepare` (data/text_stream.c, data/token_writer.c):
#   - one 2.5 MB document, read in 1 MiB segments (cut after newlines, and by pre-token
#     in a 1.1 MB line without one): the concatenated numbered shards are exactly
#     end-of-text + `tokenizer encode` of the whole file at once;
#   - the same shards at 1 and 2 threads; gzip, standard input and JSON Lines give the
#     train and val shards of the plain text; train/val never split a document
#     (many documents: each shard holds whole documents);
#   - bad inputs: one line naming the problem, exit 2.
BIN=$1
source "$(dirname "$0")/../shell_checks.sh"

python3 - "$D" <<'PY'
import random, sys, json
d = sys.argv[1]
random.seed(5)
words = ["the", "of", "and", "LORD", "unto", "shall", "said", "Israel", "2024", "don't", "naïve", "über", "日本",
         "  ", "\t", "!!", "...", "x7", "(a)", "—"]
def text(n, newlines=True):
    out = []
    size = 0
    while size < n:
        w = random.choice(words)
        sep = "\n" if newlines and random.random() < 0.08 else " "
        out.append(w + sep)
        size += len(w) + 1
    return "".join(out)
big = text(300_000) + text(1_100_000, newlines=False) + text(200_000)
open(f"{d}/big.txt", "w").write(big)
docs = [text(random.randint(10, 3000)) for _ in range(200)]
open(f"{d}/many.txt", "w").write("<|endoftext|>".join(docs))
with open(f"{d}/many.jsonl", "w") as f:
    for doc in docs: f.write(json.dumps({"text": doc, "n": 1}) + "\n")
PY
"$BIN" tokenizer train --vocab-size 600 --out "$D/tok.json" "$D/many.txt" >/dev/null 2>&1 || bad "tokenizer train"
TOK=(--tokenizer "$D/tok.json")
ids() {  # the token ids of shards, one per line
  python3 - "$@" <<'PY'
import struct, sys
for p in sys.argv[1:]:
    b = open(p, "rb").read()
    n = struct.unpack("<3i", b[:12])[2]
    w = 2 if struct.unpack("<3i", b[:12])[1] == 1 else 4
    t = struct.unpack(f"<{n}{'H' if w == 2 else 'I'}", b[1024:1024 + n * w])
    if n: sys.stdout.write("\n".join(map(str, t)) + "\n")
PY
}
OMP_NUM_THREADS=2 "$BIN" prepare "${TOK[@]}" --out "$D/s2" --val-fraction 0 --shard-tokens 40000 "$D/big.txt" >/dev/null ||
  bad "prepare big.txt"
eot=$(python3 -c "import json; t=json.load(open('$D/tok.json')); print(len(t['merges']) + 256)" 2>/dev/null)
ids "$D"/s2/train_*.bin >"$D/shards.ids"
{ echo "$eot"; "$BIN" tokenizer encode "${TOK[@]}" "$D/big.txt" | tr ' ' '\n' | grep -v '^$'; } >"$D/whole.ids"
[ "$(ls "$D"/s2/train_*.bin | wc -l)" -gt 5 ] && cmp -s "$D/shards.ids" "$D/whole.ids" && ok ||
  bad "the shards' tokens differ from encoding the whole corpus at once ($(wc -l <"$D/shards.ids") vs $(wc -l <"$D/whole.ids"))"
OMP_NUM_THREADS=1 "$BIN" prepare "${TOK[@]}" --out "$D/s1" --val-fraction 0 --shard-tokens 40000 "$D/big.txt" >/dev/null
diff -rq "$D/s1" "$D/s2" >/dev/null && ok || bad "1 and 2 threads wrote different shards"

"$BIN" prepare "${TOK[@]}" --out "$D/plain" "$D/many.txt" "$D/big.txt" >/dev/null || bad "prepare plain"
gzip -c "$D/many.txt" >"$D/many.txt.gz"
"$BIN" prepare "${TOK[@]}" --out "$D/gz" "$D/many.txt.gz" - <"$D/big.txt" >/dev/null || bad "prepare gz + stdin"
cmp -s "$D/plain/train.bin" "$D/gz/train.bin" && cmp -s "$D/plain/val.bin" "$D/gz/val.bin" && ok ||
  bad "gzip and standard input differ from plain files"
"$BIN" prepare "${TOK[@]}" --out "$D/js" --jsonl-field text "$D/many.jsonl" >/dev/null || bad "prepare jsonl"
"$BIN" prepare "${TOK[@]}" --out "$D/pm" "$D/many.txt" >/dev/null
cmp -s "$D/pm/train.bin" "$D/js/train.bin" && cmp -s "$D/pm/val.bin" "$D/js/val.bin" && ok ||
  bad "JSON Lines differ from the same documents as text"
# Many documents: numbered shards are the unsharded files cut, and val holds whole documents.
"$BIN" prepare "${TOK[@]}" --out "$D/pn" --shard-tokens 2000 "$D/many.txt" >/dev/null
cmp -s <(ids "$D"/pn/train_*.bin) <(ids "$D/pm/train.bin") && cmp -s <(ids "$D"/pn/val_*.bin) <(ids "$D/pm/val.bin") &&
  ok || bad "numbered shards differ from the single files"
[ "$(ids "$D/pm/val.bin" | grep -c "^$eot\$")" -eq 10 ] && ok || bad "val should hold 10 whole documents of 200"
# Stale numbered shards of an earlier, larger run are removed.
"$BIN" prepare "${TOK[@]}" --out "$D/pn" --shard-tokens 20000 "$D/many.txt" >/dev/null
cmp -s <(ids "$D"/pn/train_*.bin) <(ids "$D/pm/train.bin") && ok || bad "stale shards left behind"

printf 'abc\0def' >"$D/bin.txt"
expect "missing input" "nope.txt: cannot open" -- "$BIN" prepare "${TOK[@]}" --out "$D/x" "$D/nope.txt"
expect "binary input" "binary file" -- "$BIN" prepare "${TOK[@]}" --out "$D/x" "$D/bin.txt"
expect "jsonl without the field" "many.jsonl:1: no string field" -- "$BIN" prepare "${TOK[@]}" --out "$D/x" --jsonl-field body "$D/many.jsonl"
expect "bad --shard-tokens" "shard-tokens must be" -- "$BIN" prepare "${TOK[@]}" --out "$D/x" --shard-tokens -5 "$D/many.txt"
expect "tokenizer train: binary input" "binary file" -- "$BIN" tokenizer train --vocab-size 300 --out "$D/t.json" "$D/bin.txt"
echo "prepare_stream: $pass passed, $fail failed"
[ $fail -eq 0 ]
