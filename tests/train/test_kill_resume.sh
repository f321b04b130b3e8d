#!/usr/bin/env bash
# Kill and resume: one command line (`--resume latest`, as a cluster scheduler requeues
# a job) is launched, killed with SIGKILL after a random delay, and relaunched until it
# finishes. Checked after every kill and at the end:
#   - every final-named step directory is complete (`bagualu inspect` exit 0: trainer.json
#     readable, both checksums match, every tensor present with its shape) and `latest`
#     names one of them;
#   - every relaunch resumes from the checkpoint `latest` names (the commit record: a
#     newer step directory whose pointer update a kill cut off is complete but not yet
#     committed), or, with no `latest`, from the newest step directory, or starts from
#     scratch when there is none; it never reports an error (exit 0 or killed);
#   - the final model-00001-of-00001.safetensors and optimizer-00001-of-00001.safetensors are byte-identical (cmp) to
#     those of an uninterrupted run of the same command line.
# Why it can fail: a checkpoint renamed into place before its files are complete, a
# `latest` written before its directory, a prune or replacement that leaves a partial
# directory under a final name, a resume that loses state (then the bytes differ).
# The delays are drawn from a seeded generator (BG_KILL_SEED; reproducible schedule,
# though where each kill lands also depends on machine load); most land inside saves,
# which take most of the time with --save-every 1 or 2 (the test reports how many).
BIN=$1
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CFG=$SRC/configs/tiny_moe.json
source "$(dirname "$0")/../shell_checks.sh"

SEED=${BG_KILL_SEED:-20240520}
RANDOM=$SEED
STEPS=40
"$BIN" synth --vocab 64 --tokens 20000 --out "$D/data.bin" >/dev/null || { echo "synth failed"; exit 1; }
ARGS=(train --config "$CFG" --data "$D/data.bin" --steps $STEPS --batch-size 2 --seq-len 16
      --threads 1 --lr 1e-3 --warmup 10 --keep-last 3 --resume latest)

