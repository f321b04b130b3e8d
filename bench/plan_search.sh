#!/usr/bin/env bash
# Does `bagualu plan --search` rank layouts in the order they measure? After one
# calibration of this machine, the search's top TOP layouts of CONFIG at P ranks are
# each trained (rounds alternated, ROUNDS times) and their measured tokens/s (median over
# the steps after 2 warm-up steps of a run, then the median of the rounds) compared with
# the predicted order. A pair counts only where the measured gap exceeds the run-to-run
# spread (max - min over the rounds of either layout).
# Usage: bench/plan_search.sh [build-dir] [steps]
#   env: CONFIG=m2 P=2 BATCH=4 SEQ=128 TOP=3 ROUNDS=3 CLUSTER_FILE=(calibrate anew)
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
STEPS=${2:-6}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CONFIG=${CONFIG:-m2}; P=${P:-2}; BATCH=${BATCH:-4}; SEQ=${SEQ:-128}; TOP=${TOP:-3}; ROUNDS=${ROUNDS:-3}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
cfg=$ROOT/configs/$CONFIG.json
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; commit $(git -C "$ROOT" rev-parse --short HEAD); load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -z "${CLUSTER_FILE:-}" ]; then
  CLUSTER_FILE=$D/this.json
  "$BUILD/bagualu" plan --calibrate --threads 1 --config "$cfg" --batch-size "$BATCH" --seq-len "$SEQ" \
    --out "$CLUSTER_FILE" 2>"$D/cal.err" || { cat "$D/cal.err"; exit 1; }
  echo "calibration: $(tail -1 "$D/cal.err" | sed 's/^plan: wrote [^ ]* //')"
fi
python3 - "$BUILD/bagualu" "$cfg" "$CLUSTER_FILE" "$D" "$P" "$BATCH" "$SEQ" "$TOP" "$ROUNDS" "$STEPS" <<'PY'
import json, os, statistics, subprocess, sys
bin_, cfg, cluster, d, P, B, T, top, rounds, steps = sys.argv[1:]
P, B, T, top, rounds, steps = int(P), int(B), int(T), int(top), int(rounds), int(steps)
found = json.loads(subprocess.check_output([bin_, "plan", "--config", cfg, "--cluster", cluster, "--ranks", str(P),
    "--batch-size", str(B), "--seq-len", str(T), "--search", "--top", str(top), "--json"]))
model = json.load(open(cfg))
vocab = model["vocab_size"]
subprocess.check_call([bin_, "synth", "--vocab", str(vocab), "--tokens", "400000", "--out", f"{d}/data.bin"],
                      stdout=subprocess.DEVNULL)
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
def run(i, lay):
    c = dict(model)
    if lay["capacity"] >= 0: c["capacity_factor"] = lay["capacity"]
    path = f"{d}/cfg{i}.json"
    json.dump(c, open(path, "w"))
    log = f"{d}/log{i}.jsonl"
    if os.path.exists(log): os.remove(log)
    args = [bin_, "train", "--config", path, "--data", f"{d}/data.bin", "--steps", str(steps), "--log", log,
            "--batch-size", str(lay["batch_size"]), "--seq-len", str(lay["seq_len"]), "--dtype", lay["dtype"],
            "--a2a", lay["a2a"], "--recompute", lay["recompute"]]
    if P > 1: args = ["mpirun", "--oversubscribe", "-np", str(P)] + args + [
            "--expert-parallel", str(lay["expert_parallel"]), "--zero", str(lay["zero"])]
    subprocess.run(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lines = [json.loads(l) for l in open(log) if l.startswith('{"step"')][2:]
    return statistics.median(l["tokens_per_s"] for l in lines)
meas = [[] for _ in found]
for r in range(rounds):
    order = range(len(found)) if r % 2 == 0 else reversed(range(len(found)))
    for i in order: meas[i].append(run(i, found[i]["layout"]))
print(f"{'#':>2s} {'EP':>3s} {'B':>3s} {'ZeRO':>4s} {'a2a':12s} {'cap':>5s} {'recmp':5s} {'pred tok/s':>11s} {'meas tok/s':>11s} {'spread':>7s}")
med = []
for i, (f, m) in enumerate(zip(found, meas)):
    l = f["layout"]
    med.append(statistics.median(m))
    print(f"{i+1:2d} {l['expert_parallel']:3d} {l['batch_size']:3d} {l['zero']:4d} {l['a2a']:12s} {l['capacity']:5.3g} "
          f"{l['recompute']:5s} {f['tokens_per_s']:11.1f} {med[-1]:11.1f} {max(m)-min(m):7.1f}")
ok = bad = tie = 0
for i in range(len(found)):
    for j in range(i + 1, len(found)):
        gap = med[i] - med[j]
        spread = max(max(meas[i]) - min(meas[i]), max(meas[j]) - min(meas[j]))
        if abs(gap) <= spread: tie += 1
        elif gap > 0: ok += 1
        else: bad += 1
print(f"pairs in the predicted order: {ok}, reversed: {bad}, within the spread: {tie}")
PY
