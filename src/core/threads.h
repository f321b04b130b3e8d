#ifndef BG_CORE_THREADS_H
#define BG_CORE_THREADS_H
#include <stddef.h>

// One OpenMP thread pool for everything: oneDNN is built on the same OpenMP
// runtime, so setting the count here sizes both and nothing oversubscribes.
void bg_threads_set(int n);  // n <= 0 keeps the runtime default
int bg_threads_get(void);
// Whether work here should stay on the calling thread rather than start a team: inside
// a parallel region (a concurrent expert: a nested team gains nothing) or with a pool
// of one thread. libgomp allocates every team it starts, a team of one too.
int bg_serial_here(void);
// body(ctx, i0, i1) over [0, n) in contiguous ranges, one per thread of the team; the
// whole range on the calling thread where bg_serial_here.
void bg_parallel_ranges(size_t n, void (*body)(void *ctx, size_t i0, size_t i1), void *ctx);
#endif
