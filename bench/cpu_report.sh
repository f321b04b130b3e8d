#!/usr/bin/env bash
# One report of bagualu's speed on this CPU (issue 19), for BENCHMARKS.md:
#   bench/cpu_report.sh [build-dir]
# The CPU (model name, family/model, the flags that choose the bf16 path, the path the
# table picks), then bench/run_peer.sh over M1, M2, M3 in fp32 and bf16 and GPT-2 124M
# (dense, fp32) at batch 4 x 64 and 8 x 256, against the tuned PyTorch peer: ms/step, %
# of the FMA peak and of the bf16 dot-product peak measured in the same run, the ratio to
# the peer, and step time / the step's GEMMs run alone (bench_step --gemm-alone 1).
# Knobs: STEPS (default 5), REPEAT (1), MODELS, DTYPES, as run_peer.sh. Run it on a quiet
# machine: every figure is a wall-clock time.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
echo "== cpu_report: commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo +changes), $(date -u +%FT%TZ)"
lscpu | grep -E "^(Model name|Vendor ID|CPU family|Model|Stepping|CPU\(s\)):" | sed 's/  */ /g'
echo "flags: $(grep -m1 -ow -E 'avx512f|avx512_bf16|avx512_fp16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
cmake --build "$BUILD" --target bench_step kernels_test_bf16_path >/dev/null
"$BUILD/tests/kernels_test_bf16_path" | grep "this CPU"
echo "load before: $(uptime)"
export STEPS=${STEPS:-5} PEER_DEFAULT=0 BENCH_EXTRA="--gemm-alone 1"
# Without bf16 instructions PyTorch emulates bf16, tens of times slower (BENCHMARKS.md,
# issue 19): its runs get a budget of 10 minutes each, so fewer steps.
grep -qw avx512_bf16 /proc/cpuinfo || export PEER_TUNED_MAX_S=${PEER_TUNED_MAX_S:-600}
export MODELS=${MODELS:-m1 m2 m3} DTYPES=${DTYPES:-fp32 bf16}
bench/run_peer.sh "$BUILD"
MODELS="gpt2_4x64 gpt2_8x256" DTYPES=fp32 bench/run_peer.sh "$BUILD"
