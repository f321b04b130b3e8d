#include "bench_util.h"

#include <stdlib.h>

#include "core/timer.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

double bench_slowest_ms(dist_comm *c, void (*run)(void *ctx), void *ctx) {
    dist_barrier(c);
    const double t0 = bg_now();
    run(ctx);
    double ms = (bg_now() - t0) * 1e3;
    dist_allreduce_max_f64(c, &ms, 1);
    return ms;
}
