#!/usr/bin/env bash
# A save that cannot be written: the disk fills up (ENOSPC, injected by enospc_shim.so at
# many points of a save: the model file's header and payload, the optimizer file, the
# indexes, the trainer.json, the `latest` pointer; saves are asynchronous by default, so
# most of these fail on the writer thread), the save directory becomes read-only, or it
# vanishes (moved away) during the run. Each must give:
#   - exit code 1 and exactly one line on stderr naming the cause;
#   - the previous checkpoint and `latest` intact and loadable (`bagualu inspect`, and a
#     resume that finishes with files byte-identical to an uninterrupted run's);
#   - no half-written final-named directory (every step_* passes `bagualu inspect`), and
#     no directory recreated in place of a vanished one.
# A save directory that is unusable from the start (a file, not creatable, read-only) is
# bad input: exit 2 before training.
# Why it can fail: an unchecked write or fsync (the run goes on with a broken
# checkpoint), a rename before the files are complete, `latest` updated after a failed
# save, a save directory silently recreated, an error reported as a crash or twice.
BIN=$1
BUILD=$2
SHIM=$BUILD/tests/enospc_shim.so
source "$(dirname "$0")/../shell_checks.sh"
trap 'chmod -R u+w "$D" 2>/dev/null; rm -rf "$D"' EXIT  # it makes read-only directories
chmod 755 "$D"
[ -f "$SHIM" ] || { echo "missing $SHIM (built by tests/CMakeLists.txt)"; echo "checkpoint_disk: 0 passed, 1 failed"; exit 1; }
# An ASan build has its runtime linked into bagualu; it must not insist on coming first.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0

cat >"$D/cfg.json" <<'EOF'
{"vocab_size": 32, "max_position_embeddings": 16, "hidden_size": 16, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 32, "num_local_experts": 4,
 "num_experts_per_tok": 2, "moe_intermediate_size": 16}
EOF
chmod 644 "$D/cfg.json"
"$BIN" synth --vocab 32 --tokens 20000 --out "$D/data.bin" >/dev/null || { echo "synth failed"; exit 1; }
chmod 644 "$D/data.bin"
COMMON=(--config "$D/cfg.json" --data "$D/data.bin" --batch-size 2 --seq-len 8 --threads 1)
train() { "$BIN" train "${COMMON[@]}" "$@"; }

# All final-named directories complete; `latest` names $2.
intact() {
  local s=$1 want=$2 why=$3 d
  for d in "$s"/step_*; do
    [ -e "$d" ] || continue
    "$BIN" inspect "$d" >/dev/null 2>"$D/ierr" || { bad "$why: $d incomplete: $(cat "$D/ierr")"; return 1; }
  done
  [ "$(cat "$s/latest" 2>/dev/null)" = "$want" ] || { bad "$why: latest is '$(cat "$s/latest" 2>/dev/null)', expected $want"; return 1; }
  return 0
}

# The reference: 6 steps, uninterrupted.
train --steps 6 --save-dir "$D/ref" >/dev/null 2>&1 || { echo "reference run failed"; exit 1; }
FINAL=step_00000006

# Bytes of one complete save (both tensor files, both indexes, trainer.json, the 14-byte
# `latest`, written in that order):
# budgets are placed relative to the end of the first save (step 2).
train --steps 2 --save-dir "$D/size" >/dev/null 2>&1
sz() { stat -c %s "$D/size/step_00000002/$1"; }
MODEL=$(sz model-00001-of-00001.safetensors); OPT=$(sz optimizer-00001-of-00001.safetensors); JSON=$(sz trainer.json)
IDX=$(($(sz model.safetensors.index.json) + $(sz optimizer.index.json)))
ONE=$((MODEL + OPT + IDX + JSON + 14))
echo "one checkpoint: model $MODEL + optimizer $OPT + indexes $IDX + trainer.json $JSON + latest 14 = $ONE bytes"

