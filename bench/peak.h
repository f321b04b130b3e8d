#ifndef BG_BENCH_PEAK_H
#define BG_BENCH_PEAK_H
// This machine's limits, measured in the same run as the benchmark they judge.
// FMA loop: every thread runs independent chains of 512-bit FMAs (AVX-512), enough
// of them to cover the FMA latency, so the loop runs at the core's FMA throughput.
double peak_fma_gflops(int threads, double seconds);
// A large square fp32 GEMM through the project's matmul (oneDNN).
double peak_gemm_gflops(int n, int reps);
#endif
