#!/usr/bin/env bash
# A refactor changes no bit: builds BASE (a commit, default the last one whose bits a
# change altered on purpose: issue 15's norm, issue 19's bf16 path, issue 19's own f32
# GEMM) in a git worktree beside
# this tree's build, trains the same short runs with
# both binaries, and compares every tensor of the final checkpoints by name, bit for
# bit (bench/st_compare.py), and the per-step log lines without their timings.
# Both builds are made here, on this machine: -march=native and oneDNN's per-ISA kernels
# make checksums recorded on another CPU meaningless.
#
#   bench/refactor_bits.sh [BASE]         BITS_DIR (default /tmp/bagualu-bits) holds the
#                                         base worktree, its build and the runs
#   NEW_BUILD=dir  use this tree's build in dir (default build/, configured if absent)
#   RUNS_DIR=dir   where the runs go (default $BITS_DIR/runs)
#   IGNORE_FIELDS="a b"  log fields a change alters on purpose (say why where you report it)
#
# Runs: tiny MoE in fp32 (also at a batch that fuses the LM head), bf16 and fp16 (one
# process, 2 threads), and P=4 under mpirun
# with EP=4 and the hierarchical all-to-all over 2 emulated nodes, and P=4 with EP=2 and
# a chunked flat exchange. Exit 0 only when every run matches.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${1:-fdf8cb3}
. bench/base_worktree.sh
echo "base $base_sha, new $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo +changes): building"
base_build bagualu_cli
OLD=$base_tree/build/bagualu
NEW=$NEW_BUILD/bagualu

RUNS=${RUNS_DIR:-$BITS_DIR/runs}
rm -rf "$RUNS" && mkdir -p "$RUNS"
"$NEW" synth --out "$RUNS/data.bin" --task copy --tokens 200000 --vocab 64 >/dev/null
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 4)
have_mpi=0
command -v mpirun >/dev/null && grep -q 'BG_MPI:BOOL=ON' "$NEW_BUILD/CMakeCache.txt" && have_mpi=1

train() {  # binary, output dir, launcher and extra flags...
    local bin=$1 out=$2
    shift 2
    local launch=()
    if [ "${1:-}" = mpi ]; then launch=("${MPIRUN[@]}"); shift; fi
    mkdir -p "$out"
    "${launch[@]}" "$bin" train --config configs/tiny_moe.json --data "$RUNS/data.bin" --steps 12 \
        --batch-size "${RUN_BATCH:-4}" --seq-len 32 --lr 3e-3 --seed 1337 --save-dir "$out/ck" \
        --log "$out/metrics.jsonl" "$@" >"$out/stdout" 2>&1 || {
        echo "  run failed: $bin $* (see $out/stdout)"; return 1; }
}

# The base's per-step fields, less those that measure time (tokens_per_s, gflops, *_s),
# must read the same in the new log; fields the new build adds are not compared.
log_diff() {
    python3 - "$1" "$2" <<'PY'
import json, re, sys
# Step lines only: the run's description (the first line) and validation lines are
# not in every build's log.
old = [m for m in map(json.loads, open(sys.argv[1])) if "step" in m]
new = [m for m in map(json.loads, open(sys.argv[2])) if "step" in m]
import os
timing = re.compile(r"^(tokens_per_s|gflops|[a-z0-9_]*_s)$")
ignored = set(os.environ.get("IGNORE_FIELDS", "").split())
bad = 0 if len(old) == len(new) else print(f"{len(old)} vs {len(new)} lines") or 1
for o, n in zip(old, new):
    for key, value in o.items():
        if not timing.match(key) and key not in ignored and n.get(key, "missing") != value:
            print(f"step {o.get('step')}: {key} {value} vs {n.get(key, 'missing')}")
            bad = 1
sys.exit(bad)
PY
}

fail=0
check() {  # name, flags...
    local name=$1
    shift
    if ! train "$OLD" "$RUNS/$name/old" "$@" || ! train "$NEW" "$RUNS/$name/new" "$@"; then
        fail=1
        return
    fi
    local a b
    a=$(readlink -f "$RUNS/$name/old/ck/$(cat "$RUNS/$name/old/ck/latest")")
    b=$(readlink -f "$RUNS/$name/new/ck/$(cat "$RUNS/$name/new/ck/latest")")
    printf '%-10s ' "$name"
    if python3 bench/st_compare.py "$a" "$b" >"$RUNS/$name/compare" 2>&1 &&
        log_diff "$RUNS/$name/old/metrics.jsonl" "$RUNS/$name/new/metrics.jsonl" \
            >"$RUNS/$name/log.diff"; then
        echo "equal: $(tail -n 1 "$RUNS/$name/compare"), $(wc -l <"$RUNS/$name/old/metrics.jsonl") log lines"
    else
        echo "DIFFERENT:"
        sed 's/^/    /' "$RUNS/$name/compare" "$RUNS/$name/log.diff" | head -n 20 || true
        fail=1
    fi
}

check fp32 --threads 2
# 36 x 32 = 1152 tokens: the fused LM head (MODEL_LM_HEAD_CHUNK 1024 rows) in two chunks.
RUN_BATCH=36 check fp32_lmfused --threads 2
check bf16 --threads 2 --dtype bf16
check fp16 --threads 2 --dtype fp16
if [ "$have_mpi" = 1 ]; then
    check p4_ep4_hier mpi --threads 1 --expert-parallel 4 --ranks-per-node 2 --a2a hierarchical
    check p4_ep2_chunk mpi --threads 1 --expert-parallel 2 --a2a flat --a2a-chunks 2
else
    echo "refactor_bits: this build has no MPI: the P=4 layouts were not compared" >&2
    fail=1
fi
[ "$fail" = 0 ] && echo "refactor_bits: all runs bitwise equal to $BASE" || echo "refactor_bits: FAILED"
exit $fail
