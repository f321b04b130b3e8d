#include "core/threads.h"

#include <omp.h>

void bg_threads_set(int n) {
    if (n > 0) omp_set_num_threads(n);
}

int bg_threads_get(void) { return omp_get_max_threads(); }

int bg_serial_here(void) { return omp_in_parallel() || omp_get_max_threads() == 1; }

void bg_parallel_ranges(size_t n, void (*body)(void *ctx, size_t i0, size_t i1), void *ctx) {
    if (bg_serial_here()) {
        if (n) body(ctx, 0, n);
        return;
    }
    #pragma omp parallel
    {
        const size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        const size_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
        if (i0 < i1) body(ctx, i0, i1);
    }
}
