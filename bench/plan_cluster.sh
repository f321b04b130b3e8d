#!/usr/bin/env bash
# Predicted (bagualu plan) vs measured (bagualu train) on the emulated cluster
# (scripts/cluster.sh): step time and the all-to-all's time per step for flat,
# hierarchical and 2d exchanges at 2 and 4 nodes. Each node count and ranks per node
# gets its own calibration: the compute rates of one thread (`--threads 1`, the node's share of this
# machine's cores where nodes outnumber them) and the inter-node link probed through
# the cluster (`--inter-launcher`). Measured: the median over the steps after 2 warm-up
# steps of rank 0's step_s and a2a_s; runs of the three exchanges alternated ROUNDS
# times, the median of the rounds. Beside them the all-reduces: train's allreduce_s (the
# gradient reduction and the step's small all-reduces) and the predicted grad_s +
# collectives_s ("ar").
# Usage: bench/plan_cluster.sh [build-dir] [steps]
# Each row prints the run-to-run spread (±%: half the range over the ROUNDS rounds).
#   env: NODES="2 4" RPN="1 2" RATE=1gbit CONFIG=tiny_moe SEQ=64 BATCH=4 ROUNDS=1 A2AS="flat hierarchical 2d"
#        CALS=DIR (keep each calibration as DIR/cNxR.json)
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
STEPS=${2:-6}
BIN=$BUILD/bagualu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLUSTER=$ROOT/scripts/cluster.sh
NODES=${NODES:-2 4}; RPN=${RPN:-1 2}; RATE=${RATE:-1gbit}; CONFIG=${CONFIG:-tiny_moe}
SEQ=${SEQ:-64}; BATCH=${BATCH:-4}; ROUNDS=${ROUNDS:-1}; A2AS=${A2AS:-flat hierarchical 2d}
NAME=p$(( $$ % 10000000 ))
D=$(mktemp -d)
trap '"$CLUSTER" down --name $NAME >/dev/null 2>&1 || true; rm -rf "$D"' EXIT
trap 'exit 130' INT TERM  # a signal would skip the EXIT trap: the cluster would be left
cfg=$ROOT/configs/$CONFIG.json
vocab=$(grep -o '"vocab_size": *[0-9]*' "$cfg" | grep -o '[0-9]*$')
"$BIN" synth --vocab "$vocab" --tokens 400000 --out "$D/data.bin" >/dev/null
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; commit $(git -C "$ROOT" rev-parse --short HEAD); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "config $CONFIG, batch $BATCH x $SEQ per rank, link $RATE (tbf, no added latency), 1 thread per rank"
median() { sort -g | awk '{a[NR]=$1} END {if (NR) print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
field() { grep -o "\"$2\":[0-9.e+-]*" "$1" | cut -d: -f2 | tail -n +3 | median; }
# The median over the rounds of column C of the runs of ($n, $r, $a).
meas_col() { awk -v n="$n" -v r="$r" -v a="$a" -v c="$1" '$1==n && $2==r && $3==a {print $c}' "$D/meas" | median; }
# Half the range over the rounds of column C, in % of its median: the run-to-run spread.
spread_col() { awk -v n="$n" -v r="$r" -v a="$a" -v c="$1" -v m="$2" '$1==n && $2==r && $3==a {
  v=$c+0; if (!k++ || v<lo) lo=v; if (k==1 || v>hi) hi=v } END {printf "%.1f", (k && m>0) ? 50*(hi-lo)/m : 0}' "$D/meas"; }
: >"$D/rows"
base=(--config "$cfg" --batch-size "$BATCH" --seq-len "$SEQ")
for n in $NODES; do
  "$CLUSTER" up "$n" --link-rate "$RATE" --name "$NAME" >/dev/null
  for r in $RPN; do
    # The probe at the ranks per node of the runs: the phase wait (sync) of ranks that
    # share cores is measured at the oversubscription it prices.
    "$BIN" plan --calibrate --threads 1 --config "$cfg" --batch-size "$BATCH" --seq-len "$SEQ" \
      --inter-launcher "$CLUSTER run --name $NAME $r --" --nodes "$n" --out "$D/c$n.json" 2>"$D/cal.err" ||
      { cat "$D/cal.err"; exit 1; }
    echo "$n nodes x $r: $(tail -1 "$D/cal.err" | sed 's/^plan: wrote [^ ]* //')"
    if [ -n "${CALS:-}" ]; then cp "$D/c$n.json" "$CALS/c${n}x$r.json"; fi
    P=$((n * r))
    for round in $(seq "$ROUNDS"); do
      for a in $A2AS; do
        rm -f "$D/log.jsonl"
        OMP_NUM_THREADS=1 "$CLUSTER" run --name "$NAME" "$r" -- "$BIN" train "${base[@]}" --a2a "$a" --data "$D/data.bin" \
          --steps "$STEPS" --log "$D/log.jsonl" >"$D/train.out" 2>&1 || { echo "train failed: $n x $r $a"; tail -3 "$D/train.out"; continue; }
        echo "$n $r $a $round $(field "$D/log.jsonl" step_s) $(field "$D/log.jsonl" a2a_s) $(field "$D/log.jsonl" allreduce_s)" >>"$D/meas"
      done
    done
    for a in $A2AS; do
      m=$(meas_col 5) x=$(meas_col 6) y=$(meas_col 7)  # step_s, a2a_s, allreduce_s
      [ -n "$m" ] || continue
      sm=$(spread_col 5 "$m") sx=$(spread_col 6 "$x")
      pred=$("$BIN" plan "${base[@]}" --a2a "$a" --cluster "$D/c$n.json" --ranks "$P" --ranks-per-node "$r" --json)
      echo "$n $r $a $m $x $y $sm $sx $pred" >>"$D/rows"
    done
  done
  "$CLUSTER" down --name "$NAME" >/dev/null
done
python3 - "$D/rows" <<'PY'
import json, sys
rows = [l.split(" ", 8) for l in open(sys.argv[1])]
print(f"{'nodes':>5s} {'rpn':>3s} {'a2a':12s} {'pred s':>8s} {'meas s':>8s} {'±%':>5s} {'err %':>7s} {'pred a2a':>9s} {'meas a2a':>9s} {'±%':>5s} {'err %':>7s} {'pred ar':>8s} {'meas ar':>8s}")
et, ea, inside = [], [], 0
for n, r, a, m, x, y, sm, sx, p in rows:
    p = json.loads(p); m = float(m); x = float(x); y = float(y)
    ar = p["time"]["grad_s"] + p["time"].get("collectives_s", 0)
    e1 = 100 * (p["step_s"] - m) / m
    pa = p["time"]["a2a_s"]
    e2 = 100 * (pa - x) / x if x > 0 else float("nan")
    et.append(abs(e1)); ea.append(abs(e2))
    inside += abs(e1) <= max(10.0, float(sm))
    print(f"{n:>5s} {r:>3s} {a:12s} {p['step_s']:8.3f} {m:8.3f} {float(sm):5.1f} {e1:+7.1f} {pa:9.4f} {x:9.4f} {float(sx):5.1f} {e2:+7.1f} {ar:8.4f} {y:8.4f}")
if et: print(f"step time |error|: mean {sum(et)/len(et):.1f}%, max {max(et):.1f}%; all-to-all |error|: mean {sum(ea)/len(ea):.1f}%, max {max(ea):.1f}% over {len(et)} rows")
if et: print(f"±%: half the range of the rounds' measurements over their median; step within ±10% or within that spread: {inside} of {len(et)} rows")
PY
