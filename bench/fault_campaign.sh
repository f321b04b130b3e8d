#!/usr/bin/env bash
# Fault campaign: faults injected into small training runs, each outcome checked, the
# counts written to a results file (the figures of RELIABILITY.md). Scenarios:
#   kill9_p1      kill -9 at random moments (--save-every 1: most land in async saves),
#                 relaunched with --resume latest until done: every step_* directory
#                 complete after each kill, final weights and optimizer bitwise equal to
#                 an uninterrupted run (bench/st_compare.py)
#   kill9_p4      the same under mpirun -np 4 (ZeRO-1), one random rank killed each time:
#                 the job must end within 60 s (no hang), then relaunched
#   enospc        the disk fills (tests/enospc_shim.so) at a random byte of a save: exit 1,
#                 one line, `latest` intact; the resume finishes bitwise equal
#   readonly      the save directory made read-only mid-run (as nobody when root): exit 1,
#                 one line, the last checkpoint intact; the resume finishes bitwise equal
#   corrupt_ckpt  a byte of the newest checkpoint flipped: --resume latest refuses (exit
#                 2, one line); with --fallback it resumes the older one, bitwise equal
#   shard_trunc   the token file truncated mid-epoch: the resume refuses (exit 2, one line)
#   shard_corrupt token ids past the vocabulary written into the file: refused (exit 2)
#   sigterm_save  SIGTERM while a save is in flight: exit 0, a checkpoint at the stop step,
#                 the resume finishes bitwise equal
#   nan_skips     NaN gradients from a random step on: --max-skips stops it (exit 1, one
#                 line), `latest` intact, no save at or after the skip that stops it
# Usage: bench/fault_campaign.sh [--kills N] [--trials M] [--out FILE] [--build DIR]
#   N kills per kill scenario (default 50), M trials of each other scenario (default 5).
# Exit 1 when any trial failed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KILLS=50; TRIALS=5; OUT=$ROOT/out/fault_campaign.txt; BUILD=$ROOT/build
while [ $# -gt 0 ]; do
  case $1 in
    --kills) KILLS=$2; shift 2 ;;
    --trials) TRIALS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    *) echo "fault_campaign: unknown option $1" >&2; exit 2 ;;
  esac
done
BIN=$BUILD/bagualu; SHIM=$BUILD/tests/enospc_shim.so
[ -x "$BIN" ] || { echo "fault_campaign: no $BIN (build first)" >&2; exit 2; }
D=$(mktemp -d /tmp/fault_campaign.XXXXXX)
trap 'chmod -R u+w "$D" 2>/dev/null; rm -rf "$D"' EXIT
chmod 755 "$D"
RANDOM=${FAULT_SEED:-4242}
mkdir -p "$(dirname "$OUT")"
{
  echo "# fault campaign, commit $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD || echo +dirty), $(date -u +%F), seed ${FAULT_SEED:-4242}"
  printf '%-14s %7s %7s %7s  %s\n' scenario trials passed failed note
} >"$OUT"
LOG=$OUT.log; : >"$LOG"
say() { echo "$*" | tee -a "$LOG"; }

cat >"$D/cfg.json" <<'JSON'
{"vocab_size": 64, "max_position_embeddings": 16, "hidden_size": 16, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 32, "num_local_experts": 4,
 "num_experts_per_tok": 2, "moe_intermediate_size": 16}
JSON
"$BIN" synth --vocab 64 --tokens 20000 --out "$D/data.bin" >/dev/null || { echo "synth failed"; exit 1; }
chmod -R a+rX "$D"
STEPS=30
BASE0=(train --config "$D/cfg.json" --data "$D/data.bin" --seq-len 8 --threads 1 --lr 1e-3 --warmup 5)
BASE=("${BASE0[@]}" --batch-size 2)
COMMON=("${BASE[@]}" --steps $STEPS)
COMMON4=("${BASE0[@]}" --batch-size 1 --steps $STEPS)  # four ranks: the same global batch
FINAL=step_$(printf %08d $STEPS)

