#!/usr/bin/env bash
# Checkpoint cost, two numbers (BENCHMARKS.md, issue 15):
#   1. save time at P = 1, 2, 4 (every rank writes its own files in parallel): runs of
#      SAVE_STEPS steps saving synchronously after every step against the same runs
#      without saves, alternated; (median with - median without) / SAVE_STEPS per save;
#   2. the overhead of asynchronous saves: STEPS steps with a save every EVERY steps
#      (--save-async 1, the default) against the same run without saves, alternated
#      PAIRS times, medians of the total times (wall) and of the process CPU times (user
#      + system: less sensitive to other jobs), and from the runs' JSONL the step's wait
#      per save (the copy into the snapshot) and the writer thread's CPU per save.
#
#   bench/ckpt_save.sh        CONFIG=configs/m1.json STEPS=300 EVERY=100 PAIRS=3
#                             SAVE_STEPS=4 NPS="1 2 4" BATCH=8 SEQ=64 THREADS=2 (per rank:
#                             THREADS/P), SAVE_ROOT (default a temporary directory: put
#                             it on the disk to measure), NEW_BUILD (default build/)
# A quick check that it works: STEPS=4 EVERY=2 PAIRS=1 SAVE_STEPS=1 NPS="1 2" SEQ=16.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${CONFIG:-configs/m1.json}
STEPS=${STEPS:-300} EVERY=${EVERY:-100} PAIRS=${PAIRS:-3} SAVE_STEPS=${SAVE_STEPS:-4}
NPS=${NPS:-1 2 4} BATCH=${BATCH:-8} SEQ=${SEQ:-64} THREADS=${THREADS:-2}
BIN=${NEW_BUILD:-build}/bagualu
[ -x "$BIN" ] || { echo "no $BIN: build first"; exit 1; }
W=$(mktemp -d "${SAVE_ROOT:-${TMPDIR:-/tmp}}/ckpt_save.XXXXXX")
trap 'rm -rf "$W"' EXIT
VOCAB=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$CONFIG")
"$BIN" synth --vocab "$VOCAB" --tokens 400000 --out "$W/data.bin" >/dev/null
MPIRUN=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe)
echo "ckpt_save: $(lscpu | sed -n 's/^Model name: *//p'), $(git rev-parse --short HEAD), $CONFIG, global batch $BATCH x $SEQ"

# seconds NP ARGS...: wall time of one `bagualu train` run; its CPU time (user + system
# of the processes) is left in $W/cpu
seconds() {
    local np=$1; shift
    local th=$((THREADS / np > 0 ? THREADS / np : 1)) TIMEFORMAT='%R %U %S'
    rm -rf "$W/s"
    {
        time if [ "$np" -eq 1 ]; then
            "$BIN" train --config "$CONFIG" --data "$W/data.bin" --batch-size "$BATCH" --seq-len "$SEQ" --threads "$th" "$@" >/dev/null
        else
            "${MPIRUN[@]}" -np "$np" "$BIN" train --config "$CONFIG" --data "$W/data.bin" --batch-size $((BATCH / np)) \
                --seq-len "$SEQ" --threads "$th" "$@" >/dev/null
        fi
    } 2>"$W/time"
    tail -n 1 "$W/time" | awk -v f="$W/cpu" '{ printf "%.3f", $1; printf "%.3f\n", $2 + $3 > f }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

for np in $NPS; do
    with=() without=()
    for ((i = 1; i <= PAIRS; i++)); do
        if ((i % 2)); then
            with+=("$(seconds "$np" --steps "$SAVE_STEPS" --save-dir "$W/s" --save-every 1 --save-async 0)")
            size=$(du -sk "$W/s/step_$(printf %08d "$SAVE_STEPS")" | cut -f1)
            without+=("$(seconds "$np" --steps "$SAVE_STEPS")")
        else
            without+=("$(seconds "$np" --steps "$SAVE_STEPS")")
            with+=("$(seconds "$np" --steps "$SAVE_STEPS" --save-dir "$W/s" --save-every 1 --save-async 0)")
            size=$(du -sk "$W/s/step_$(printf %08d "$SAVE_STEPS")" | cut -f1)
        fi
    done
    a=$(printf '%s\n' "${with[@]}" | median); b=$(printf '%s\n' "${without[@]}" | median)
    awk -v a="$a" -v b="$b" -v n="$SAVE_STEPS" -v np="$np" -v kb="${size:-0}" 'BEGIN {
        printf "save P=%d: %.3f s per synchronous save (runs %.2f s with, %.2f s without; %.1f MiB per checkpoint)\n",
               np, (a - b) / n, a, b, kb / 1024 }'
done

with=() without=() cwith=() cwithout=()
log_with() { seconds 1 --steps "$STEPS" --save-dir "$W/s" --save-every "$EVERY" --log "$W/log"; cat "$W/log" >>"$W/saves"; }
: >"$W/saves"
for ((i = 1; i <= PAIRS; i++)); do
    if ((i % 2)); then
        with+=("$(log_with)"); cwith+=("$(cat "$W/cpu")")
        without+=("$(seconds 1 --steps "$STEPS")"); cwithout+=("$(cat "$W/cpu")")
    else
        without+=("$(seconds 1 --steps "$STEPS")"); cwithout+=("$(cat "$W/cpu")")
        with+=("$(log_with)"); cwith+=("$(cat "$W/cpu")")
    fi
    echo "async pair $i: with saves ${with[-1]} s (CPU ${cwith[-1]} s), without ${without[-1]} s (CPU ${cwithout[-1]} s)"
done
a=$(printf '%s\n' "${with[@]}" | median); b=$(printf '%s\n' "${without[@]}" | median)
ca=$(printf '%s\n' "${cwith[@]}" | median); cb=$(printf '%s\n' "${cwithout[@]}" | median)
# The save lines of the JSONL: the step's wait and the writer thread's CPU, per save.
read -r nsave block wcpu wsec < <(sed -n 's/.*"save_block_s":\([0-9.]*\),"save_writer_s":\([0-9.]*\),"save_writer_cpu_s":\([0-9.]*\).*/\1 \3 \2/p' \
    "$W/saves" | awk '{ n++; b += $1; c += $2; w += $3 } END { printf "%d %.3f %.3f %.3f\n", n, n ? b / n : 0, n ? c / n : 0, n ? w / n : 0 }')
awk -v a="$a" -v b="$b" -v ca="$ca" -v cb="$cb" -v s="$STEPS" -v e="$EVERY" -v p="$PAIRS" -v n="$nsave" \
    -v bl="$block" -v wc="$wcpu" -v ws="$wsec" 'BEGIN {
    printf "async saves every %d of %d steps: %d saves, per save: step waits %.3f s (snapshot copy), writer %.3f s, writer CPU %.3f s; a step takes %.3f s CPU\n",
           e, s, n, bl, ws, wc, cb / s
    printf "async overhead: wall median %.2f s vs %.2f s without: %.2f%%; CPU median %.2f s vs %.2f s: %.2f%% (%d pairs)\n",
           a, b, 100 * (a - b) / b, ca, cb, 100 * (ca - cb) / cb, p }'
