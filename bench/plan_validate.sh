#!/usr/bin/env bash
# Predicted (bagualu plan) vs measured (bagualu train) step time and peak resident
# memory on this machine, after one calibration (bagualu plan --calibrate at M1's
# shapes, one thread: the rate of one rank under mpirun; P = 1 runs all cores and the
# planner scales the rates by the cores). Configurations: M1, M2, tiny_moe, and M2 variants (dense, fine-grained 64
# experts of width 128 top-4, switch gate top-1, SWIPE, capacity 1.0, bf16) at P = 1,
# 2, 4 ranks on one box (P > 1: 1 thread per rank under mpirun, oversubscribed beyond
# the cores; the planner gives each rank its share of the node).
# Measured step: the median over REPS runs (default 3), alternated (±%: half their
# range over the median, the run-to-run spread, beside which a row's error is read):
# every row and rank count once, then again, so a drift of the shared machine spreads
# over all rows; a run's step is the median of its steps after WARMUP warm-up steps
# (default 6: the planner predicts a run's steady step, and the first steps are not one: they touch
# fresh memory, 11 us a 4 KiB page on the Zen 5 VM, as the bf16 operand buffers and
# dropless EP's heap grow to the rows the gate sends (M2 bf16, one rank: 49.7k page
# faults in step 1, 7.1k in step 2, 2.9k in 3, 0.7k in 4, then ~6 a step; its steps
# 0.80, 0.27, 0.21, 0.17, then 0.16 s), and the gate's skew moves (M2 at P = 2: steps
# 3-6 took 0.46 s, 7-12 0.41, 13-24 0.38, fp32; bf16 0.34, 0.27, 0.27; steps 3-6 against
# 7-14: M1 P = 2 0.264 and 0.219 s, M2 switch P = 2 0.354 and 0.302, M2 fine P = 4 0.690
# and 0.639, M2 cf 1 P = 2 0.263 and 0.270). Each round of runs is
# predicted from a calibration made just before it (the calibrated fp32 peak of one
# machine moved 177 -> 239 GFLOP/s between runs of this script an hour apart): the
# predicted step is the median of the rounds' predictions. Peak RSS: rank 0's
# peak_rss_mib, the median over the runs. Predicted RSS = the plan's expected_total (the
# memory report's total with dropless EP's grown heap at the most skewed loads the
# routing groups allow, or at the runs' load_cv in the err|cv column, not at its 8x
# limit, which a run reaches only under a collapsed gate) + the process's
# base (libraries, MPI, thread stacks), taken from tiny_moe at each P (one process at
# P = 1; under MPI a rank's shared-memory segments grow with the ranks on the node:
# 23.5 MiB at P = 2, 25.4 at P = 4 on Intel 6/167) — those rows are marked "base" and
# carry no memory error.
# Usage: bench/plan_validate.sh [build-dir] [steps]   env: RANKS="1 2 4" REPS=3 WARMUP=6 ROWS="..."
set -euo pipefail
BUILD=${1:-build}
STEPS=${2:-12}
WARMUP=${WARMUP:-6}
BIN=$(cd "$BUILD" && pwd)/bagualu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RANKS=${RANKS:-1 2 4}
REPS=${REPS:-3}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
MPIRUN=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 mpirun --oversubscribe)
python3 - "$ROOT/configs" "$D" <<'PY'
import json, sys
src, d = sys.argv[1], sys.argv[2]
m2 = json.load(open(f"{src}/m2.json"))
variants = {
    "m2_dense": dict(m2, num_local_experts=0),
    "m2_fine": dict(m2, num_local_experts=64, moe_intermediate_size=128, num_experts_per_tok=4),
    "m2_switch": dict(m2, router_type="switch", num_experts_per_tok=1, norm_topk_prob=False),
    "m2_swipe": dict(m2, router_type="swipe"),
    "m2_cap1": dict(m2, capacity_factor=1.0),
}
for k, v in variants.items(): json.dump(v, open(f"{d}/{k}.json", "w"))
for k in ["m1", "m2", "tiny_moe"]:
    json.dump(json.load(open(f"{src}/{k}.json")), open(f"{d}/{k}.json", "w"))
