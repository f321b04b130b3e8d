#ifndef BG_BENCH_UTIL_H
#define BG_BENCH_UTIL_H
// What the benchmarks share beyond peaks (peak.h): medians, and timing a collective.
#include "comm/dist.h"

// The median of n > 0 values: v sorted in place, then v[n/2] (the upper middle for an
// even n), so a caller may read v[0] and v[n-1] as the extremes afterwards.
double bench_median(double *v, int n);

// One call of run(ctx) on every rank of c, started together after a barrier: its
// milliseconds on the slowest rank (a collective lasts as long as its slowest rank).
double bench_slowest_ms(dist_comm *c, void (*run)(void *ctx), void *ctx);
#endif
