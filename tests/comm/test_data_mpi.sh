#!/usr/bin/env bash
# Shard sets and blends are read the same at any rank count: a blend of two globs
# trained at P = 1, 2 and 4 (global batch 8) draws the same tokens from each dataset
# (data_tokens equal) and gives the same losses (1e-5 relative: only the order of the
# cross-rank sums differs).
. "$(dirname "$0")/dist_launch.sh"
dist_have_mpi || exit 77  # skipped (CTest SKIP_RETURN_CODE), never passed
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok   $*"; }
bad() { fail=$((fail+1)); echo "FAIL $*"; }

mkdir -p "$D/web" "$D/books"
for k in 0 1 2; do "$BIN" synth --vocab 64 --tokens $((3000 + 500 * k)) --seed $((k + 1)) --out "$D/web/w$k.bin" >/dev/null; done
for k in 0 1; do "$BIN" synth --vocab 64 --tokens 2500 --seed $((k + 7)) --out "$D/books/b$k.bin" >/dev/null; done
CFG=$(cd "$(dirname "$0")/../../configs" && pwd)/tiny_moe.json
ARGS=(--config "$CFG" --data-mix "web:0.75=$D/web/*.bin,books:0.25=$D/books" --threads 1 --steps 6 --seq-len 32)
losses() { grep -o '"loss":[0-9.e+-]*' "$1" | cut -d: -f2; }
tokens() { grep -o '"data_tokens":{[^}]*}' "$1"; }
compare() { paste <(losses "$1") <(losses "$2") | awk '{d=$1-$2; if(d<0)d=-d; r=d/$2; if(r>w)w=r} END{printf "%.3g", w+0}'; }
"$BIN" train "${ARGS[@]}" --batch-size 8 --log "$D/p1.jsonl" >/dev/null 2>"$D/err" || { cat "$D/err"; bad "P=1 run"; }
for np in 2 4; do
  if timeout 120 "${DIST_MPIRUN[@]}" -np $np "$BIN" train "${ARGS[@]}" --batch-size $((8 / np)) \
      --log "$D/p$np.jsonl" >/dev/null 2>"$D/err"; then
    w=$(compare "$D/p$np.jsonl" "$D/p1.jsonl")
    [ "$(tokens "$D/p$np.jsonl")" = "$(tokens "$D/p1.jsonl")" ] && [ -n "$(tokens "$D/p1.jsonl")" ] &&
      awk -v w="$w" 'BEGIN{exit !(w <= 1e-5)}' && ok "P=$np: same tokens per dataset, losses within $w" ||
      bad "P=$np: data_tokens or losses differ (worst $w)"
  else bad "P=$np: exit $?"; tail -3 "$D/err"; fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