PY
# name config seq per-rank-batch extra-flags
ROWS=${ROWS:-"tiny_moe:32:4: m1:128:2: m2:128:2: m2_bf16:128:2:--dtype_bf16 m2_dense:128:2: m2_fine:128:2: m2_switch:128:2: m2_swipe:128:2: m2_cap1:128:2:"}
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; commit $(git -C "$ROOT" rev-parse --short HEAD); load $(cut -d' ' -f1-3 /proc/loadavg)"
calibrate() {
  local t0; t0=$(date +%s)
  "$BIN" plan --calibrate --threads 1 --config "$D/m1.json" --batch-size 2 --seq-len 128 --out "$1" 2>"$D/cal.err" || { cat "$D/cal.err"; exit 1; }
  echo "calibration $2: $(tail -1 "$D/cal.err" | sed 's/^plan: //') in $(( $(date +%s) - t0 )) s"
}
median() { grep -o "\"${2:-step_s}\":[0-9.e+-]*" "$1" | cut -d: -f2 | tail -n +$((WARMUP + 1)) | sort -g |
           awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
# The experts' load variation the run had: the mean over layers of load_cv, the median
# over the steps after the warm-up steps (0 for a dense model).
load_cv() { { grep -o '"load_cv":\[[0-9.,]*\]' "$1" || true; } | tail -n +$((WARMUP + 1)) | sed 's/.*\[//; s/\]//' |
            awk -F, '{s = 0; for (i = 1; i <= NF; i++) s += $i; print s / NF}' | sort -g |
            awk '{a[NR]=$1} END {print NR ? ((NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2) : 0}'; }
: >"$D/rows"
for rep in $(seq 1 "$REPS"); do
calibrate "$D/this-$rep.json" "$rep"
for row in $ROWS; do
  IFS=: read -r name seq B extra <<<"$row"
  cfg=${name%_bf16}
  extra=${extra//_/ }
  vocab=$(grep -o '"vocab_size": *[0-9]*' "$D/$cfg.json" | grep -o '[0-9]*$')
  [ -f "$D/$cfg.bin" ] || "$BIN" synth --vocab "$vocab" --tokens 400000 --out "$D/$cfg.bin" >/dev/null
  for P in $RANKS; do
    args=(--config "$D/$cfg.json" --batch-size "$B" --seq-len "$seq" $extra)
    rm -f "$D/log.jsonl"
    if [ "$P" = 1 ]; then "$BIN" train "${args[@]}" --data "$D/$cfg.bin" --steps "$STEPS" --log "$D/log.jsonl" >/dev/null 2>&1 || true
    else "${MPIRUN[@]}" -np "$P" "$BIN" train "${args[@]}" --data "$D/$cfg.bin" --steps "$STEPS" --log "$D/log.jsonl" >/dev/null 2>&1 || true; fi
    [ -s "$D/log.jsonl" ] || { echo "$name P=$P: train failed"; continue; }
    meas=$(median "$D/log.jsonl")
    rss=$(tail -1 "$D/log.jsonl" | grep -o '"peak_rss_mib":[0-9.]*' | cut -d: -f2)
    cv=$(load_cv "$D/log.jsonl")
    ar=$(median "$D/log.jsonl" allreduce_s || true); ar=${ar:-0}
    "$BIN" plan "${args[@]}" --cluster "$D/this-$rep.json" --ranks "$P" --json >"$D/pred-$name-$P-$rep.json"
    echo "$name $P $meas $rss $D/pred-$name-$P-$rep.json $D/this-$rep.json $cv $ar ${args[*]}" >>"$D/rows"
  done
done
done
python3 - "$D/rows" "$BIN" <<'PY'
import json, subprocess, sys
from statistics import median as med
# (name, P) -> [steps of its runs], [RSS of its runs], [the rounds' predictions],
# [their calibrations], [load cv], args
runs = {}
for line in open(sys.argv[1]):
    name, P, meas, rss, pred, cal, cv, ar, *args = line.split()
    r = runs.setdefault((name, int(P)), [[], [], [], [], [], args, []])
    r[0].append(float(meas)), r[1].append(float(rss)), r[2].append(json.load(open(pred)))
    r[3].append(cal), r[4].append(float(cv)), r[6].append(float(ar))
MiB = 1024 * 1024
def expected(p): return p["memory"].get("expected_total", p["memory"]["total"])
# A round's prediction told the routing its run had (--load-cv): its step, and its
# expected memory (dropless EP's heap grows with the gate's skew).
def given_cv(P, cv, cal, args):
    if cv <= 0: return None
    out = subprocess.run([sys.argv[2], "plan", *args, "--cluster", cal, "--ranks", str(P),
                          "--load-cv", f"{cv:.4f}", "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)
def median_pred(ps):  # the round whose predicted step is the median (its terms shown)
    return sorted(ps, key=lambda p: p["step_s"])[(len(ps) - 1) // 2] if len(ps) % 2 else \
        dict(sorted(ps, key=lambda p: p["step_s"])[len(ps) // 2 - 1], step_s=med([p["step_s"] for p in ps]))
rows = []
for (name, P), (m, r, ps, cals, c, a, ars) in runs.items():
    gc = [given_cv(P, cv, cal, a) for cv, cal in zip(c, cals)]
    gcv = None if gc[0] is None else (med([g["step_s"] for g in gc]), med([expected(g) for g in gc]))
    spread = 50 * (max(m) - min(m)) / med(m)  # half the runs' range, % of their median
    rows.append((name, P, med(m), med(r), median_pred(ps), med(c), gcv,
                 med(ars), med([p["time"]["grad_s"] for p in ps]), spread))
n_runs = min(len(v[0]) for v in runs.values())
print(f"measured: the median of {n_runs} alternated runs per row; predicted: the median of their rounds' predictions")
base = {}
for name, P, meas, rss, p, *_ in rows:
    if name == "tiny_moe": base[P] = rss - expected(p) / MiB
print("process base RSS: " + ", ".join(f"P = {P} {b:.1f} MiB" for P, b in sorted(base.items())))
print("pred s: routing as independent uniform (the planner's default; SWIPE's ranks balanced);"
      " cv: the runs' load_cv, and pred|cv s the prediction given it (--load-cv)")
print("grad ms: the gradient reduction, predicted (grad_s) / measured (train's allreduce_s, the median"
      " over steps and runs; it includes waiting for the slowest rank)")
print("err|cv %: the peak RSS predicted given the runs' load_cv (dropless EP's heap at that imbalance)")
print("±%: half the range of a row's runs over their median, the run-to-run spread")
print(f"{'config':10s} {'P':>2s} {'EP':>3s} {'pred s':>8s} {'meas s':>8s} {'±%':>5s} {'err %':>7s} {'cv':>5s} {'pred|cv s':>9s} {'err %':>7s} {'pred MiB':>9s} {'RSS MiB':>8s} {'err %':>7s} {'err|cv %':>8s} {'grad ms':>11s}  largest predicted terms")
et, em, ec, eg, emc = [], [], [], [], []
within, within_cv, n_model = 0, 0, 0  # M1/M2 rows (not the base rows) within +-10%
within_sp, within_cv_sp = 0, 0  # ... or within their runs' spread
for name, P, meas, rss, p, cv, gcv, ar, pg, sp in rows:
    pcv, mcv = gcv if gcv else (None, expected(p))
    b = base.get(P, base.get(2, 0) if P > 1 else 0)
    pm = expected(p) / MiB + b
    e1 = 100 * (p["step_s"] - meas) / meas
    e2 = 100 * (pm - rss) / rss
    et.append(abs(e1))
    pc = pcv if pcv is not None else p["step_s"]
    e3 = 100 * (pc - meas) / meas
    ec.append(abs(e3))
    e4 = 100 * (mcv / MiB + b - rss) / rss
    mark = "base" if name == "tiny_moe" else f"{e2:+7.1f}"
    markc = "base" if name == "tiny_moe" else f"{e4:+8.1f}"
    if mark != "base":
        em.append(e2), emc.append(e4)
        n_model += 1
        within += abs(e1) <= 10
        within_cv += abs(e3) <= 10
        within_sp += abs(e1) <= max(10, sp)
        within_cv_sp += abs(e3) <= max(10, sp)
    t = p["time"]
    terms = sorted([(v, k[:-2]) for k, v in t.items() if k not in ("compute_s", "grad_sum_s") and v > 0], reverse=True)[:3]
    if ar > 0 and pg > 0: eg.append(abs(100 * (pg - ar) / ar))
    grad = f"{1e3 * pg:5.1f}/{1e3 * ar:<5.1f}" if P > 1 else "-"
    print(f"{name:10s} {P:2d} {p['layout']['expert_parallel']:3d} {p['step_s']:8.4f} {meas:8.4f} {sp:5.1f} {e1:+7.1f} {cv:5.2f} {pc:9.4f} {e3:+7.1f} {pm:9.1f} {rss:8.1f} {mark:>7s} {markc:>8s} {grad:>11s}  "
          + ", ".join(f"{k} {v:.3f}" for v, k in terms))
print(f"step time |error|: mean {sum(et)/len(et):.1f}%, max {max(et):.1f}% over {len(et)} rows;"
      f" given the runs' load_cv: mean {sum(ec)/len(ec):.1f}%, max {max(ec):.1f}%")
if n_model:
    print(f"step time within +-10%: {within} of the {n_model} rows besides tiny_moe's; given the runs' load_cv {within_cv}")
    print(f"step time within +-10% or the row's spread: {within_sp} of {n_model}; given the runs' load_cv {within_cv_sp}")
def rss_line(e):
    return (f"mean {sum(map(abs, e))/len(e):.1f}%, max {max(map(abs, e)):.1f}%, most under {min(e):+.1f}%"
            f" over {len(e)} rows")
if em: print(f"peak RSS |error|: {rss_line(em)}; given the runs' load_cv: {rss_line(emc)}")
if eg: print(f"gradient reduction |error|: mean {sum(eg)/len(eg):.1f}%, max {max(eg):.1f}% over {len(eg)} rows")
PY
