#!/usr/bin/env bash
# Per-rank memory by component (bagualu train's memory report: the largest over the
# ranks) for M1 and M2 at P = 1, 2, 4 with and without recomputation. One training step
# per run; the report is printed before it. Extra flags go to every run (e.g. --zero 1
# once ZeRO-1 exists):   bench/memory_report.sh [bagualu flags...]
# Env: BIN (default build/bagualu), CONFIGS (default "configs/m1.json configs/m2.json"),
# RANKS (default "1 2 4"), GLOBAL_BATCH sequences (default 8), SEQ (default: the
# config's context).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bagualu}
CONFIGS=${CONFIGS:-"configs/m1.json configs/m2.json"}
RANKS=${RANKS:-"1 2 4"}
GB=${GLOBAL_BATCH:-8}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
MPIRUN=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
        mpirun --oversubscribe)
printf "%-8s %2s %-9s %9s %9s %9s %11s %9s %10s %9s %9s %9s\n" config P recompute params grads \
  optimizer activations exchange workspaces snapshot "comm scr" "total MiB"
for cfg in $CONFIGS; do
  name=$(basename "$cfg" .json)
  V=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$cfg")
  T=${SEQ:-$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['max_position_embeddings'])" "$cfg")}
  "$BIN" synth --vocab "$V" --tokens $((GB * (T + 1) * 2 + 1000)) --out "$D/$name.bin" >/dev/null
  for P in $RANKS; do
    for rc in none block; do
      args=(train --config "$cfg" --data "$D/$name.bin" --steps 1 --seq-len "$T"
            --batch-size $((GB / P)) --recompute $rc "$@")
      if [ "$P" = 1 ]; then out=$("$BIN" "${args[@]}" 2>&1)
      else out=$("${MPIRUN[@]}" -np "$P" "$BIN" "${args[@]}" 2>&1); fi
      line=$(grep "^memory per rank" <<<"$out") || { echo "$name P=$P $rc: no report"; tail -3 <<<"$out"; continue; }
      python3 - "$name" "$P" "$rc" "$line" <<'PY'
import re, sys
name, P, rc, line = sys.argv[1:]
v = dict(re.findall(r"(parameters|gradients|optimizer|activations|MoE exchange|workspaces|snapshot|scratch|total) ([0-9.]+)", line))
grown = re.search(r"up to ([0-9.]+) grown", line)
ex = v["MoE exchange"] + (f"+{grown.group(1)}" if grown else "")
print(f"{name:8s} {P:>2s} {rc:9s} {v['parameters']:>9s} {v['gradients']:>9s} {v['optimizer']:>9s} "
      f"{v['activations']:>11s} {ex:>9s} {v['workspaces']:>10s} {v['snapshot']:>9s} {v.get('scratch', '0'):>9s} {v['total']:>9s}")
PY
    done
  done
done
