#!/usr/bin/env bash
# Overlap in both directions and the exchange's algorithms, end to end under mpirun
# (P=4 on two emulated nodes of 2, 3 chunks): --a2a-overlap 1 and 0 give the same bits
# (the same chunks through the same GEMMs), and so do flat, hierarchical and 2d
# (exchanges only move bytes); the metrics log reports the exposed exchange time
# beside the whole, and --a2a-skew-probe its barrier time apart; --a2a auto runs and says what it chose; and the watchdog: a rank
# stopped mid-run is named by its peer, which exits within the timeout.
. "$(dirname "$0")/dist_launch.sh"
dist_have_mpi || exit 77
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok   $*"; }
bad() { fail=$((fail+1)); echo "FAIL $*"; }
CFG=$(cd "$(dirname "$0")/../../configs" && pwd)/tiny_moe.json
"$BIN" synth --vocab 64 --tokens 30000 --out "$D/t.bin" >/dev/null
args=(train --config "$CFG" --data "$D/t.bin" --threads 1 --steps 4 --seq-len 32 --batch-size 2
      --expert-parallel 4 --ranks-per-node 2 --a2a-chunks 3 --warmup 2 --lr 3e-3)
mpi() { timeout 120 "${DIST_MPIRUN[@]}" -np 4 "$BIN" "${args[@]}" "$@"; }
bits() { grep -o '"\(loss\|grad_norm\)":[0-9.e+-]*' "$1" | tr '\n' ' '; }

for a2a in flat hierarchical 2d; do
  for ov in 1 0; do
    mpi --a2a $a2a --a2a-overlap $ov --log "$D/$a2a-$ov.jsonl" >"$D/out" 2>&1 ||
      { bad "$a2a overlap $ov: exit $?"; tail -3 "$D/out"; }
  done
  [ -n "$(bits "$D/$a2a-1.jsonl")" ] && [ "$(bits "$D/$a2a-1.jsonl")" = "$(bits "$D/$a2a-0.jsonl")" ] &&
    ok "$a2a: overlap on and off bitwise equal" || bad "$a2a: overlap changes bits"
done
[ "$(bits "$D/2d-1.jsonl")" = "$(bits "$D/flat-1.jsonl")" ] && [ "$(bits "$D/hierarchical-1.jsonl")" = "$(bits "$D/flat-1.jsonl")" ] &&
  ok "flat, hierarchical and 2d bitwise equal" || bad "algorithms differ"
# exposed <= whole, both present; the old derived compute_s is gone
if awk 'match($0, /"a2a_s":[0-9.]*/) { s = substr($0, RSTART + 8, RLENGTH - 8) }
        match($0, /"a2a_exposed_s":[0-9.]*/) { e = substr($0, RSTART + 16, RLENGTH - 16); n++
          if (e > s + 1e-3 || e < 0) bad = 1 } END { exit bad || n != 4 }' "$D/flat-1.jsonl" &&
   ! grep -q compute_s "$D/flat-1.jsonl"; then ok "a2a_exposed_s beside a2a_s in every step"
else bad "exposed time fields: $(tail -1 "$D/flat-1.jsonl" | grep -o '"a2a_s.*')"; fi

# The skew probe (a timed barrier before each exchange) changes no bits and logs its time.
mpi --a2a flat --a2a-overlap 0 --a2a-skew-probe --log "$D/probe.jsonl" >"$D/out" 2>&1 &&
  [ "$(bits "$D/probe.jsonl")" = "$(bits "$D/flat-0.jsonl")" ] &&
  [ "$(grep -c '"a2a_skew_s":[0-9.]*[1-9]' "$D/probe.jsonl")" = 4 ] && ! grep -q a2a_skew_s "$D/flat-0.jsonl" &&
  ok "--a2a-skew-probe: same bits, a2a_skew_s in every step" ||
  { bad "--a2a-skew-probe: $(tail -1 "$D/probe.jsonl" | grep -o '"a2a_s.*')"; tail -3 "$D/out"; }

mpi --a2a auto --link-gbit 1 --log "$D/auto.jsonl" >"$D/out" 2>&1 && grep -q "^a2a auto: " "$D/out" &&
  [ "$(bits "$D/auto.jsonl")" = "$(bits "$D/flat-1.jsonl")" ] &&
  ok "--a2a auto: $(grep -o '^a2a auto: [a-z0-9]*' "$D/out")" || { bad "--a2a auto"; tail -3 "$D/out"; }

# Watchdog: stop one of two ranks once training runs (the first step logged: before the
# timeout is set, in MPI_Init, nothing watches, and a slow start under ASan is still
# there a second after launch); the other must name it and exit within the timeout.
timeout 120 "${DIST_MPIRUN[@]}" -np 2 "$BIN" train --config "$CFG" --data "$D/t.bin" --threads 1 \
  --steps 100000 --seq-len 32 --batch-size 2 --expert-parallel 2 --comm-timeout 2 \
  --save-dir "$D/wd" --log "$D/wd.jsonl" >/dev/null 2>"$D/err" &
launcher=$!
victim=""
for _ in $(seq 100); do
  for p in $(pgrep -f "save-dir $D/wd"); do
    [ "$(ps -o comm= -p "$p")" = bagualu ] && tr '\0' '\n' <"/proc/$p/environ" | grep -q '^OMPI_COMM_WORLD_RANK=1$' && victim=$p
  done
  [ -n "$victim" ] && break
  sleep 0.2
done
for _ in $(seq 600); do grep -q '"step"' "$D/wd.jsonl" 2>/dev/null && break; sleep 0.2; done
start=$(date +%s)
kill -STOP "$victim" 2>/dev/null
wait $launcher
rc=$?
took=$(( $(date +%s) - start ))
kill -9 "$victim" 2>/dev/null
if [ -n "$victim" ] && [ $rc -ne 0 ] && [ $took -le 30 ] &&
   grep -q "rank 0 .*: no progress in .* for 2 s, waiting for rank 1" "$D/err"; then
  ok "watchdog: $(grep -m1 'no progress' "$D/err" | cut -c1-120) (exit $rc after ${took}s)"
else bad "watchdog: victim '$victim', exit $rc, ${took}s: $(head -3 "$D/err")"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
