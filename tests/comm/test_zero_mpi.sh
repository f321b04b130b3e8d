#!/usr/bin/env bash
# ZeRO-1 under mpirun: `--zero 1` (sharded AdamW state, reduce-scatter + all-gather)
# against `--zero 0` (replicated, all-reduce) must give the same bits: every logged
# loss and gradient norm, and the final checkpoint's weights and AdamW moments (the
# files byte for byte), at P=2 EP=2, P=4 EP=2 and P=4 EP=4, fp32 and bf16. Rank 0's
# optimizer elements must be its shard: 1/P of the dense block, 1/(P/EP) of its
# experts. A sharded run resumed from its own mid-run checkpoint ends on the same bits.
. "$(dirname "$0")/dist_launch.sh"
dist_have_mpi || exit 77
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok   $*"; }
bad() { fail=$((fail+1)); echo "FAIL $*"; }

"$BIN" synth --vocab 64 --tokens 20000 --out "$D/t.bin" >/dev/null
CFG=$(cd "$(dirname "$0")/../../configs" && pwd)/tiny_moe.json
train() {  # np out-dir flags...
  local np=$1 out=$2
  shift 2
  mkdir -p "$out"
  timeout 120 "${DIST_MPIRUN[@]}" -np "$np" "$BIN" train --config "$CFG" --data "$D/t.bin" --threads 1 \
    --steps 6 --seq-len 32 --batch-size $((8 / np)) --lr 3e-3 --clip 0.5 --save-dir "$out/ck" \
    --log "$out/log.jsonl" "$@" >"$out/stdout" 2>"$out/stderr" || { tail -3 "$out/stderr"; return 1; }
}
# The step records without timings and traffic: everything that depends on the numbers.
numbers() { grep '"step"' "$1" | sed -E 's/"memory":\{[^}]*\},?//; s/"(tokens_per_s|gflops|peak_rss_mib|comm_scratch_hwm|expert_rows_[a-z]*|[a-z0-9_]*_s|a2a_[a-z_]*|allreduce_[a-z_]*)":[^,}]*,?//g'; }
ST_COMPARE=$(cd "$(dirname "$0")/../../bench" && pwd)/st_compare.py
same_ckpt() {  # dir-a dir-b: the final checkpoints' tensors bit for bit (ZeRO-1 stores
               # the optimizer in slices, replication in whole tensors: compared joined)
  python3 "$ST_COMPARE" "$1/ck/$(cat "$1/ck/latest")" "$2/ck/$(cat "$2/ck/latest")" >/dev/null
}

for layout in "2 2" "4 2" "4 4"; do
  set -- $layout; np=$1; ep=$2
  for dtype in fp32 bf16; do
    name="P=$np EP=$ep $dtype"
    r0=$D/p${np}e${ep}$dtype-z0 r1=$D/p${np}e${ep}$dtype-z1
    if ! train "$np" "$r0" --expert-parallel "$ep" --dtype "$dtype" --zero 0 ||
       ! train "$np" "$r1" --expert-parallel "$ep" --dtype "$dtype" --zero 1; then
      bad "$name: a run failed"; continue
    fi
    if [ "$(numbers "$r0/log.jsonl")" = "$(numbers "$r1/log.jsonl")" ] && [ -s "$r0/log.jsonl" ] &&
       same_ckpt "$r0" "$r1"; then
      ok "$name: --zero 1 bitwise equal to --zero 0 (losses, grad norms, weights, moments)"
    else
      bad "$name: --zero 1 differs from --zero 0"
      diff <(numbers "$r0/log.jsonl") <(numbers "$r1/log.jsonl") | head -4
    fi
    [ "$dtype" = fp32 ] || continue
    # "optimizer state per rank: D dense + X expert elements (...)": rank 0's shard.
    read -r d0 x0 < <(sed -nE 's/^optimizer state per rank: ([0-9]+) dense \+ ([0-9]+) expert.*replicated.*/\1 \2/p' "$r0/stdout")
    read -r d1 x1 < <(sed -nE 's/^optimizer state per rank: ([0-9]+) dense \+ ([0-9]+) expert.*ZeRO-1.*/\1 \2/p' "$r1/stdout")
    if [ -n "$d0" ] && [ -n "$d1" ] && [ "$d1" -eq $((d0 / np)) ] && [ "$x1" -eq $((x0 / (np / ep))) ]; then
      ok "$name: rank 0 holds $d1 of $d0 dense and $x1 of $x0 expert optimizer elements"
    else
      bad "$name: optimizer elements '$d0 $x0' replicated vs '$d1 $x1' sharded"
    fi
  done
done

# Resume under ZeRO-1 (the interim whole-block checkpoint): save at step 3, resume, and
# end on the uninterrupted run's bits.
r=$D/resume
if train 4 "$r/a" --expert-parallel 2 --zero 1 --save-every 3 &&
   train 4 "$r/b" --expert-parallel 2 --zero 1 --resume "$r/a/ck/step_00000003"; then
  same_ckpt "$r/a" "$r/b" && ok "P=4 EP=2 --zero 1: resumed from step 3, final state bitwise equal" ||
    bad "P=4 EP=2 --zero 1: resumed run differs"
else bad "P=4 EP=2 --zero 1 resume: a run failed"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
