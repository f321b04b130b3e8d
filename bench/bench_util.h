#ifndef BG_BENCH_UTIL_H
#define BG_BENCH_UTIL_H
// What the benchmarks share beyond peaks (peak.h) and bg_median (core/timer.h): timing
// a collective.
#include "comm/dist.h"

// One call of run(ctx) on every rank of c, started together after a barrier: its
// milliseconds on the slowest rank (a collective lasts as long as its slowest rank).
double bench_slowest_ms(dist_comm *c, void (*run)(void *ctx), void *ctx);
#endif