# The uninterrupted references (one process; four ranks, ZeRO-1).
"$BIN" "${COMMON[@]}" --save-dir "$D/ref" --save-every 5 >/dev/null 2>"$D/err" || { cat "$D/err"; exit 1; }
MPI=(mpirun --allow-run-as-root --oversubscribe -np 4)
HAVE_MPI=0
if command -v mpirun >/dev/null && "${MPI[@]}" "$BIN" "${COMMON4[@]}" --save-dir "$D/ref4" \
     --save-every 5 >/dev/null 2>"$D/err"; then HAVE_MPI=1; fi

same() { python3 "$ROOT/bench/st_compare.py" "$1/$FINAL" "$2/$FINAL" >"$D/cmp" 2>&1; }
one_line() { [ "$(wc -l <"$D/err")" -eq 1 ]; }
# Every final-named step directory complete, `latest` naming one.
intact() {
  local s
  for s in "$1"/step_*; do
    [ -e "$s" ] || continue
    "$BIN" inspect "$s" >/dev/null 2>"$D/ierr" || { say "  $s incomplete: $(cat "$D/ierr")"; return 1; }
  done
  [ ! -e "$1/latest" ] || [ -d "$1/$(head -n1 "$1/latest")" ] || { say "  latest names a missing directory"; return 1; }
}
record() {  # record SCENARIO TRIALS PASSED NOTE
  printf '%-14s %7d %7d %7d  %s\n' "$1" "$2" "$3" $(($2 - $3)) "$4" >>"$OUT"
  say "$1: $3 of $2 passed${4:+ ($4)}"
  [ "$3" -eq "$2" ] || FAILED=1
}
FAILED=0
descendants() { local c; for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do echo "$c"; descendants "$c"; done; }

