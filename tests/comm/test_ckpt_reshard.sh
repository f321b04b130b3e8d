#!/usr/bin/env bash
# Checkpoints of format 2 written and read in parallel, under mpirun:
#   - comm_test_ckpt_zero: every parameter and every owned AdamW element bitwise after a
#     save at one layout (P, EP, ZeRO on/off through model/zero_shard.h) and a load at
#     another;
#   - `bagualu train` resumes along P=4 EP=4 -> P=2 EP=2 -> P=1 -> P=4 EP=2 continue the
#     loss curve of one uninterrupted P=1 run (relative 1e-5: only reduction order
#     differs), and a resume at an unchanged layout (P=2 EP=2) ends in files
#     byte-identical to an uninterrupted run's;
#   - a missing shard: one line naming it, exit 2; --fallback loads the previous one;
#   - an asynchronous save (--save-async 1) is byte-identical to a synchronous one;
#   - kill -9 of one rank of four while saves are in flight: the job ends, every
#     final-named checkpoint is complete and the latest one loads at P=1.
# Why it can fail: a piece or tensor lost or misplaced in resharding, a save that commits
# before every shard is on disk, an async writer that reads state after the step moved on.
. "$(dirname "$0")/dist_launch.sh"
dist_have_mpi || exit 77
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
PROG=$DIST_BIN_DIR/comm_test_ckpt_zero
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok   $*"; }
bad() { fail=$((fail+1)); echo "FAIL $*"; }
ZERO_FLAGS="--zero 1"

# 1. Element by element across layouts (save P EP ZERO -> load P EP ZERO).
mpi_prog() { local np=$1; shift; timeout 60 "${DIST_MPIRUN[@]}" -np "$np" "$PROG" "$@" >"$D/log" 2>&1; }
if mpi_prog 4 --phase save --dir "$D/z" --ep 4 --zero 1; then
  for to in "2 2 1" "1 1 0" "4 2 1" "2 1 0"; do
    set -- $to
    if mpi_prog "$1" --phase load --dir "$D/z" --ep "$2" --zero "$3"; then ok "ZeRO P=4 EP=4 -> P=$1 EP=$2 zero=$3: every element"
    else bad "ZeRO P=4 EP=4 -> P=$1 EP=$2 zero=$3"; tail -3 "$D/log"; fi
  done
else bad "save at P=4 EP=4 with ZeRO"; tail -3 "$D/log"; fi
if mpi_prog 2 --phase save --dir "$D/z2" --ep 2 --zero 0 && mpi_prog 4 --phase load --dir "$D/z2" --ep 4 --zero 1; then
  ok "P=2 EP=2 zero=0 -> P=4 EP=4 zero=1: every element"
else bad "P=2 EP=2 zero=0 -> P=4 EP=4 zero=1"; tail -3 "$D/log"; fi

# 2. The resume chain with `bagualu train` (a constant LR: the schedule does not depend
# on --steps; the global batch is 8 at every P).
"$BIN" synth --vocab 32 --tokens 8000 --out "$D/t.bin" >/dev/null
cat >"$D/cfg.json" <<'JSON'
{"vocab_size": 32, "max_position_embeddings": 16, "hidden_size": 16, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 32, "num_local_experts": 4,
 "num_experts_per_tok": 2, "moe_intermediate_size": 16, "norm": "rmsnorm", "hidden_act": "swiglu",
 "position_embedding": "rope"}
JSON
common() { echo --config "$D/cfg.json" --data "$D/t.bin" --seq-len 8 --threads 1 --lr 1e-2 --min-lr 1e-2 --warmup 0 $ZERO_FLAGS; }
train_np() {  # train_np NP EP ARGS...
  local np=$1 ep=$2; shift 2
  if [ "$np" -eq 1 ]; then "$BIN" train $(common) --batch-size 8 "$@"
  else timeout 120 "${DIST_MPIRUN[@]}" -np "$np" "$BIN" train $(common) --batch-size $((8 / np)) --expert-parallel "$ep" "$@"; fi
}
losses() { grep -o '"loss":[0-9.e+-]*' "$1" | cut -d: -f2; }
train_np 1 1 --steps 8 --log "$D/ref.jsonl" >/dev/null 2>"$D/err" || { bad "reference run: $(cat "$D/err")"; }
S=$D/chain
if train_np 4 4 --steps 2 --save-dir "$S" --log "$D/c1.jsonl" >/dev/null 2>"$D/err" &&
   train_np 2 2 --steps 4 --save-dir "$S" --resume latest --log "$D/c2.jsonl" >/dev/null 2>"$D/err" &&
   train_np 1 1 --steps 6 --save-dir "$S" --resume latest --log "$D/c3.jsonl" >/dev/null 2>"$D/err" &&
   train_np 4 2 --steps 8 --save-dir "$S" --resume latest --log "$D/c4.jsonl" >/dev/null 2>"$D/err"; then
  worst=$(paste <(losses "$D/ref.jsonl") <(cat "$D"/c[1-4].jsonl | grep -o '"loss":[0-9.e+-]*' | cut -d: -f2) |
          awk '{d=$1-$2; if(d<0)d=-d; r=d/$1; if(r>w)w=r; n++} END{printf "%.3g %d", w+0, n}')
  set -- $worst
  if [ "$2" = 8 ] && awk -v w="$1" 'BEGIN { exit !(w <= 1e-5) }'; then
    ok "P=4 EP=4 -> P=2 EP=2 -> P=1 -> P=4 EP=2: the 8 losses follow one P=1 run (worst relative $1)"
  else bad "resume chain: losses differ from one process's (worst relative $1 over $2 steps)"; fi
  [ "$(ls "$S/step_00000008" | grep -c '^model-0000[1-4]-of-00004.safetensors$')" = 4 ] && ok "P=4 wrote 4 model shards" ||
    bad "P=4 shards: $(ls "$S/step_00000008")"
  "$BIN" inspect "$S" >"$D/out" 2>"$D/err" && grep -q "^format: *2 (4 model files, 4 optimizer files)" "$D/out" &&
    ok "inspect reads the sharded checkpoint" || bad "inspect: $(cat "$D/err")"
  "$BIN" export --checkpoint "$S" --out "$D/hf" >/dev/null 2>"$D/err"
  [ -s "$D/hf/model.safetensors" ] && ok "export reads the sharded checkpoint" || bad "export: $(cat "$D/err")"
