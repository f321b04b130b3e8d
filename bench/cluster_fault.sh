#!/usr/bin/env bash
# A node cut off mid-run, on the emulated cluster (scripts/cluster.sh); not a CTest.
# P = 4 (2 nodes x 2 ranks) trains with checkpoints every few steps and the watchdog on
# (--comm-timeout T); once a checkpoint exists, node 1's link is set down (ip link set
# <veth> down on the bridge side). TCP would retry for minutes and MPI_Abort cannot
# cross the cut, so every rank must leave on its own watchdog. Checks: every rank gone
# within 60 s + T; what is left (launcher daemons, mpirun) is ended by the script and
# `cluster.sh down`; the last checkpoint verifies (bagualu inspect); training resumes
# from it on one node with fewer ranks (P = 2 under plain mpirun).
# Usage: bench/cluster_fault.sh [build-dir]   env: TIMEOUT=10 CONFIG=configs/tiny_moe.json
set -uo pipefail
BUILD=${1:-build}
BIN=$(cd "$BUILD" && pwd)/bagualu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLUSTER=$ROOT/scripts/cluster.sh
TIMEOUT=${TIMEOUT:-10}
CONFIG=${CONFIG:-$ROOT/configs/tiny_moe.json}
D=$(mktemp -d)
NAME=f$(( $$ % 10000000 ))
launcher=""
cleanup() {
  if [ -n "$launcher" ]; then
    for p in $(pgrep -P "$launcher"); do kill -9 "$p" 2>/dev/null; done
    kill -9 "$launcher" 2>/dev/null
  fi
  "$CLUSTER" down --name "$NAME" >/dev/null 2>&1
  rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 130' INT TERM  # a signal would skip the EXIT trap: the cluster would be left
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok   $*"; }
bad() { fail=$((fail+1)); echo "FAIL $*"; }
ranks_left() {  # bagualu processes still in the cluster's namespaces
  local n=0 ns p
  for ns in "$NAME-n0" "$NAME-n1"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do
      [ "$(ps -o comm= -p "$p" 2>/dev/null)" = bagualu ] && n=$((n + 1))
    done
  done
  echo $n
}

"$CLUSTER" up 2 --link-rate 1gbit --name "$NAME" || exit 1
"$BIN" synth --vocab 64 --tokens 200000 --out "$D/t.bin" >/dev/null
common=(--config "$CONFIG" --data "$D/t.bin" --threads 1 --seq-len 64 --warmup 2 --lr 3e-3)
OMP_NUM_THREADS=1 "$CLUSTER" run --name "$NAME" 2 -- "$BIN" train "${common[@]}" --batch-size 2 \
  --expert-parallel 4 --steps 100000 --save-dir "$D/ck" --save-every 10 \
  --comm-timeout "$TIMEOUT" --log "$D/run.jsonl" >"$D/out" 2>"$D/err" &
launcher=$!
for _ in $(seq 300); do  # two checkpoints, so one is certainly complete
  [ "$(ls -d "$D"/ck/step_* 2>/dev/null | wc -l)" -ge 2 ] && break
  sleep 0.2
done
echo "ranks running: $(ranks_left); checkpoints: $(ls "$D/ck" | tr '\n' ' ')"
cut=$(date +%s.%N)
ip link set "$NAME-v1" down
echo "cut node 1's link at step $(grep -c '"step"' "$D/run.jsonl")"
limit=$(awk -v t="$TIMEOUT" 'BEGIN{print 60 + t}')
gone=""
while :; do
  now=$(date +%s.%N)
  el=$(awk -v a="$now" -v b="$cut" 'BEGIN{printf "%.1f", a - b}')
  [ "$(ranks_left)" -eq 0 ] && { gone=$el; break; }
  awk -v e="$el" -v l="$limit" 'BEGIN{exit !(e > l)}' && break
  sleep 0.5
done
if [ -n "$gone" ]; then ok "every rank gone ${gone} s after the cut (limit 60 + $TIMEOUT s)"
else bad "ranks still running $limit s after the cut: $(ranks_left)"; fi
grep 'no progress' "$D/err" | sed 's/^/  /'
if kill -0 "$launcher" 2>/dev/null; then
  echo "  mpirun still waiting (its daemon on the cut node is unreachable): ended by the script"
  for p in $(pgrep -P "$launcher"); do kill -9 "$p" 2>/dev/null; done  # mpirun itself
  kill -9 "$launcher" 2>/dev/null
fi
wait "$launcher" 2>/dev/null
echo "  mpirun exit status: $?"
launcher=""
"$CLUSTER" down --name "$NAME" >/dev/null 2>&1
sleep 1
left=$(pgrep -f "$D/ck" | wc -l)
[ "$left" -eq 0 ] && ok "nothing left running" || { bad "$left processes left:"; pgrep -af "$D/ck" | cut -c1-150; }

last=$(readlink "$D/ck/latest" 2>/dev/null || cat "$D/ck/latest" 2>/dev/null)
if "$BIN" inspect "$D/ck" >"$D/inspect" 2>&1; then ok "last checkpoint intact: $last ($(grep -m1 -i 'step' "$D/inspect"))"
else bad "last checkpoint does not verify: $(tail -2 "$D/inspect")"; fi

step=$(grep -o '"step":[0-9]*' "$D/run.jsonl" | tail -1 | cut -d: -f2)
if timeout 300 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
    mpirun --oversubscribe -np 2 "$BIN" train "${common[@]}" --batch-size 4 --expert-parallel 2 \
    --steps $((step + 10)) --save-dir "$D/ck" --resume latest --log "$D/resume.jsonl" >"$D/rout" 2>&1; then
  first=$(grep -o '"step":[0-9]*' "$D/resume.jsonl" | head -1 | cut -d: -f2)
  ok "resumed on one node with 2 ranks from step $((first - 1)), ran to $(grep -o '"step":[0-9]*' "$D/resume.jsonl" | tail -1 | cut -d: -f2)"
else bad "resume at P=2: $(tail -3 "$D/rout")"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
