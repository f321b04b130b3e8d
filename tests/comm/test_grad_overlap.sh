#!/usr/bin/env bash
# The gradient reduction overlapped with the backward (--grad-overlap 1) against the
# reduction after it (--grad-overlap 0) under mpirun: the same bits (every logged loss
# and gradient norm, the final checkpoint's weights and AdamW moments) at P=2 EP=2 and
# P=4 EP=2 (dense over the world, experts over pairs), fp32 and bf16, with and without
# ZeRO-1; once more under --comm-timeout, which the reduction's waits run under. The
# step lines carry allreduce_exposed_s beside allreduce_s. Why it can fail: a layer's
# range posted before its gradients are final, or never posted; a sum out of rank order
# (P=4: x0+x1+x2+x3 is not x3+x2+x1+x0 in floats); a tag that lets buckets' messages
# cross; an embedding row sent before the embedding's backward wrote it. tiny_moe has 2
# layers: its second layer's ranges leave mid-backward.
. "$(dirname "$0")/dist_launch.sh"
dist_have_mpi || exit 77
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok   $*"; }
bad() { fail=$((fail+1)); echo "FAIL $*"; }

# Tokens below 40 of the model's 64: embedding rows no batch holds leave early.
"$BIN" synth --vocab 40 --tokens 20000 --out "$D/t.bin" >/dev/null
CFG=$(cd "$(dirname "$0")/../../configs" && pwd)/tiny_moe.json
train() {  # np out-dir flags...
  local np=$1 out=$2
  shift 2
  mkdir -p "$out"
  timeout 120 "${DIST_MPIRUN[@]}" -np "$np" "$BIN" train --config "$CFG" --data "$D/t.bin" --threads 1 \
    --steps 4 --seq-len 32 --batch-size $((8 / np)) --lr 3e-3 --clip 0.5 --save-dir "$out/ck" \
    --log "$out/log.jsonl" "$@" >"$out/stdout" 2>"$out/stderr" || { tail -3 "$out/stderr"; return 1; }
}
# The step records without timings and traffic (their 6 digits are a first look; the
# checkpoints' tensors carry every bit).
numbers() { grep '"step"' "$1" | sed -E 's/"memory":\{[^}]*\},?//; s/"(tokens_per_s|gflops|peak_rss_mib|comm_scratch_hwm|expert_rows_[a-z]*|[a-z0-9_]*_s|a2a_[a-z_]*|allreduce_[a-z_]*)":[^,}]*,?//g'; }
ST_COMPARE=$(cd "$(dirname "$0")/../../bench" && pwd)/st_compare.py
same_ckpt() { python3 "$ST_COMPARE" "$1/ck/$(cat "$1/ck/latest")" "$2/ck/$(cat "$2/ck/latest")" >/dev/null; }

for run in "2 2 fp32 0" "2 2 fp32 1" "2 2 bf16 1" "4 2 fp32 0" "4 2 fp32 1" "4 2 bf16 0" "4 2 bf16 1"; do
  set -- $run; np=$1; ep=$2; dtype=$3; zero=$4
  name="P=$np EP=$ep $dtype --zero $zero"
  r0=$D/p${np}$dtype-z$zero-o0 r1=$D/p${np}$dtype-z$zero-o1
  if ! train "$np" "$r0" --expert-parallel "$ep" --dtype "$dtype" --zero "$zero" --grad-overlap 0 ||
     ! train "$np" "$r1" --expert-parallel "$ep" --dtype "$dtype" --zero "$zero" --grad-overlap 1; then
    bad "$name: a run failed"; continue
  fi
  if [ -s "$r0/log.jsonl" ] && [ "$(numbers "$r0/log.jsonl")" = "$(numbers "$r1/log.jsonl")" ] &&
     same_ckpt "$r0" "$r1"; then
    ok "$name: --grad-overlap 1 bitwise equal to 0 (losses, grad norms, weights, moments)"
  else
    bad "$name: --grad-overlap 1 differs from 0"
    diff <(numbers "$r0/log.jsonl") <(numbers "$r1/log.jsonl") | head -4
  fi
done

# Under the watchdog the waits poll and name their peer; the bits stay.
r=$D/timeout
if train 4 "$r" --expert-parallel 2 --zero 1 --grad-overlap 1 --comm-timeout 30 &&
   [ "$(numbers "$r/log.jsonl")" = "$(numbers "$D/p4fp32-z1-o0/log.jsonl")" ] &&
   same_ckpt "$r" "$D/p4fp32-z1-o0"; then
  ok "--comm-timeout: the same bits"
else bad "--comm-timeout changes the overlapped reduction"; fi

# exposed <= whole in every step line
if awk 'match($0, /"allreduce_s":[0-9.]*/) { s = substr($0, RSTART + 14, RLENGTH - 14) }
        match($0, /"allreduce_exposed_s":[0-9.]*/) { e = substr($0, RSTART + 22, RLENGTH - 22); n++
          if (e > s + 1e-3 || e < 0) bad = 1 } END { exit bad || n != 4 }' "$D/p4fp32-z1-o1/log.jsonl"; then
  ok "allreduce_exposed_s beside allreduce_s in every step"
else bad "exposed time fields: $(tail -1 "$D/p4fp32-z1-o1/log.jsonl" | grep -o '"allreduce_s.*')"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
