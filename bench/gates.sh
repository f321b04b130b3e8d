#!/usr/bin/env bash
# The gates side by side (issue 14). Three parts, each a table on stdout:
#
#   bench/gates.sh quality [STEPS]  the demo corpus (King James Bible, the demo model),
#       STEPS (default 600) per gate with the same seed, 2 ranks (EP=2: swipe balances
#       over workers, so every gate runs in the same layout): validation loss, load CV,
#       max/mean, drop %, dead experts, step time.
#   bench/gates.sh speed [PAIRS]    M1 bench_step per gate against topk with the same k
#       (and capacity), runs alternated, PAIRS (default 3) pairs: median ratio.
#   bench/gates.sh skew [STEPS]     the skewed start at P=4, EP=4: a shard of one repeated
#       token under RoPE gives every token the same router input, so every token prefers
#       the same experts; per gate the most expert rows a rank received (its high-water
#       mark, against its bound or limit) and the peak resident memory of a rank.
#
# BUILD (default build), OUT (default out/gates), THREADS (default 2), ONLY (gate names:
# run just those).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
BIN=$ROOT/$BUILD/bagualu
OUT=${OUT:-out/gates}
THREADS=${THREADS:-2}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
mkdir -p "$OUT"
[ -x "$BIN" ] || { echo "gates: $BIN not found (make build first)" >&2; exit 2; }

# The gates and their settings: name, then config keys added to the base config.
GATES=(
  "topk|"
  "switch|\"num_experts_per_tok\": 1, \"capacity_factor\": 1.25"
  "gshard|\"capacity_factor\": 2.0"
  "noisy_topk|"
  "swipe|"
  "bias|\"router_score\": \"sigmoid\""
)
if [ -n "${ONLY:-}" ]; then
    kept=()
    for g in "${GATES[@]}"; do [[ " $ONLY " == *" ${g%%|*} "* ]] && kept+=("$g"); done
    GATES=("${kept[@]}")
fi

# variant BASE_CONFIG GATE EXTRA OUT_CONFIG: the base config with router_type and EXTRA.
variant() {
    python3 - "$1" "$2" "$3" "$4" <<'PY'
import json, sys
base, gate, extra, out = sys.argv[1:]
c = json.load(open(base))
c["router_type"] = gate
if extra:
    c.update(json.loads("{" + extra + "}"))
json.dump(c, open(out, "w"), indent=1)
PY
}

corpus() {  # the demo's corpus, tokenizer and shards, once
    [ -s "$OUT/data/train.bin" ] && return
    command -v bible >/dev/null || { echo "gates: needs the bible command (make demo installs bible-kjv)" >&2; exit 2; }
    bible -f "Gen1:1-Rev22:21" </dev/null 2>/dev/null |
        awk '{ ref = $1; sub(/^[^ ]+ /, ""); split(ref, a, ":"); if (a[2] == "1" && NR > 1) printf "<|endoftext|>"; print }' \
            >"$OUT/kjv.txt"
    "$BIN" tokenizer train --vocab-size 4096 --out "$OUT/tok.json" "$OUT/kjv.txt" >/dev/null
    "$BIN" prepare --tokenizer "$OUT/tok.json" --out "$OUT/data" "$OUT/kjv.txt" >/dev/null
}

