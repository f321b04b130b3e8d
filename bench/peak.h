#ifndef BG_BENCH_PEAK_H
#define BG_BENCH_PEAK_H
#include "core/dtype.h"

// This machine's limits, measured in the same run as the benchmark they judge.
// FMA loop: every thread runs independent chains of 512-bit FMAs (AVX-512), enough
// of them to cover the FMA latency, so the loop runs at the core's FMA throughput.
double peak_fma_gflops(int threads, double seconds);
// The same on the calling thread alone, timed by its CPU time (load-proof).
double peak_fma_gflops_cpu(double seconds);
// What that loop runs in this build: "AVX-512 FMA", "AVX2 FMA", or the baseline ISA's
// vector multiply and add (BG_NATIVE=OFF).
const char *peak_fma_name(void);
// The same with bf16 dot products (AVX512_BF16 vdpbf16ps: 2 products per fp32 lane);
// 0 where the CPU or the compiler lacks them.
double peak_bf16_gflops(int threads, double seconds);
// A large square GEMM through the project's matmul (the context's GEMM) at the given precision,
// weights rounded once as in training.
double peak_gemm_gflops(int n, int reps, bg_dtype precision);
#endif