# kill -9 series: launch, kill after a random delay, relaunch until the run finishes.
kill_series() {  # kill_series NAME P
  local name=$1 P=$2 kills=0 trials=0 passed=0 series=0 hangs=0
  local -a run
  if [ "$P" -eq 1 ]; then run=("$BIN" "${COMMON[@]}"); else run=("${MPI[@]}" "$BIN" "${COMMON4[@]}"); fi
  local ref=$D/ref; [ "$P" -eq 1 ] || ref=$D/ref4
  local t0 t_ref
  t0=$(date +%s%N); "${run[@]}" --save-dir "$D/time_$name" --save-every 1 >/dev/null 2>&1; t_ref=$(( ($(date +%s%N) - t0) / 1000 ))
  while [ $kills -lt "$KILLS" ]; do
    series=$((series + 1)); local S=$D/${name}_$series ok=1 launches=0
    while :; do
      launches=$((launches + 1))
      "${run[@]}" --save-dir "$S" --save-every 1 --keep-last 3 --resume latest >"$D/out" 2>"$D/err" &
      local pid=$! delay=$(( (RANDOM * 32768 + RANDOM) % (t_ref + 1) ))
      sleep "$(printf '%d.%06d' $((delay / 1000000)) $((delay % 1000000)))"
      if kill -0 $pid 2>/dev/null && [ $kills -lt "$KILLS" ]; then
        if [ "$P" -eq 1 ]; then kill -9 $pid 2>/dev/null
        else  # one rank of the job, drawn at random
          local ranks=($(for c in $(descendants $pid); do [ "$(cat /proc/$c/comm 2>/dev/null)" = bagualu ] && echo $c; done))
          [ ${#ranks[@]} -gt 0 ] && kill -9 "${ranks[$((RANDOM % ${#ranks[@]}))]}" 2>/dev/null
        fi
        local waited=0
        while kill -0 $pid 2>/dev/null && [ $waited -lt 600 ]; do sleep 0.1; waited=$((waited + 1)); done
        if kill -0 $pid 2>/dev/null; then  # a hang: the survivors did not stop within 60 s
          hangs=$((hangs + 1)); ok=0; say "  $name: job still running 60 s after a rank was killed"
          for c in $(descendants $pid); do kill -9 "$c" 2>/dev/null; done; kill -9 $pid 2>/dev/null
        fi
        wait $pid 2>/dev/null
        kills=$((kills + 1)); trials=$((trials + 1))
        if intact "$S"; then passed=$((passed + 1)); else ok=0; fi
        [ $launches -lt 200 ] || { ok=0; say "  $name: series $series does not finish"; break; }
        continue
      fi
      wait $pid; local rc=$?
      [ $rc -eq 0 ] || { ok=0; say "  $name: a relaunch failed (exit $rc): $(tail -n2 "$D/err")"; }
      break
    done
    trials=$((trials + 1))
    if [ $ok -eq 1 ] && same "$ref" "$S"; then passed=$((passed + 1))
    else say "  $name series $series: final state differs: $(tail -n3 "$D/cmp")"; fi
  done
  record "$name" $trials $passed "$KILLS kills in $series series (+1 final comparison each); hangs $hangs"
}
kill_series kill9_p1 1
if [ $HAVE_MPI -eq 1 ]; then kill_series kill9_p4 4
else printf '%-14s %7s %7s %7s  %s\n' kill9_p4 0 0 0 "SKIPPED: no working mpirun" >>"$OUT"; fi

# Disk full at a random byte of the second checkpoint.
BYTES=$(du -sb "$D/ref/step_00000005" | cut -f1)
t=0; p=0
for _ in $(seq "$TRIALS"); do
  t=$((t + 1)); S=$D/enospc_$t
  budget=$((BYTES + 200 + (RANDOM * 32768 + RANDOM) % BYTES))
  BG_ENOSPC_BUDGET=$budget LD_PRELOAD=$SHIM "$BIN" "${COMMON[@]}" --save-dir "$S" --save-every 5 >/dev/null 2>"$D/err"
  rc=$?
  if [ $rc -eq 1 ] && one_line && grep -q "No space left" "$D/err" && intact "$S" && [ -e "$S/latest" ] \
     && "$BIN" "${COMMON[@]}" --save-dir "$S" --save-every 5 --resume latest >/dev/null 2>&1 && same "$D/ref" "$S"; then p=$((p + 1))
  else say "  enospc budget $budget: exit $rc: $(cat "$D/err")"; fi
done
record enospc $t $p "budget: one checkpoint + a random byte of the next"

# Read-only save directory mid-run (root ignores permissions: run as nobody).
AS=()
if [ "$(id -u)" -eq 0 ]; then AS=(setpriv --reuid=65534 --regid=65534 --clear-groups); fi
if [ "$(id -u)" -ne 0 ] || command -v setpriv >/dev/null; then
  t=0; p=0
  for _ in $(seq "$TRIALS"); do
    t=$((t + 1)); S=$D/ro_$t; mkdir "$S"; [ ${#AS[@]} -gt 0 ] && chown 65534:65534 "$S"
    "${AS[@]}" "$BIN" "${BASE[@]}" --steps 100000 --save-dir "$S" --save-every 5 >/dev/null 2>"$D/err" &
    pid=$!
    for _ in $(seq 1 2000); do [ -e "$S/latest" ] && break; sleep 0.01; done
    sleep "0.0$((RANDOM % 10))"
    kill -STOP $pid; chmod 555 "$S"; kill -CONT $pid
    wait $pid; rc=$?
    chmod 755 "$S"
    if [ $rc -eq 1 ] && one_line && grep -q "Permission denied" "$D/err" && intact "$S"; then p=$((p + 1))
    else say "  readonly $t: exit $rc: $(cat "$D/err")"; fi
  done
  record readonly $t $p "made read-only at a random moment after the first save"
else printf '%-14s %7s %7s %7s  %s\n' readonly 0 0 0 "SKIPPED: root without setpriv" >>"$OUT"; fi

# The newest checkpoint corrupted: refused; with --fallback the older one, bitwise equal.
t=0; p=0
for _ in $(seq "$TRIALS"); do
  t=$((t + 1)); S=$D/corrupt_$t
  cp -r "$D/ref" "$S"  # the full run: the newest checkpoint is the final one
  files=("$S"/$FINAL/*); f=${files[$((RANDOM % ${#files[@]}))]}
  size=$(stat -c %s "$f"); off=$(( (RANDOM * 32768 + RANDOM) % size ))
  python3 -c "import sys; p,o=sys.argv[1],int(sys.argv[2]); b=bytearray(open(p,'rb').read()); b[o]^=0x20; open(p,'wb').write(b)" "$f" "$off"
  "$BIN" "${COMMON[@]}" --save-dir "$S" --save-every 5 --resume latest >/dev/null 2>"$D/err"; rc=$?
  if [ $rc -eq 2 ] && one_line && "$BIN" "${COMMON[@]}" --save-dir "$S" --save-every 5 --resume latest --fallback \
       >/dev/null 2>&1 && same "$D/ref" "$S"; then p=$((p + 1))
  else say "  corrupt $(basename "$f")@$off: exit $rc: $(cat "$D/err")"; fi
done
record corrupt_ckpt $t $p "a random bit of a random file of the newest checkpoint"

# Token files damaged mid-epoch: the resume refuses them.
shard_case() {  # shard_case NAME PYTHON-EDIT
  local name=$1 edit=$2 t=0 p=0
  for _ in $(seq "$TRIALS"); do
    t=$((t + 1)); local S=$D/${name}_$t
    cp "$D/data.bin" "$D/d.bin"
    "$BIN" "${BASE[@]/$D\/data.bin/$D/d.bin}" --steps 10 --save-dir "$S" --save-every 5 >/dev/null 2>&1
    python3 -c "$edit" "$D/d.bin" $RANDOM
    "$BIN" "${BASE[@]/$D\/data.bin/$D/d.bin}" --steps $STEPS --save-dir "$S" --save-every 5 --resume latest >/dev/null 2>"$D/err"; local rc=$?
    if [ $rc -eq 2 ] && one_line && grep -q "d.bin" "$D/err" && intact "$S" && [ "$(cat "$S/latest")" = step_00000010 ]; then p=$((p + 1))
    else say "  $name $t: exit $rc: $(cat "$D/err")"; fi
  done
  record "$name" $t $p "$3"
}
shard_case shard_trunc "import sys,os; p=sys.argv[1]; n=os.path.getsize(p); os.truncate(p, n - 1 - int(sys.argv[2]) % (n // 2))" \
  "cut at a random length"
shard_case shard_corrupt "import sys,os; p=sys.argv[1]; n=os.path.getsize(p); b=bytearray(open(p,'rb').read()); o=n-2-2*(int(sys.argv[2])%(n//4)); b[o]=0xff; b[o+1]=0xff; open(p,'wb').write(b)" \
  "a token id past the vocabulary"

# SIGTERM while an asynchronous save is in flight.
t=0; p=0
for _ in $(seq "$TRIALS"); do
  t=$((t + 1)); S=$D/term_$t
  "$BIN" "${COMMON[@]}" --save-dir "$S" --save-every 1 >"$D/out" 2>"$D/err" &
  pid=$!
  target=$((3 + RANDOM % 20))
  for _ in $(seq 1 5000); do [ -e "$S/.tmp-step_$(printf %08d $target)" ] || [ -e "$S/step_$(printf %08d $target)" ] && break; sleep 0.002; done
  kill -TERM $pid; wait $pid; rc=$?
  if [ $rc -eq 0 ] && grep -q "stopped by signal" "$D/out" && intact "$S" \
     && "$BIN" "${COMMON[@]}" --save-dir "$S" --save-every 1 --resume latest >/dev/null 2>&1 && same "$D/ref" "$S"; then p=$((p + 1))
  else say "  sigterm $t at step ~$target: exit $rc: $(cat "$D/err")"; fi
done
record sigterm_save $t $p "SIGTERM when a save's temporary directory appears"

# NaN gradients from a random step on: --max-skips stops the run, the checkpoint kept.
t=0; p=0
for _ in $(seq "$TRIALS"); do
  t=$((t + 1)); S=$D/nan_$t; from=$((6 + RANDOM % 20))
  BAGUALU_TEST_NAN_STEPS=$from-1000 "$BIN" "${COMMON[@]}" --save-dir "$S" --save-every 5 --max-skips 3 >/dev/null 2>"$D/err"; rc=$?
  # Saves after a skip hold a good state (a skip changes nothing): the last one is at or
  # before the second skip (the third stops the run before its save).
  want=step_$(printf %08d $(( (from + 1) / 5 * 5 )))
  if [ $rc -eq 1 ] && one_line && grep -q "3 steps in a row skipped" "$D/err" && intact "$S" && [ "$(cat "$S/latest")" = "$want" ]; then p=$((p + 1))
  else say "  nan from step $from: exit $rc, latest $(cat "$S/latest"), want $want: $(cat "$D/err")"; fi
done
record nan_skips $t $p "NaN gradients from a random step, --max-skips 3"

echo "results in $OUT"; cat "$OUT"
exit $FAILED