else bad "resume chain: $(tail -2 "$D/err")"; fi

# Unchanged layout: bitwise, every file but trainer.json's option record.
if train_np 2 2 --steps 4 --save-dir "$D/u" >/dev/null 2>"$D/err" &&
   train_np 2 2 --steps 2 --save-dir "$D/r" >/dev/null 2>"$D/err" &&
   train_np 2 2 --steps 4 --save-dir "$D/r" --resume latest >/dev/null 2>"$D/err"; then
  same=1
  for f in "$D/u/step_00000004"/*.safetensors "$D/u/step_00000004"/*.json; do
    cmp -s "$f" "$D/r/step_00000004/$(basename "$f")" || { same=0; echo "  differs: $(basename "$f")"; }
  done
  [ $same = 1 ] && ok "P=2 EP=2 resume at an unchanged layout: every file byte-identical" || bad "P=2 EP=2 resume: files differ"
else bad "P=2 EP=2 runs: $(tail -2 "$D/err")"; fi

# A missing shard at P=2: one line naming it (mpirun adds its own lines), exit 2; --fallback takes the previous one.
if [ -d "$D/r/step_00000002" ]; then
  rm -f "$D/r/step_00000004/model-00002-of-00002.safetensors"
  train_np 2 2 --steps 6 --save-dir "$D/r" --resume latest >/dev/null 2>"$D/err"; rc=$?
  if [ $rc -eq 2 ] && [ "$(grep -c "bagualu:" "$D/err")" -eq 1 ] && grep -q "step_00000004/model-00002-of-00002.safetensors: cannot open" "$D/err"; then
    ok "missing shard: exit 2, one line naming it"
  else bad "missing shard: exit $rc: $(cat "$D/err")"; fi
  train_np 2 2 --steps 3 --save-dir "$D/r" --resume latest --fallback >/dev/null 2>"$D/err"; rc=$?
  if [ $rc -eq 0 ] && grep -q "resumed from .*step_00000002 at step 2 (fallback)" "$D/err"; then ok "missing shard: --fallback takes step 2"
  else bad "missing shard --fallback: exit $rc: $(cat "$D/err")"; fi
fi

# 3. Asynchronous = synchronous, byte for byte (P=2 and P=1).
for np in 2 1; do
  # The writer waits 300 ms first: training has moved on when it writes the snapshot.
  if BAGUALU_TEST_SAVE_DELAY_MS=300 train_np $np 2 --steps 4 --save-every 2 --save-dir "$D/a$np" --save-async 1 \
       >/dev/null 2>"$D/err" &&
     train_np $np 2 --steps 4 --save-every 2 --save-dir "$D/s$np" --save-async 0 >/dev/null 2>"$D/err"; then
    same=1
    for f in "$D/s$np"/step_0000000[24]/*; do
      cmp -s "$f" "$D/a$np/${f#"$D/s$np/"}" || { same=0; echo "  differs: ${f#"$D/s$np/"}"; }
    done
    [ $same = 1 ] && ok "P=$np: async checkpoints byte-identical to synchronous ones" || bad "P=$np: async differs from sync"
  else bad "P=$np async/sync runs: $(tail -2 "$D/err")"; fi
done

# 4. kill -9 of one rank while saves are in flight (a save every step).
train_np 4 2 --steps 100000 --save-every 1 --keep-last 2 --save-dir "$D/kill" >/dev/null 2>&1 &
launcher=$!
for _ in $(seq 300); do [ -e "$D/kill/latest" ] && break; sleep 0.1; done
for _ in $(seq 300); do ls -A "$D/kill" 2>/dev/null | grep -q '^\.tmp-step_' && break; sleep 0.01; done
pids=$(pgrep -f "train --config $D/cfg.json .*--save-dir $D/kill" | grep -v "^$launcher$")
victim=$(for p in $pids; do [ "$(ps -o comm= -p "$p")" = bagualu ] && echo "$p"; done | tail -n 1)
kill -9 "$victim" 2>/dev/null
wait $launcher
rc=$?
sleep 1
good=1
for d in "$D/kill"/step_*; do "$BIN" inspect "$d" >/dev/null 2>"$D/err" || { good=0; echo "  $(cat "$D/err")"; }; done
# The latest checkpoint loads (at P=1) and training goes on from it.
last=$(sed -n 's/^step_0*//p' "$D/kill/latest" 2>/dev/null)
if [ -n "$victim" ] && [ $rc -ne 0 ] && [ $good = 1 ] && [ -n "$last" ] &&
   "$BIN" train $(common) --batch-size 8 --steps $((last + 1)) --save-dir "$D/kill" --resume latest >/dev/null 2>"$D/err" &&
   grep -q "resumed from .*step_0*$last at step $last" "$D/err"; then
  ok "kill -9 of a rank during saves at P=4: job ended ($rc), every checkpoint complete, step $last loads"
else bad "kill during save: victim '$victim', exit $rc, checkpoints complete $good, latest '$last': $(cat "$D/err")"; fi
left=$(pgrep -f "save-dir $D/kill" | wc -l)
[ "$left" -eq 0 ] && ok "no rank left running" || bad "$left processes left running"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
