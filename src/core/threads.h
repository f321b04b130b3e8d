#ifndef BG_CORE_THREADS_H
#define BG_CORE_THREADS_H
#include <stddef.h>

// One OpenMP thread pool for everything: oneDNN is built on the same OpenMP
// runtime, so setting the count here sizes both and nothing oversubscribes.
void bg_threads_set(int n);  // n <= 0 keeps the runtime default
int bg_threads_get(void);
// body(ctx, i0, i1) over [0, n) in contiguous ranges, one per thread of the team when
// called outside a parallel region; inside one (a concurrent expert), the whole range on
// the calling thread: a nested team gains nothing, and libgomp allocates every one.
void bg_parallel_ranges(size_t n, void (*body)(void *ctx, size_t i0, size_t i1), void *ctx);
#endif