now_us() { local t=${EPOCHREALTIME/./}; echo $((10#$t)); }

# The uninterrupted reference, and a one-step run that times start-up and one save.
t0=$(now_us)
"$BIN" "${ARGS[@]}" --save-dir "$D/ref" --save-every 1 >"$D/ref.out" 2>"$D/ref.err" \
  || { echo "reference run failed:"; cat "$D/ref.err"; exit 1; }
t_ref=$(( $(now_us) - t0 ))
t0=$(now_us)
"$BIN" "${ARGS[@]}" --save-dir "$D/nosave" >/dev/null 2>&1
t_nosave=$(( $(now_us) - t0 ))
t0=$(now_us)
"$BIN" "${ARGS[@]}" --steps 1 --save-dir "$D/one" --save-every 1 >/dev/null 2>&1
t_one=$(( $(now_us) - t0 ))
per_save=$(( (t_ref - t_nosave) / (STEPS - 1) ))
[ $per_save -gt 1000 ] || per_save=1000
# Two kinds of launches, drawn at random:
#  - timed (1 in 3): killed after a delay uniform in [0, start-up + 1 step + 3 saves]:
#    during start-up, loading the checkpoint, or the first steps;
#  - in a save (2 in 3): a target step 1-2 saves ahead is drawn; when its temporary
#    directory appears, the process is killed after a further delay uniform in
#    [0, 1.2 x save time]: while a file is written or fsynced, at the renames, at the
#    `latest` update, or in the prune that follows. (The window doubles for each launch
#    in a row that did not get past its checkpoint, so that the job still finishes when
#    the machine is slower than measured.)
# Where each kill lands depends on the machine's timing; the schedule of choices is
# seeded (BG_KILL_SEED).
exec {NAP_FD}<> <(:)
nap_us() { local t; printf -v t '%d.%06d' $(($1 / 1000000)) $(($1 % 1000000)); read -t "$t" -u $NAP_FD; }  # no fork
echo "seed $SEED; reference run $((t_ref / 1000)) ms ($((t_nosave / 1000)) ms saving only at the end): ~$((per_save / 1000)) ms per save; start-up + 1 step + 1 save $((t_one / 1000)) ms"

# Every final-named step directory complete, `latest` naming one of them. A directory
# seen before under the same inode is not inspected again (a replaced one has another).
declare -A inspected
check_dir() {
  local d=$1 why=$2 s key
  for s in "$d"/step_*; do
    [ -e "$s" ] || continue
    key="$s:$(stat -c %i "$s")"
    [ -n "${inspected[$key]}" ] && continue
    if ! "$BIN" inspect "$s" >/dev/null 2>"$D/inspect.err"; then
      bad "$why: $s is incomplete or corrupt: $(cat "$D/inspect.err")"
      return 1
    fi
    inspected[$key]=1
  done
  if [ -e "$d/latest" ] && [ ! -d "$d/$(head -n1 "$d/latest")" ]; then
    bad "$why: latest names $(cat "$d/latest"), which does not exist"
    return 1
  fi
  return 0
}

# What a relaunch must resume from: `latest`, else the newest step directory, else nothing.
expected_resume() {
  local d=$1
  if [ -e "$d/latest" ]; then echo "$d/$(head -n1 "$d/latest")"; return; fi
  local newest
  newest=$(ls -d "$d"/step_* 2>/dev/null | sort | tail -n1)
  echo "${newest:-scratch}"
}

R=$D/run
launches=0; kills=0; in_save=0; resumes=0; broken=0; rc=1; stuck=0
# A safety net against a run that never finishes, scaled for slow (sanitizer) builds.
limit_us=$(( 120000000 + 30 * t_one ))
deadline=$(( $(now_us) + limit_us ))
while [ $launches -lt 400 ] && [ "$(now_us)" -lt $deadline ]; do
  launches=$((launches+1))
  want=$(expected_resume "$R")
  # in-a-save launches in a row that did not get past their checkpoint: widens their
  # kill window (x2 each) so that a slow machine still finishes
  if [ "$want" != "${last_want:-}" ]; then stuck=0
  elif [ "${mode:-0}" -ne 0 ]; then stuck=$((stuck < 6 ? stuck + 1 : 6)); fi
  last_want=$want
  before=0; [ "$want" = scratch ] || before=$((10#${want##*/step_}))
  every=$((1 + RANDOM % 2))
  mode=$((RANDOM % 3))
  # Emptied here, not by the launch's redirection: a kill that lands between fork and
  # exec would leave the previous launch's words in them, read as this one's.
  : >"$D/out"; : >"$D/err"
  "$BIN" "${ARGS[@]}" --save-dir "$R" --save-every $every >"$D/out" 2>"$D/err" &
  pid=$!
  if [ $before -ge $STEPS ]; then
    wait_for_exit=1  # the job is done: this launch must exit 0 at once, never be killed
  elif [ $mode -eq 0 ]; then
    nap_us $(( (RANDOM * 32768 + RANDOM) % (t_one + 2 * per_save) ))
  else
    target=$(( (before / every + 1 + RANDOM % 2) * every ))
    [ $target -le $STEPS ] || target=$STEPS
    printf -v tmp '%s/.tmp-step_%08d' "$R" $target
    # (or, if the poll missed that save under load, as soon as `latest` shows it passed)
    while kill -0 $pid 2>/dev/null && [ ! -d "$tmp" ]; do
      l=; read -r l 2>/dev/null <"$R/latest"; l=${l#step_}
      [ -n "$l" ] && [ $((10#$l)) -ge $target ] && break
      nap_us 500
    done
    nap_us $(( (RANDOM * 32768 + RANDOM) % ((per_save * 6 / 5) << stuck) + 1 ))
  fi
  [ -n "$BG_KILL_DEBUG" ] && echo "launch $launches: from $want, every $every, mode $mode, target ${target:-}, $(ls -A "$R" 2>/dev/null | tr '\n' ' ')"
  [ -n "${wait_for_exit:-}" ] || kill -9 $pid 2>/dev/null
  wait_for_exit=
  { wait $pid; } 2>/dev/null  # (no "Killed" notice from the shell)
  rc=$?
  # What the relaunch said about where it started (when it lived long enough to say it).
  got=$(sed -n 's/^resumed from \(.*\) at step [0-9]*$/\1/p' "$D/err" | head -n1)
  if [ -z "$got" ] && grep -q "starting from scratch" "$D/err"; then got=scratch; fi
  if [ -n "$got" ]; then
    resumes=$((resumes+1))
    if [ "$got" != "$want" ]; then bad "launch $launches resumed from $got, expected $want"; broken=1; fi
  fi
  if grep -v -e '^resumed from ' -e 'starting from scratch' -e '^no "latest" in ' "$D/err" | grep -q .; then
    bad "launch $launches wrote to stderr: $(cat "$D/err")"; broken=1
  fi
  if [ $rc -eq 0 ]; then break; fi
  if [ $rc -ne 137 ]; then bad "launch $launches exited with $rc: $(cat "$D/err")"; broken=1; break; fi
  kills=$((kills+1))
  if ls -A "$R" 2>/dev/null | grep -q '^\.tmp-\|^latest\.tmp$'; then in_save=$((in_save+1)); fi
  check_dir "$R" "after kill $kills" || broken=1
  [ $broken -eq 0 ] || break
done
[ $broken -eq 0 ] && ok
echo "$launches launches, $kills killed by SIGKILL ($in_save inside a save: a temporary left behind), $resumes reported where they resumed"

if [ $rc -eq 0 ]; then ok; else bad "the run did not finish within 400 launches / $((limit_us / 1000000)) s"; fi
[ $kills -ge 8 ] && ok || bad "only $kills kills"
[ $in_save -ge 5 ] && ok || bad "only $in_save kills left a save's temporary behind"
final=$(printf 'step_%08d' $STEPS)
for f in model-00001-of-00001.safetensors optimizer-00001-of-00001.safetensors; do
  if cmp -s "$D/ref/$final/$f" "$R/$final/$f"; then ok; else bad "$f differs from the uninterrupted run's"; fi
done
[ "$(cat "$R/latest" 2>/dev/null)" = "$final" ] && ok || bad "latest is $(cat "$R/latest" 2>/dev/null), expected $final"
check_dir "$R" "at the end" && ok
if ls -A "$R" | grep -q '^\.tmp-\|^latest\.tmp$'; then bad "temporaries left after a finished run: $(ls -A "$R")"; else ok; fi
# keep-last 3 holds across kills (the one `latest` names plus at most 2 older ones).
n=$(ls -d "$R"/step_* | wc -l)
[ "$n" -le 3 ] && ok || bad "$n step directories kept with --keep-last 3: $(ls -A "$R" | tr "\n" " ")"
# Relaunching a finished job exits 0 at once.
"$BIN" "${ARGS[@]}" --save-dir "$R" >"$D/out" 2>"$D/err"
rc=$?
if [ $rc -eq 0 ] && grep -q "nothing to do" "$D/out"; then ok; else bad "relaunch after the end: exit $rc: $(cat "$D/out" "$D/err")"; fi

echo "kill_resume: $pass passed, $fail failed"
[ $fail -eq 0 ]