quality() {
    local steps=${1:-600}
    corpus
    echo "quality: configs/demo_moe.json by gate, $steps steps, 2 ranks (EP=2) of 8 x 128 tokens (the demo's batch), seed 1337"
    printf '%-11s %9s %8s %9s %7s %5s %9s\n' gate val_loss load_cv max/mean drop_% dead step_ms
    for g in "${GATES[@]}"; do
        local name=${g%%|*} extra=${g#*|} run=$OUT/quality-${g%%|*}
        mkdir -p "$run"
        variant configs/demo_moe.json "$name" "$extra" "$run/config.json"
        "${MPIRUN[@]}" -np 2 "$BIN" train --config "$run/config.json" --data "$OUT/data/train.bin" \
            --val "$OUT/data/val.bin" --eval-batches 8 --batch-size 8 --seq-len 128 --steps "$steps" \
            --warmup $((steps / 20)) --lr 3e-3 --min-lr 3e-4 --seed 1337 --threads 1 \
            --expert-parallel 2 --log "$run/metrics.jsonl" >"$run/stdout" 2>&1 ||
            { echo "gates: $name failed (see $run/stdout)" >&2; continue; }
        python3 - "$run/metrics.jsonl" "$run/stdout" "$name" <<'PY'
import json, re, statistics as st, sys
lines = [m for m in map(json.loads, open(sys.argv[1])) if "step" in m]
tail = lines[-min(100, len(lines)):]  # the last 100 steps: the trained router
out = open(sys.argv[2]).read().replace("\r", "\n")
val = re.findall(r"val loss after training: ([0-9.]+)", out)
mean = lambda key: st.median(st.mean(l[key]) for l in tail)
print(f"{sys.argv[3]:<11} {val[-1] if val else 'n/a':>9} {mean('load_cv'):8.3f} "
      f"{mean('max_over_mean'):9.3f} {100 * mean('drop_frac'):7.2f} {sum(lines[-1]['dead_experts']):5d} "
      f"{1000 * st.median(l['step_s'] for l in lines[10:]):9.1f}")
PY
    done
}

speed() {
    local pairs=${1:-3} bench=$ROOT/$BUILD/bench/bench_step
    cmake --build "$BUILD" --target bench_step >/dev/null
    echo "speed: configs/m1.json by gate, bf16, batch 8 x 256, $THREADS threads, $pairs alternated pairs"
    echo "(one process: swipe has one worker, so its exchange of counts does not run)"
    printf '%-11s %10s %10s %9s\n' gate gate_ms topk_ms median_ratio
    step_ms() {
        "$bench" --config "$1" --batch 8 --seq 256 --threads "$THREADS" --steps 8 --warmup 2 \
            --dtype bf16 | sed -n 's/^train step: median \([0-9.]*\) ms.*/\1/p'
    }
    for g in "${GATES[@]}"; do
        local name=${g%%|*} extra=${g#*|}
        [ "$name" = topk ] && continue
        variant configs/m1.json "$name" "$extra" "$OUT/m1-$name.json"
        # The reference: topk with this gate's k and capacity.
        variant "$OUT/m1-$name.json" topk "\"router_score\": \"softmax\"" "$OUT/m1-$name-ref.json"
        local ratios=() a b last_a last_b
        for ((i = 1; i <= pairs; i++)); do
            if ((i % 2)); then a=$(step_ms "$OUT/m1-$name.json"); b=$(step_ms "$OUT/m1-$name-ref.json")
            else b=$(step_ms "$OUT/m1-$name-ref.json"); a=$(step_ms "$OUT/m1-$name.json"); fi
            ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.4f", a / b }')")
            last_a=$a last_b=$b
        done
        printf '%-11s %10s %10s %9s\n' "$name" "$last_a" "$last_b" \
            "$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{ v[NR] = $1 } END {
                print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')"
    done
}

skew() {
    local steps=${1:-20}
    # One token repeated: with RoPE (no learned positions) every token enters the
    # router with the same activation, so all choose the same experts.
    python3 - "$OUT/skew.bin" <<'PY'
import struct, sys
n = 200000
open(sys.argv[1], "wb").write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)) + struct.pack("<H", 7) * n)
PY
    echo "skew: configs/demo_moe.json, every token the same, P=4, EP=4, 16 x 128 tokens per rank, $steps steps"
    printf '%-11s %-42s %s\n' gate "most expert rows a rank received" "peak RSS per rank"
    for g in "${GATES[@]}"; do
        local name=${g%%|*} extra=${g#*|} run=$OUT/skew-${g%%|*}
        mkdir -p "$run"
        variant configs/demo_moe.json "$name" "$extra" "$run/config.json"
        "${MPIRUN[@]}" -np 4 "$BIN" train --config "$run/config.json" --data "$OUT/skew.bin" \
            --batch-size 16 --seq-len 128 --steps "$steps" --seed 1337 --threads 1 \
            --expert-parallel 4 >"$run/stdout" 2>&1 ||
            { echo "gates: skew $name failed (see $run/stdout)" >&2; continue; }
        sed -n 's/^expert rows per rank: high-water mark \(.*\); peak memory per rank (RSS) \(.*\)$/\1|\2/p' \
            "$run/stdout" | awk -F'|' -v g="$name" '{ printf "%-11s %-42s %s\n", g, $1, $2 }'
    done
}

case "${1:-all}" in
quality) quality "${2:-}" ;;
speed) speed "${2:-}" ;;
skew) skew "${2:-}" ;;
all) quality; speed; skew ;;
*) echo "usage: bench/gates.sh [quality [STEPS] | speed [PAIRS] | skew [STEPS]]" >&2; exit 2 ;;
esac
