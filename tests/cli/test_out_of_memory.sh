#!/usr/bin/env bash
# Running out of memory in the library is an error it returns, and the CLI alone turns
# it into exit code 3 with one line on stderr (as when the library exited by itself).
# Under a 2 GiB address-space limit, `synth` asked for 2e9 tokens cannot have its
# buffer. `prepare` and `tokenizer train` stream their input (data/text_stream.h): a
# sparse file of 100 GiB (no disk used) is refused as binary at its first bytes, never
# allocated whole.
# Why it can fail: an out-of-memory error that exits 1 or 2, prints nothing or more
# than one line, or crashes on the way back to main().
BIN=$1
source "$(dirname "$0")/../shell_checks.sh"

# The sanitizers reserve terabytes of address space for their shadow memory, which the
# limit forbids; their builds skip this test.
if ldd "$BIN" 2>/dev/null | grep -q 'libasan\|libtsan'; then
  echo "SKIP: test_out_of_memory cannot run in a sanitizer build (address-space limit)"
  exit 77
fi

truncate -s 100G "$D/huge.txt" || { echo "cannot make a sparse file"; exit 1; }
printf 'a small text to learn a few merges from, a small text\n' >"$D/small.txt"
"$BIN" tokenizer train --vocab-size 260 --out "$D/tok.json" "$D/small.txt" >/dev/null 2>&1 ||
  { echo "tokenizer train on a small text failed"; exit 1; }
limited() { (ulimit -v 2000000 && exec timeout 60 "$@"); }

expect_code synth-buffer 3 "^bagualu: out of memory allocating 8000000000 bytes$" -- \
  limited "$BIN" synth --tokens 2000000000 --vocab 64 --out "$D/synth.bin"
expect_code train-read 2 "huge.txt: binary file (NUL byte at offset 0)" -- \
  limited "$BIN" tokenizer train --vocab-size 300 --out "$D/tok2.json" "$D/huge.txt"
expect_code prepare-read 2 "huge.txt: binary file (NUL byte at offset 0)" -- \
  limited "$BIN" prepare --tokenizer "$D/tok.json" --out "$D/shards" "$D/huge.txt"

echo "test_out_of_memory: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
