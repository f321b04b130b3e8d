#!/usr/bin/env bash
# Runs the benchmarks recorded in BENCHMARKS.md. Usage: bench/run_all.sh [build-dir]
set -euo pipefail
BUILD=${1:-build}
echo "== M1 (vocab 50257, ctx 256, hidden 256, 4 layers, 8 experts top-2, batch 8), fp32, 2 threads"
"$BUILD/bench/bench_step" --config configs/m1.json --batch 8 --seq 256 --threads 2 --steps 10
echo "== M1, bf16"
"$BUILD/bench/bench_step" --config configs/m1.json --batch 8 --seq 256 --threads 2 --steps 10 --dtype bf16
echo "== M1's shape at context 8192 (batch 1, flash attention, fused LM head): step time and peak memory"
"$BUILD/bench/bench_step" --config configs/m1_t8192.json --batch 1 --seq 8192 --threads 2 --steps 3 --warmup 1
echo "== M3 (vocab 32768, ctx 512, hidden 512, 8 layers, 64 experts of 256 top-6 + 2 shared, batch 8), fp32, 2 threads"
"$BUILD/bench/bench_step" --config configs/m3.json --batch 8 --seq 512 --threads 2 --steps 5 --gemm-alone 1
echo "== GPT-2 124M dense, fp32, batch 4 x 64 and 8 x 256"
"$BUILD/bench/bench_step" --config configs/gpt2_124m.json --batch 4 --seq 64 --threads 2 --steps 10
"$BUILD/bench/bench_step" --config configs/gpt2_124m.json --batch 8 --seq 256 --threads 2 --steps 5
echo "== M2 (vocab 8192, ctx 512, hidden 512, 8 layers, 16 experts top-2, SwiGLU/RMSNorm/RoPE, batch 8), fp32, 2 threads"
"$BUILD/bench/bench_step" --config configs/m2.json --batch 8 --seq 512 --threads 2 --steps 10
echo "== tokenizer: bagualu vs gpt-3-encoder (node) on the same text"
bench/bench_tokenizer.sh "$BUILD"
echo "== bagualu beside PyTorch (bench/peer_torch.py: default and tuned set-ups), M1 and M2, fp32 and bf16; then the issue-19 report (M1-M3, GPT-2, tuned peer)"
"$(dirname "$0")/run_peer.sh" "$BUILD"
"$(dirname "$0")/cpu_report.sh" "$BUILD"
echo "== expert + data parallel: M1 at P=2 x 1 thread vs P=1 x 2 threads; flat vs hierarchical all-to-all"
bench/bench_parallel.sh "$BUILD"