n=0
for where in "model header:0" "model header:100" "model payload:$((MODEL / 2))" "optimizer header:$((MODEL + 50))" \
             "optimizer payload:$((MODEL + OPT - 7))" "indexes:$((MODEL + OPT + 10))" \
             "trainer.json:$((MODEL + OPT + IDX + 10))" "latest pointer:$((MODEL + OPT + IDX + JSON + 5))"; do
  label=${where%%:*}; off=${where##*:}
  n=$((n+1)); S=$D/enospc_$n
  BG_ENOSPC_BUDGET=$((ONE + off)) LD_PRELOAD=$SHIM \
    "$BIN" train "${COMMON[@]}" --steps 6 --save-dir "$S" --save-every 2 >"$D/out" 2>"$D/err"
  rc=$?
  if [ $rc -eq 1 ] && [ "$(wc -l <"$D/err")" -eq 1 ] \
     && grep -q "^bagualu: checkpoint .*/step_00000004 not saved (.*latest is unchanged): .*No space left on device" "$D/err"; then ok
  else bad "ENOSPC in the $label: exit $rc:"; cat "$D/err"; fi
  intact "$S" step_00000002 "ENOSPC in the $label" && ok
  if ls -A "$S" | grep -q '^\.tmp-\|^latest\.tmp$'; then bad "ENOSPC in the $label: temporaries left: $(ls -A "$S")"; else ok; fi
  # The run can be continued once there is space again, to the uninterrupted result.
  train --steps 6 --save-dir "$S" --resume latest >/dev/null 2>"$D/err" || bad "ENOSPC in the $label: resume failed: $(cat "$D/err")"
  if cmp -s "$D/ref/$FINAL/model-00001-of-00001.safetensors" "$S/$FINAL/model-00001-of-00001.safetensors" \
     && cmp -s "$D/ref/$FINAL/optimizer-00001-of-00001.safetensors" "$S/$FINAL/optimizer-00001-of-00001.safetensors"; then ok
  else bad "ENOSPC in the $label: resumed run differs from the uninterrupted one"; fi
done
# The very first save failing: nothing under a final name, no `latest`.
BG_ENOSPC_BUDGET=1000 LD_PRELOAD=$SHIM "$BIN" train "${COMMON[@]}" --steps 6 --save-dir "$D/enospc_first" --save-every 2 >/dev/null 2>"$D/err"
rc=$?
if [ $rc -eq 1 ] && [ "$(wc -l <"$D/err")" -eq 1 ] && [ -z "$(ls -A "$D/enospc_first")" ]; then ok
else bad "ENOSPC in the first save: exit $rc, left $(ls -A "$D/enospc_first"):"; cat "$D/err"; fi

# Permissions do not stop root: as root, run as nobody (setpriv) so that a read-only
# directory is read-only.
AS=()
if [ "$(id -u)" -eq 0 ]; then
  if command -v setpriv >/dev/null; then AS=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  else echo "SKIP: root without setpriv: the read-only cases cannot run"; skipped=1; fi
fi
if [ "$(id -u)" -ne 0 ] || [ ${#AS[@]} -gt 0 ]; then
  # read-only from the start: bad input, before any training
  mkdir "$D/ro_start"; [ ${#AS[@]} -gt 0 ] && chown 65534:65534 "$D/ro_start"; chmod 555 "$D/ro_start"
  "${AS[@]}" "$BIN" train "${COMMON[@]}" --steps 6 --save-dir "$D/ro_start" >"$D/out" 2>"$D/err"
  rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$D/err")" -eq 1 ] && grep -q "ro_start: save directory is not writable" "$D/err" \
     && ! grep -q "^step " "$D/out"; then ok; else bad "read-only save directory at start: exit $rc:"; cat "$D/err"; fi
  # read-only during the run: stopped (SIGSTOP) at a random point, made read-only, continued
  S=$D/ro_run
  mkdir "$S"; [ ${#AS[@]} -gt 0 ] && chown 65534:65534 "$S"
  "${AS[@]}" "$BIN" train "${COMMON[@]}" --steps 100000 --save-dir "$S" --save-every 5 >"$D/out" 2>"$D/err" &
  pid=$!
  for _ in $(seq 1 2000); do [ -e "$S/latest" ] && break; sleep 0.01; done
  kill -STOP $pid; chmod 555 "$S"; kept=$(cat "$S/latest"); kill -CONT $pid
  wait $pid
  rc=$?
  chmod 755 "$S"
  if [ $rc -eq 1 ] && [ "$(wc -l <"$D/err")" -eq 1 ] && grep -q "not saved (.*latest is unchanged): .*Permission denied" "$D/err"; then ok
  else bad "save directory made read-only: exit $rc:"; cat "$D/err"; fi
  intact "$S" "$kept" "read-only during the run" && ok
fi

# vanished during the run: moved away while the process is stopped, right after a save
# completed (so, almost surely, between saves: the next save must notice, not recreate it)
S=$D/gone
"$BIN" train "${COMMON[@]}" --steps 100000 --save-dir "$S" --save-every 50 >"$D/out" 2>"$D/err" &
pid=$!
for _ in $(seq 1 2000); do [ -e "$S/latest" ] && break; sleep 0.01; done
kill -STOP $pid; mv "$S" "$D/moved"; kept=$(cat "$D/moved/latest"); kill -CONT $pid
wait $pid
rc=$?
if [ $rc -eq 1 ] && [ "$(wc -l <"$D/err")" -eq 1 ] && grep -q "gone.*not saved.*\(vanished\|No such file\)" "$D/err"; then ok
else bad "save directory vanished: exit $rc:"; cat "$D/err"; fi
[ ! -e "$S" ] && ok || bad "the vanished save directory was recreated: $(ls -A "$S")"
intact "$D/moved" "$kept" "vanished during the run (the moved directory)" && ok

# unusable from the start: bad input
: >"$D/a_file"
expect_start() {
  local name=$1 pattern=$2; shift 2
  train --steps 2 "$@" >"$D/out" 2>"$D/err"
  local rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$D/err")" -eq 1 ] && grep -q -- "$pattern" "$D/err"; then ok
  else bad "$name: exit $rc:"; cat "$D/err"; fi
}
expect_start save-dir-is-a-file "a_file: save directory is not a directory" --save-dir "$D/a_file"
expect_start save-dir-parent-missing "no/such/dir: cannot create save directory (No such file or directory)" --save-dir "$D/no/such/dir"

echo "checkpoint_disk: $pass passed, $fail failed"
[ $fail -eq 0 ] || exit 1
[ -z "${skipped:-}" ] || exit 77  # the read-only cases did not run: skipped, not passed
