#!/usr/bin/env bash
# bagualu generate: the same seed gives the same tokens and another seed other ones;
# greedy (--temperature 0) equals --top-k 1; ids stay in the vocabulary and stop at
# --max-tokens; with a tokenizer the prompt is echoed and text follows. Every bad
# input gives one line on stderr and exit code 2.
BIN=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$(dirname "$0")/../shell_checks.sh"

cat >"$D/tiny.json" <<'EOF'
{"vocab_size": 32, "max_position_embeddings": 32, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 4, "intermediate_size": 64, "num_local_experts": 4,
 "num_experts_per_tok": 2, "moe_intermediate_size": 32, "moe_layer_freq": 1,
 "position_embedding": "rope", "norm": "rmsnorm", "hidden_act": "swiglu"}
EOF
"$BIN" synth --task copy --vocab 32 --span 8 --tokens 20000 --seed 1 --out "$D/train.bin" >/dev/null &&
"$BIN" train --config "$D/tiny.json" --data "$D/train.bin" --steps 30 --batch-size 4 --seq-len 16 \
  --lr 3e-3 --threads 2 --save-dir "$D/ckpt" >"$D/train.log" 2>&1 ||
  { echo "setup failed:"; cat "$D/train.log"; exit 1; }

G() { "$BIN" generate --checkpoint "$D/ckpt" --threads 2 "$@"; }
G --prompt-tokens "1 2 3" --max-tokens 20 --seed 5 >"$D/a" 2>"$D/a.err"
G --prompt-tokens "1 2 3" --max-tokens 20 --seed 5 >"$D/b" 2>/dev/null
G --prompt-tokens "1 2 3" --max-tokens 20 --seed 6 --temperature 1.5 --top-p 1 >"$D/c" 2>/dev/null
G --prompt-tokens "1 2 3" --max-tokens 20 --seed 7 --temperature 1.5 --top-p 1 >"$D/c2" 2>/dev/null
if cmp -s "$D/a" "$D/b"; then ok; else bad "same seed, different output: $(cat "$D/a" "$D/b")"; fi
if ! cmp -s "$D/c" "$D/c2"; then ok; else bad "seeds 6 and 7 gave the same 20 tokens: $(cat "$D/c")"; fi
ids=$(sed -n 's/^generated://p' "$D/a")
n=$(echo $ids | wc -w)
if grep -q "^prompt: 1 2 3$" "$D/a" && [ "$n" -eq 20 ] && echo $ids | tr ' ' '\n' | awk '$1 < 0 || $1 >= 32 { exit 1 }'; then ok
else bad "ids output: $(cat "$D/a")"; fi
if [ "$(wc -l <"$D/a.err")" -eq 1 ] && grep -q "20 tokens in .*stopped: --max-tokens reached" "$D/a.err"; then ok
else bad "summary line: $(cat "$D/a.err")"; fi
G --prompt-tokens "4 5 6 7" --max-tokens 12 --temperature 0 >"$D/g1" 2>/dev/null
G --prompt-tokens "4 5 6 7" --max-tokens 12 --top-k 1 --seed 99 >"$D/g2" 2>/dev/null
if cmp -s "$D/g1" "$D/g2"; then ok; else bad "greedy differs from top-k 1: $(cat "$D/g1" "$D/g2")"; fi
# The context (32 positions) ends generation: 30 prompt tokens leave room for 3.
G --prompt-tokens "$(seq -s ' ' 1 30 | awk '{ for (i = 1; i <= NF; i++) printf "%d ", $i % 32 }')" \
  --max-tokens 10 >"$D/full" 2>"$D/full.err"
if grep -q "3 tokens in .*context is full" "$D/full.err"; then ok; else bad "context full: $(cat "$D/full.err")"; fi

# Text through a tokenizer trained here (byte-level BPE of 300 tokens on C sources).
cat "$ROOT"/src/*/*.h >"$D/text.txt"
"$BIN" tokenizer train --vocab-size 300 --out "$D/tok.json" "$D/text.txt" >/dev/null 2>&1 &&
"$BIN" tokenizer train --vocab-size 400 --out "$D/tok400.json" "$D/text.txt" >/dev/null 2>&1 &&
"$BIN" prepare --tokenizer "$D/tok.json" --out "$D/txt" "$D/text.txt" >/dev/null 2>&1 &&
sed 's/"vocab_size": 32/"vocab_size": 300/; s/"max_position_embeddings": 32/"max_position_embeddings": 64/' \
  "$D/tiny.json" >"$D/text.json" &&
"$BIN" train --config "$D/text.json" --data "$D/txt/train.bin" --steps 20 --batch-size 4 --seq-len 32 \
  --lr 3e-3 --threads 2 --save-dir "$D/ckpt_text" >"$D/train_text.log" 2>&1 ||
  { echo "text setup failed:"; cat "$D/train_text.log"; exit 1; }
"$BIN" generate --checkpoint "$D/ckpt_text" --tokenizer "$D/tok.json" --prompt "static int" \
  --max-tokens 30 --seed 1 --threads 2 >"$D/t" 2>"$D/t.err"
rc=$?
if [ $rc -eq 0 ] && head -c 10 "$D/t" | grep -q "^static int" && [ "$(wc -c <"$D/t")" -gt 12 ]; then ok
else bad "text generation (exit $rc): $(cat "$D/t" "$D/t.err")"; fi

# Bad inputs.
mkdir -p "$D/empty"
expect missing-ckpt "cannot open checkpoint" -- "$BIN" generate --checkpoint "$D/nope" --prompt-tokens "1"
expect not-a-ckpt "not a checkpoint" -- "$BIN" generate --checkpoint "$D/empty" --prompt-tokens "1"
expect no-tokenizer "give --tokenizer" -- G --prompt "hello"
expect id-range "not a token id below the vocabulary size 32" -- G --prompt-tokens "1 32"
expect id-text "not a token id" -- G --prompt-tokens "1 two"
expect id-empty "no token ids" -- G --prompt-tokens " "
expect both-prompts "not both" -- G --prompt "a" --prompt-tokens "1"
expect top-p-zero "top-p must be in" -- G --prompt-tokens "1" --top-p 0
expect top-p-big "top-p must be in" -- G --prompt-tokens "1" --top-p 1.5
expect temperature "temperature must be" -- G --prompt-tokens "1" --temperature -1
expect top-k "top-k must be" -- G --prompt-tokens "1" --top-k -2
expect max-tokens "max-tokens must be" -- G --prompt-tokens "1" --max-tokens -1
expect long-prompt "context holds 32" -- G --prompt-tokens "$(seq -s ' ' 0 31) 1"
expect bad-tokenizer "nope.json" -- "$BIN" generate --checkpoint "$D/ckpt_text" --tokenizer "$D/nope.json" --prompt "a"
expect big-tokenizer "more than the model's vocabulary of 300" -- \
  "$BIN" generate --checkpoint "$D/ckpt_text" --tokenizer "$D/tok400.json" --prompt "a"
expect text-no-tokenizer "give --tokenizer" -- "$BIN" generate --checkpoint "$D/ckpt_text" --prompt "a"

echo "test_generate: $pass passed, $fail failed"
[ $fail -eq 0 ]
